"""`fedgmh train`: resolve options, load data and partition, run the rounds, write the run record.

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
import platform
import re
import shutil
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

import fedgmh
from fedgmh import data, gpu_slots, stopping, store
from fedgmh.algorithms import algorithm_classes, get_algorithm
from fedgmh.cards import resolve_options
from fedgmh.config import EngineOptions, TrainConfig, selects_a_client
from fedgmh.engine import Checkpoint, Federation, Member, RunGroup, cuda_flags, run_rounds, set_numerics
from fedgmh.cadence import DEFAULT_CADENCE, describe_cadence, snapshot_cadence
from fedgmh.errors import Interrupted, UserError
from fedgmh.io import check_writable_folder, remove_leftovers, write_json
from fedgmh.machine import machine_facts
from fedgmh.record import load_record, new_record, read_json, write_record
from fedgmh.memory import peak_rss_bytes, tensor_bytes
from fedgmh.model import FedAvgCNN, use_unfold_convolutions
from fedgmh.partition import load_partition
from fedgmh.runspec import RunSpec, as_run, run_identity


DEVICES = "cpu, cuda, cuda:N, cuda:auto or auto"  # what --device takes


def pick_device(name: str, jobs_per_gpu: int = 1) -> torch.device:
    """cpu, cuda, cuda:N, auto (CUDA when available) or cuda:auto (a free GPU slot, see gpu_slots;
    `jobs_per_gpu` slots per GPU)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == gpu_slots.SLOT_DEVICE:
        if not torch.cuda.is_available():
            raise UserError(f"device {name!r} requested but CUDA is not available; use --device cpu")
        index = gpu_slots.hold_gpu_for_process(torch.cuda.device_count(), jobs_per_gpu)  # held until this process exits
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    try:
        device = torch.device(name)
    except RuntimeError as err:
        raise UserError(f"unknown device {name!r}; use {DEVICES}") from err
    if device.type not in ("cpu", "cuda"):  # meta, mps, xla, ...: tensors without data, or backends never tested here
        raise UserError(f"device {name!r} is not supported; use {DEVICES}")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"device {name!r} requested but CUDA is not available; use --device cpu")
    return device


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


def memory_record(fed: Federation, algorithm, device: torch.device) -> dict[str, int]:
    """Bytes held at the end of a run: one model, the algorithm's state (all clients' and the
    server's tensors, shared storages once), the data set, and the process's peak."""
    record = {
        "model_bytes": tensor_bytes(fed.initial_params()),
        "algorithm_state_bytes": tensor_bytes(algorithm.state()),
        "data_bytes": tensor_bytes([fed.images, fed.labels]),
        "peak_rss_bytes": peak_rss_bytes(),
    }
    if device.type == "cuda":
        record["peak_cuda_bytes"] = torch.cuda.max_memory_allocated(device)
    return record


def label_record(out_dir: Path, record: dict, workflow: dict[str, str] | None) -> dict:
    """The record in `out_dir` with `workflow` as its labels (run.json rewritten when they differ: a
    record reused from a store, or trained for another config, is filed under this run's labels)."""
    if not workflow or record.get("workflow") == workflow:
        return record
    record = {**record, "workflow": workflow}
    write_json(record, out_dir / "run.json")
    return record


def reuse_stored_record(spec: RunSpec, stores: list[Path], out_dir: Path, progress: bool) -> dict | None:
    """Copy the stored record of the run `spec` (or of a run of the same computation, filed as this
    run: `runspec.as_run`) to `out_dir`; None when none exists."""
    found, notes = store.find(stores, spec)
    warn = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    say = warn if progress else (lambda line: None)
    for line in notes:  # an invalid record is a warning: said also when quiet
        (warn if line.startswith(store.INVALID_NOTE) else say)(f"[{spec.algorithm}] {line}")
    if found is None:
        return None
    if found.spec == spec:
        store.copy_record(found.folder, out_dir)
        record = found.record
    else:  # a run of the same computation (RunSpec.computation): filed as this run, its run.json last
        record = as_run(found.record, spec)
        store.copy_record(found.folder, out_dir, [name for name in store.record_files(found.folder) if name != "run.json"])
        write_json(record, out_dir / "run.json")
    say(f"[{spec.algorithm}] reused the record in {found.folder} (trained on {found.record.get('device')}, "
        f"{found.record.get('started_utc')}{', ' + found.spec.algorithm + ': the same computation' if found.spec != spec else ''}); "
        "no training")
    return record


#: the files of the output folder that a run reads (a finished record, a snapshot)
READ_FILES = ("run.json", "checkpoint.pt")


def check_read_files(out_dir: Path) -> None:
    """Refuse an output folder whose run.json or checkpoint.pt is not a regular file: reading a FIFO
    would wait forever, a folder or device is no record."""
    for name in READ_FILES:
        path = out_dir / name
        if path.exists() and not path.is_file():
            raise UserError(f"{path} is not a regular file (a FIFO, a folder or a device); move it away or choose another --out")


def finished_run(out_dir: Path, spec: RunSpec, overwrite: bool) -> dict | None:
    """The record of the finished run in `out_dir` (its run.json) when it is the run `spec` (settings
    that decide the numbers, not device, threads or paths); None when there is none, it is
    incomplete, or `overwrite`.
    A finished run of other settings, or an invalid record (fedgmh.record), is refused (UserError
    naming what differs, or why) unless `overwrite`."""
    path = out_dir / "run.json"
    if overwrite or not os.path.lexists(path):
        return None
    advice = "choose another --out, or add --overwrite to replace it"
    try:
        there = RunSpec.from_record(read_json(path))
    except UserError as err:
        raise UserError(f"{out_dir} holds a run record that cannot be read ({err}); {advice}") from None
    differences = there.difference(spec)
    if differences:
        raise UserError(f"{out_dir} holds a finished run of other settings (there vs here: {'; '.join(differences)}); {advice}")
    if not (out_dir / "metrics.csv").is_file():
        return None  # without its metrics: trained again
    try:
        return load_record(out_dir)[0]
    except UserError as err:
        raise UserError(f"{out_dir} holds an invalid run record ({err}); {advice}") from None


def check_trained(rows: list[dict], rounds: int) -> None:
    """Refuse to record a run in which no client took a training step in any evaluated training round
    (every such round's train_loss is NaN): its accuracies would be the initial model's."""
    trained_rounds = [row for row in rows if row["round"] < rounds]
    if trained_rounds and all(math.isnan(row["train_loss"]) for row in trained_rounds):
        raise UserError(f"no client took a training step in any of the {len(trained_rounds)} evaluated training rounds "
                        "(e.g. drop_last with batches larger than the clients' splits), so no record was written")


def clear_record(out_dir: Path) -> None:
    """Remove the record files of a run folder (run.json and the tables a record can hold: the
    engine's and every algorithm's `record_tables`), before another run's record is trained or
    copied into it; other files of the folder are left alone."""
    tables = {*ENGINE_TABLES, *(name for algorithm in algorithm_classes().values() for name in algorithm.record_tables)}
    for path in [out_dir / "run.json", *(out_dir / f"{name}.csv" for name in sorted(tables))]:
        if path.is_symlink() or path.is_file():
            path.unlink()


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


def client_table(best: dict, last: dict, fed: Federation) -> pd.DataFrame | None:
    """clients.csv: each client's test samples and accuracy in the best and in the last evaluated
    round; None when those rows lack it (rows from a checkpoint written before clients.csv)."""
    if "client_acc" not in best or "client_acc" not in last:
        return None
    return pd.DataFrame({"client": np.arange(fed.num_clients), "test_samples": [len(idx) for idx in fed.test_idx],
                         "test_acc_best": np.asarray(best["client_acc"]), "test_acc_last": np.asarray(last["client_acc"])})


#: the record's tables that the engine writes: an algorithm's own tables take other names
ENGINE_TABLES = ("metrics", "clients")


def algorithm_tables(algorithm) -> dict[str, pd.DataFrame]:
    """The algorithm's own tables of the finished run (`Algorithm.extra_records`, e.g. pFedLA's
    layer_weights.csv) by file name; the store keeps every CSV of a record (store.optional_files)."""
    tables = algorithm.extra_records()
    bad = sorted(name for name in tables if name in ENGINE_TABLES or not re.fullmatch(r"[a-z][a-z0-9_]*", name)
                 or name not in algorithm.record_tables)
    if bad:
        raise ValueError(f"algorithm {algorithm.name} names a record table {', '.join(map(repr, bad))}: "
                         f"use lower-case letters, digits and _, not {' or '.join(ENGINE_TABLES)}, listed in its record_tables")
    return {f"{name}.csv": table for name, table in tables.items()}


def planned_identity(config: TrainConfig) -> dict:
    """`runspec.run_identity` of the run `config` describes, from its partition file, without loading the
    data or building the model (the partition file's meta holds the dataset's fingerprint)."""
    partition, meta = load_partition(Path(config.partition))
    if meta.get("dataset") not in (None, config.dataset):
        raise UserError(f"partition {config.partition} was made for dataset {meta['dataset']!r}, not {config.dataset!r}")
    return run_identity(config, {**meta, "digest": partition.digest()})


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
    """Run one federated training run and write metrics.csv and run.json into `out_dir`.

    The run's state goes to `out_dir/checkpoint.pt` every `checkpoint_every` (K rounds, or "Ss": after
    S seconds of training, `checkpoint.snapshot_cadence`; an execution option, not part of the run); a
    run started again with the same settings resumes from it (0 = no checkpoints). When a folder of
    `stores` holds the record of exactly this run (fedgmh.store), that record is copied to
    `out_dir` instead of training. When `out_dir` already holds the finished record of this run
    (`finished_run`), it is returned and nothing is trained; a finished run of other settings there
    is refused unless `overwrite` (then replaced, when this run completes). `out_dir` is checked (created and written to for a test) before
    anything else is done, so a bad folder is reported at once, not when the run ends.
    `jobs_per_gpu`: how many jobs share a GPU under `--device cuda:auto` (gpu_slots); it changes
    where the run trains, never its numbers. `workflow`: the labels the workflow gives the run
    (store.WORKFLOW_LABELS), recorded in run.json under `workflow`, also in a reused or finished record.
    `member`: the run's place in a group of runs trained together (`run_group`), whose device and data
    come from `shared`; it leaves the group when its rounds end.
    """
    unknown = set(workflow or {}) - set(store.WORKFLOW_LABELS)
    if unknown:
        raise UserError(f"unknown workflow label(s) {', '.join(sorted(unknown))}; known: {', '.join(store.WORKFLOW_LABELS)}")
    out_dir = Path(out_dir)
    check_writable_folder(out_dir)  # now, not when the run ends
    check_read_files(out_dir)
    # 1. what the run is, from its options and partition file alone (run.json records `identity`)
    identity = planned_identity(config)
    spec = RunSpec.from_config(config, identity["partition"])
    # 2. finished or stored: nothing more is needed (no device, no data)
    finished = finished_run(out_dir, spec, overwrite)
    if finished is not None:
        print(f"[{config.algorithm}] {out_dir} already holds the finished run of these settings; not trained again "
              "(--overwrite trains it again)", file=sys.stderr, flush=True)
        return label_record(out_dir, finished, workflow)
    every, seconds = snapshot_cadence(checkpoint_every)
    checkpoint = Checkpoint(out_dir / "checkpoint.pt", every, identity, seconds=seconds)
    if overwrite and checkpoint.holds_other_run():
        checkpoint.remove()
        print(f"[{config.algorithm}] removed {checkpoint.path}, a snapshot of a run with other settings (--overwrite)",
              file=sys.stderr, flush=True)
    clear_record(out_dir)  # what is left of another run's record must not join this run's
    if stores:
        reused = reuse_stored_record(spec, stores, out_dir, progress)
        if reused is not None:
            return label_record(out_dir, reused, workflow)
    for name in ("*.csv", "run.json", "checkpoint.pt"):  # a killed earlier attempt's temporaries (of every table)
        remove_leftovers(out_dir / name)
    # 3. device (a GPU slot), data, model, algorithm
    algo_options, engine = resolve_options(config.algorithm, config.overrides)
    device = shared.device(config.device, jobs_per_gpu) if shared else pick_device(config.device, jobs_per_gpu)
    set_numerics(engine, device)  # same config + seed = same result, also with cuDNN
    if config.threads:
        torch.set_num_threads(config.threads)
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
        algorithm = get_algorithm(config.algorithm)(fed, algo_options)
    # 4. the rounds
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
            stop.message += f"; no checkpoint yet ({describe_cadence(every, seconds)}): the same command starts again"
        else:
            stop.message += "; checkpoints are off (--checkpoint-every 0): the same command starts again"
        raise
    wall = time.perf_counter() - wall
    # 5. the record
    check_trained(rows, config.rounds)
    metrics = pd.DataFrame([{k: v for k, v in row.items() if k != "client_acc"} for row in rows])
    clients = client_table(rows[int(metrics["test_acc"].idxmax())], rows[-1], fed)
    tables = {**({"clients.csv": clients} if clients is not None else {}), **algorithm_tables(algorithm)}
    facts = {
        "wall_time_s": wall,
        "memory": memory_record(fed, algorithm, device),
        "resumed_from_round": resumed["next_round"] if resumed else None,
        "started_utc": started.isoformat(),
        "device": str(device) if device.type == "cpu" else f"{device} ({torch.cuda.get_device_name(device)})",
        "threads": torch.get_num_threads(),
        **({"sample_passes": passes} if (passes := fed.sample_passes.record()) else {}),
        **({"evaluation_sample_passes": passes} if (passes := fed.evaluation_passes.record()) else {}),
        **({"jobs_per_gpu": jobs_per_gpu} if config.device == gpu_slots.SLOT_DEVICE else {}),  # GPU shared by that many jobs
        "host": platform.node(),
        "machine": machine_facts(device),
        "versions": {
            "fedgmh": fedgmh.__version__,
            "python": platform.python_version(),
            "torch": torch.__version__,
            "numpy": np.__version__,
            "pandas": pd.__version__,  # writes and reads the record's tables
        },
        "code_version": fedgmh.code_version(),
    }
    run_record = new_record(dataclasses.asdict(config), identity, metrics, fed.num_clients, facts, workflow)
    write_record(out_dir, run_record, metrics, tables)
    checkpoint.remove()
    return run_record


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
