"""The resolve step of `fedgmh train` (`resolve_run`): what a run is, from its config and options
alone (RunSpec, identity, seed, options and numerics, snapshot cadence, paths), and where it stands:
a finished record in its folder or a stored one ends it before a device or data is taken.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from fedgmh import gpu_slots, store
from fedgmh.algorithms import algorithm_classes
from fedgmh.cadence import snapshot_cadence
from fedgmh.cards import resolve_options
from fedgmh.config import EngineOptions, TrainConfig
from fedgmh.engine import Checkpoint, set_numerics
from fedgmh.errors import UserError
from fedgmh.io import check_writable_folder, remove_leftovers, write_json
from fedgmh.partition import load_partition
from fedgmh.record import load_record, read_json
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


#: the record's tables that the engine writes: an algorithm's own tables take other names
ENGINE_TABLES = ("metrics", "clients")


def clear_record(out_dir: Path) -> None:
    """Remove the record files of a run folder (run.json and the tables a record can hold: the
    engine's and every algorithm's `record_tables`), before another run's record is trained or
    copied into it; other files of the folder are left alone."""
    tables = {*ENGINE_TABLES, *(name for algorithm in algorithm_classes().values() for name in algorithm.record_tables)}
    for path in [out_dir / "run.json", *(out_dir / f"{name}.csv" for name in sorted(tables))]:
        if path.is_symlink() or path.is_file():
            path.unlink()


def planned_identity(config: TrainConfig) -> dict:
    """`runspec.run_identity` of the run `config` describes, from its partition file, without loading the
    data or building the model (the partition file's meta holds the dataset's fingerprint)."""
    partition, meta = load_partition(Path(config.partition))
    if meta.get("dataset") not in (None, config.dataset):
        raise UserError(f"partition {config.partition} was made for dataset {meta['dataset']!r}, not {config.dataset!r}")
    return run_identity(config, {**meta, "digest": partition.digest()})


@dataclasses.dataclass
class ResolvedRun:
    """A run to train, resolved (`resolve_run`): what the build, run and record steps read."""

    config: TrainConfig
    out_dir: Path
    identity: dict  # runspec.run_identity, recorded in run.json and the snapshot
    algo_options: Any  # the algorithm card's options (cards.resolve_options)
    engine: EngineOptions
    device: torch.device
    checkpoint: Checkpoint
    jobs_per_gpu: int
    workflow: dict[str, str] | None


def resolve_run(config: TrainConfig, out_dir: Path, *, checkpoint_every: int | str, stores: list[Path] | None, overwrite: bool,
                jobs_per_gpu: int, workflow: dict[str, str] | None, progress: bool,
                take_device: Callable[[str, int], torch.device]) -> ResolvedRun | dict:
    """The run to train (device taken, numerics set), or its record when made already: cheap checks first, a GPU last."""
    unknown = set(workflow or {}) - set(store.WORKFLOW_LABELS)
    if unknown:
        raise UserError(f"unknown workflow label(s) {', '.join(sorted(unknown))}; known: {', '.join(store.WORKFLOW_LABELS)}")
    out_dir = Path(out_dir)
    check_writable_folder(out_dir)  # now, not when the run ends
    check_read_files(out_dir)
    # what the run is, from its options and partition file alone (run.json records `identity`)
    identity = planned_identity(config)
    spec = RunSpec.from_config(config, identity["partition"])
    # finished or stored: nothing more is needed (no device, no data)
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
    algo_options, engine = resolve_options(config.algorithm, config.overrides)
    device = take_device(config.device, jobs_per_gpu)
    set_numerics(engine, device)  # same config + seed = same result, also with cuDNN
    if config.threads:
        torch.set_num_threads(config.threads)
    return ResolvedRun(config, out_dir, identity, algo_options, engine, device, checkpoint, jobs_per_gpu, workflow)
