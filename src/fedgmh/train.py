"""`fedgmh train` (`run_training`), in four steps: resolve the run (fedgmh.train_resolve), build its data,
model and algorithm, run its rounds, record it (fedgmh.train_record); `run_group` trains runs together.

Outputs (written atomically, so a killed run never leaves a file that looks finished):
RUNDIR/metrics.csv (one row per evaluated round), RUNDIR/clients.csv (each client's test accuracy
in the best and in the last evaluated round), the algorithm's own tables when it has any
(`Algorithm.extra_records`, e.g. pFedLA's layer_weights.csv) and RUNDIR/run.json, the run's one record (config,
resolved options, versions, device and `machine` (fedgmh.machine), wall time, best accuracy, and under `workflow` the labels the
workflow gives the run: config name, experiment, setting, variant).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import math
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedgmh import data, stopping
from fedgmh.algorithms import get_algorithm
from fedgmh.cadence import DEFAULT_CADENCE, describe_cadence
from fedgmh.cards import resolve_options
from fedgmh.config import EngineOptions, TrainConfig, selects_a_client
from fedgmh.engine import Federation, Member, RunGroup, cuda_flags, run_rounds
from fedgmh.errors import Interrupted, UserError
from fedgmh.model import FedAvgCNN, use_unfold_convolutions
from fedgmh.partition import load_partition
from fedgmh.train_record import PlayedRounds, record_run
from fedgmh.train_resolve import ResolvedRun, pick_device, resolve_run


def build_federation(config: TrainConfig, engine: EngineOptions, device: torch.device,
                     dataset: data.LoadedDataset | None = None) -> tuple[Federation, dict]:
    """Load the dataset (unless given: `SharedRuns.dataset`) and partition (checking that they belong
    together) and build the model (with engine option conv=unfold, its convolutions unfolded:
    `model.use_unfold_convolutions`)."""
    info = data.get_info(config.dataset)
    partition, meta = load_partition(Path(config.partition))
    dataset = dataset or data.load_dataset(config.dataset, Path(config.root), device=device)
    if meta.get("dataset") not in (None, config.dataset):
        raise UserError(f"partition {config.partition} was made for dataset {meta['dataset']!r}, not {config.dataset!r}")
    if meta.get("dataset_fingerprint") not in (None, dataset.fingerprint):
        raise UserError(f"partition {config.partition} was made from different {config.dataset} data (fingerprint mismatch); re-run `fedgmh partition`")
    all_idx = np.concatenate(partition.train + partition.test)
    if len(all_idx) and (all_idx.min() < 0 or all_idx.max() >= len(dataset.labels)):
        raise UserError(f"partition {config.partition} indexes samples outside {config.dataset} ({len(dataset.labels)} samples)")
    torch.manual_seed(config.seed)  # every client starts from these same initial weights
    model = FedAvgCNN(info.channels, dataset.num_classes, info.height).to(device)
    if engine.conv == "unfold":
        use_unfold_convolutions(model)
    as_tensor = lambda a: torch.as_tensor(a, dtype=torch.long, device=device)  # noqa: E731
    fed = Federation(
        model=model,
        images=dataset.images,
        labels=dataset.labels,
        train_idx=[as_tensor(a) for a in partition.train],
        test_idx=[as_tensor(a) for a in partition.test],
        num_classes=dataset.num_classes,
        batch_size=config.batch_size,
        local_epochs=config.local_epochs,
        lr=config.lr,
        options=engine,
        seed=config.seed,
    )
    return fed, {**meta, "digest": partition.digest()}


def live_terminal(stream) -> bool:
    """Whether progress may redraw one line on `stream`: a terminal, unless NO_COLOR is set or TERM=dumb
    (which ask for plain output). Logs, pipes and CI are not terminals and get plain lines."""
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def clock(seconds: float) -> str:
    """A duration as h:mm:ss (8:34:07), the form a long run's ETA is read at a glance."""
    whole = max(0, round(seconds))
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


class ProgressLog:
    """Progress on `stream` (stderr). In a log: one concise line per evaluated round (accuracy, best
    so far, speed, ETA) and, in a stretch of rounds that are not evaluated (eval_every, eval_last),
    one line every `QUIET_EVERY` rounds with the speed alone, so a long run never goes silent. On a
    terminal (`live_terminal`): one line redrawn with `\r` after every round (round, percent,
    elapsed, ETA, the last evaluated accuracies), ended by `close`."""

    QUIET_EVERY = 10

    def __init__(self, algorithm: str, rounds: int, first_round: int = 0, stream=None) -> None:
        self.algorithm, self.rounds, self.start, self.best = algorithm, rounds, time.perf_counter(), 0.0
        self.first_round = first_round  # a resumed run starts past round 0: its speed is from here
        self.last_evaluated: int | None = None
        self.stream = sys.stderr if stream is None else stream
        self.live = live_terminal(self.stream)
        self.latest = "acc n/a"  # the live line's view of the last evaluated round
        self.shown = 0  # characters of the live line now on the terminal

    def __call__(self, row: dict) -> None:
        self.best = max(self.best, row["test_acc"])
        self.last_evaluated = row["round"]
        loss = row["train_loss"]  # NaN in the final evaluation, which trains nothing
        loss_text = "n/a" if loss is None or math.isnan(loss) else f"{loss:.4f}"
        self.latest = f"acc {100 * row['test_acc']:.2f} % best {100 * self.best:.2f} % train_loss {loss_text}"
        if not self.live:
            self._line(row["round"], self.latest)

    def played(self, rnd: int) -> None:
        """After every round played, evaluated or not (`engine.run_rounds`' `on_played`)."""
        if self.live:
            self._redraw(rnd)
        elif rnd != self.last_evaluated and (rnd + 1) % self.QUIET_EVERY == 0:
            self._line(rnd, "not evaluated")

    def close(self) -> None:
        """End the live line, so that what is printed next starts on a line of its own."""
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()
            self.shown = 0

    def _timing(self, rnd: int) -> str:
        done_here = rnd + 1 - self.first_round  # rounds this process ran
        elapsed = time.perf_counter() - self.start
        eta = elapsed / done_here * (self.rounds - rnd)
        return f"{clock(elapsed)} elapsed, ETA {clock(eta)}"

    def _line(self, rnd: int, what: str) -> None:
        print(f"[{self.algorithm}] round {rnd}/{self.rounds} {what} | {self._timing(rnd)}", file=self.stream, flush=True)

    def _redraw(self, rnd: int) -> None:
        percent = 100 * (rnd + 1) / (self.rounds + 1)  # rounds 0..rounds are played
        text = f"[{self.algorithm}] round {rnd}/{self.rounds} {percent:3.0f}% | {self._timing(rnd)} | {self.latest}"
        text = text[: max(shutil.get_terminal_size().columns - 1, 20)]  # a wrapped line could not be redrawn
        self.stream.write("\r" + text + " " * (self.shown - len(text)))
        self.stream.flush()
        self.shown = len(text)


class SharedRuns:
    """What the runs of a group (`run_group`) share: the device (one GPU slot for the process) and each
    dataset's tensors, loaded once (in the layout of engine option memory_format)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.devices: dict[str, torch.device] = {}
        self.datasets: dict[tuple, data.LoadedDataset] = {}

    def device(self, name: str, jobs_per_gpu: int) -> torch.device:
        with self.lock:
            if name not in self.devices:
                self.devices[name] = pick_device(name, jobs_per_gpu)
            return self.devices[name]

    def dataset(self, config: TrainConfig, device: torch.device, memory_format: str) -> data.LoadedDataset:
        key = (config.dataset, str(Path(config.root).resolve()), str(device), memory_format)
        with self.lock:
            if key not in self.datasets:
                loaded = data.load_dataset(config.dataset, Path(config.root), device=device)
                if memory_format == "channels_last" and loaded.images.dim() == 4:  # as Federation lays it out
                    loaded.images = loaded.images.contiguous(memory_format=torch.channels_last)
                self.datasets[key] = loaded
            return self.datasets[key]


def run_training(config: TrainConfig, out_dir: Path, progress: bool = True, checkpoint_every: int | str = DEFAULT_CADENCE,
                 stores: list[Path] | None = None, overwrite: bool = False, jobs_per_gpu: int = 1,
                 workflow: dict[str, str] | None = None, member: Member | None = None, shared: SharedRuns | None = None) -> dict:
    """Run one federated training run and write metrics.csv and run.json into `out_dir`, in four steps:
    resolve (`train_resolve.resolve_run`), build (`build_run`), run (`train_rounds`) and record
    (`train_record.record_run`).

    The run's state goes to `out_dir/checkpoint.pt` every `checkpoint_every` (K rounds, or "Ss": after
    S seconds of training, `checkpoint.snapshot_cadence`; an execution option, not part of the run); a
    run started again with the same settings resumes from it (0 = no checkpoints). When a folder of
    `stores` holds the record of exactly this run (fedgmh.store), that record is copied to
    `out_dir` instead of training. When `out_dir` already holds the finished record of this run
    (`train_resolve.finished_run`), it is returned and nothing is trained; a finished run of other settings there
    is refused unless `overwrite` (then replaced, when this run completes). `out_dir` is checked (created and written to for a test) before
    anything else is done, so a bad folder is reported at once, not when the run ends.
    `jobs_per_gpu`: how many jobs share a GPU under `--device cuda:auto` (gpu_slots); it changes
    where the run trains, never its numbers. `workflow`: the labels the workflow gives the run
    (store.WORKFLOW_LABELS), recorded in run.json under `workflow`, also in a reused or finished record.
    `member`: the run's place in a group of runs trained together (`run_group`), whose device and data
    come from `shared`; it leaves the group when its rounds end.
    """
    run = resolve_run(config, out_dir, checkpoint_every=checkpoint_every, stores=stores, overwrite=overwrite,
                      jobs_per_gpu=jobs_per_gpu, workflow=workflow, progress=progress,
                      take_device=shared.device if shared else pick_device)
    if not isinstance(run, ResolvedRun):
        return run  # the record made already: finished in out_dir, or reused from a store
    fed, algorithm = build_run(run, member, shared)
    played = train_rounds(run, fed, algorithm, member, progress)
    return record_run(run, fed, algorithm, played)


def build_run(run: ResolvedRun, member: Member | None, shared: SharedRuns | None) -> tuple[Federation, Any]:
    """The resolved run's data, partition, model and algorithm, refused when no round could train a client."""
    config, engine, device = run.config, run.engine, run.device
    # a group's runs build their models one at a time: building draws from torch's global generator
    with member.group.setup_lock if member else contextlib.nullcontext():
        fed, _ = build_federation(config, engine, device, shared.dataset(config, device, engine.memory_format) if shared else None)
        if not selects_a_client(fed.num_clients, config.join_ratio):
            raise UserError(f"join ratio {config.join_ratio} selects no client out of {fed.num_clients}")
        if engine.drop_last and fed.train_sizes().max() < config.batch_size:
            raise UserError(f"with drop_last no client has a full batch of {config.batch_size} (the largest train split has "
                            f"{fed.train_sizes().max()} samples), so nothing would train: use --batch-size <= "
                            f"{fed.train_sizes().max()} or --set drop_last=false")
        fed.group = member.group if member else None  # before the algorithm: its views of fed keep the group
        algorithm = get_algorithm(config.algorithm)(fed, run.algo_options)
    return fed, algorithm


def train_rounds(run: ResolvedRun, fed: Federation, algorithm, member: Member | None, progress: bool) -> PlayedRounds:
    """The round loop, from the run's snapshot when it has one; a stop (Interrupted) says how the run goes on."""
    config, checkpoint = run.config, run.checkpoint
    resumed = None  # a stop while the snapshot loads (seconds, for a 100-client state) keeps it: the run resumes from it
    try:
        resumed = checkpoint.load()
        started = dt.datetime.now(dt.timezone.utc)
        wall = time.perf_counter()
        log = ProgressLog(config.algorithm, config.rounds, resumed["next_round"] if resumed else 0) if progress else None
        if resumed is not None and progress:
            print(f"[{config.algorithm}] resuming from {checkpoint.path} at round {resumed['next_round']}", file=sys.stderr, flush=True)
        try:
            rows = run_rounds(fed, algorithm, config.rounds, config.join_ratio, on_round=log, checkpoint=checkpoint, snapshot=resumed,
                              on_played=log.played if log else None)
        finally:
            if member is not None:
                member.leave()  # the other runs no longer wait for this one
            if log is not None:
                log.close()
    except Interrupted as stop:
        # a snapshot on disk now is this run's (another run's is refused when loading): also one written
        # just before the stop arrived, in the instant before the round loop took note of it
        if stop.details.get("resume_round") is not None or checkpoint.path.is_file():
            stop.message += "; the same command resumes from the checkpoint"
        elif checkpoint.periodic:
            cadence = describe_cadence(checkpoint.every, checkpoint.seconds)
            stop.message += f"; no checkpoint yet ({cadence}): the same command starts again"
        else:
            stop.message += "; checkpoints are off (--checkpoint-every 0): the same command starts again"
        raise
    return PlayedRounds(rows, resumed["next_round"] if resumed else None, started, time.perf_counter() - wall)


@dataclasses.dataclass
class GroupRun:
    """One run of a group (`run_group`): its config, output folder and `run_training`'s other arguments."""

    config: TrainConfig
    out_dir: Path
    options: dict = dataclasses.field(default_factory=dict)


def run_group(runs: list[GroupRun]) -> list[dict | BaseException]:
    """Train `runs` together: each by `run_training` in a thread of its own (its own round loop, record,
    snapshots and resume), the device and data shared, their selected clients trained in one batched
    step (`engine.group`). Returns each run's record, or the error that stopped it. The runs must name
    one device and float arithmetic (engine options numerics, tf32) and write to different folders."""
    if len({run.config.device for run in runs}) > 1:
        raise UserError("the runs of a group train on one device: give them the same --device")
    if len({json.dumps(cuda_flags(resolve_options(run.config.algorithm, run.config.overrides)[1])) for run in runs}) > 1:
        raise UserError("the runs of a group share one float arithmetic: give them the same numerics and tf32")
    folders = [Path(run.out_dir).resolve() for run in runs]
    if len(set(folders)) < len(folders):
        raise UserError("two runs of the group write to the same --out")
    group, shared = RunGroup(), SharedRuns()
    members = [group.member() for _ in runs]
    outcomes: list[dict | BaseException] = [RuntimeError("not run")] * len(runs)

    def train(i: int) -> None:
        try:
            outcomes[i] = run_training(runs[i].config, runs[i].out_dir, member=members[i], shared=shared, **runs[i].options)
        except BaseException as err:  # noqa: BLE001 - reported with the run it stopped
            outcomes[i] = err
        finally:
            members[i].leave()

    threads = [threading.Thread(target=train, args=(i,), name=f"fedgmh run {i}", daemon=True) for i in range(len(runs))]
    with stopping.for_threads():  # a SIGTERM stops each run at the end of its round, with a snapshot
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(0.5)  # the main thread stays free for Ctrl-C and a second SIGTERM (every run at once)
    return outcomes
