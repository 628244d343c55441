"""A GPU lease prepared here, as the device calls that run it there (docs/running.md, "A GPU lease").

A lease is LEASE_S seconds of a bare GPU machine in all (its start, every call and every idle wait
between calls counted); a call runs at most CALL_LIMIT_S and carries at most the device's 64 MiB,
the repository's tree included (CALL_MIB keeps a margin). `prepare_lease` takes the campaign's next
runs (`campaign.next_runs`: cut-off runs first, then the campaign's order) of the first one's dataset,
as many as finish in the lease's training time at the rate on file for that dataset
(benchmarks/gpu_throughput.csv, `plan_estimate.shared_rate`), plus as many spares, which the device
starts only when the rate it measures says they finish too (fedgmh.lease_device). It writes, in
`.lease/` (ignored by git):

- `meta/lease.json`: the runs (the workflow's `fedgmh train` words, `Plan.train_words`), the calls
  (each one's seconds), the training seconds and the rate assumed;
- `meta/files/`: their partition files, drawn here by the workflow's own rule, and the snapshots of
  cut-off runs, at their paths in the repository;
- `part-NN`: the prepared dataset files the runs read (their images as residuals, `fedgmh.lease_data`),
  as one xz-compressed tar cut to what each call has room for once the tree (measured: git's tracked
  and untracked, not ignored files) is counted;
- `calls.txt`: what each call carries and runs.

More than MAX_CALLS calls (a dataset too large to travel in time) is refused before anything is written.
"""

from __future__ import annotations

import hashlib
import json
import lzma
import math
import os
import re
import shutil
import subprocess
import sys
import tarfile
from dataclasses import asdict, dataclass
from pathlib import Path

from fedgmh import lease_data
from fedgmh.campaign import Entry, load_campaign, next_runs
from fedgmh.errors import UserError
from fedgmh.lease_device import MAX_AT_ONCE
from fedgmh.plan_estimate import GPU_RATES, gpu_measurements, shared_rate

MIB = 2**20
#: what a call may carry, the tree included (the device refuses more than 64 MiB)
CALL_MIB = 60
#: at most this many device calls in one lease
MAX_CALLS = 3
#: the seconds of a call that only brings a data part (call 1 also starts the check and the levers)
QUICK_S = 10
#: the folder `prepare_lease` writes (ignored by git) and the one the device keeps between calls
LEASE_DIR = Path(".lease")
#: the device's command for call N (the runs' code is the tree's src/)
DEVICE_COMMAND = "PYTHONPATH=src python3 -m fedgmh.lease_device --call {call}"


@dataclass(frozen=True)
class Clock:
    """The lease's time: the device's limits (/work/.library/device/README.md) and the assumed costs of
    each step, in seconds. A start, a transfer and a gap are not measured by this project: they are the
    device's stated limits (start 1-2 min, idle release after 30 s), taken at their worst."""

    lease_s: int = 900          # device time of a lease, all tries together
    start_s: int = 120          # a machine's start
    call_limit_s: int = 600     # one call's command
    gap_s: int = 20             # between two calls (the machine goes back after 30 s idle)
    transfer_s: int = 30        # a call's transfer of up to 64 MiB each way
    check_s: int = 60           # the environment check: imports and the CUDA tests
    levers_s: int = 60          # the lever measurement
    launch_s: int = 30          # joining the data and starting the runs
    stop_s: int = 60            # SIGTERM to snapshots (a round at most), packing the records
    correct_after_s: int = 60   # when the device corrects the rate on file by its own

    def check(self) -> None:
        for name, value in asdict(self).items():
            if not isinstance(value, int) or value < 0:
                raise UserError(f"lease clock: {name} must be a whole number of seconds >= 0, not {value!r}")
        if self.call_limit_s < self.transfer_s + max(self.stop_s, QUICK_S) + 1:
            raise UserError(f"lease clock: a call of {self.call_limit_s} s leaves no time to train")


def tree_bytes(base: Path) -> int:
    """What the device sends of `base` besides the carried paths: git's tracked files and its untracked,
    not ignored ones."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=base,
                            capture_output=True, check=False)
    if listed.returncode != 0:
        raise UserError(f"{base} is not a git checkout: the device sends a checkout's tree ({listed.stderr.decode().strip()})")
    total = 0
    for name in set(filter(None, listed.stdout.decode().split("\0"))):
        path = base / name
        if path.is_file() and not path.is_symlink():
            total += path.stat().st_size
    return total


def schedule(parts: int, clock: Clock) -> tuple[list[dict], int]:
    """The calls of a lease whose data travels in `parts` parts (one call each; none: one call), and the
    seconds its runs train. Call 1 starts the environment check and the lever measurement on the device
    in the background (they need no data), so that they run while the other parts travel; a call that
    only brings a part returns at once (QUICK_S); the call that brings the last part joins the data and
    starts the runs once the check and the levers are done; one more call, when the lease has time
    left, lets them train on and brings them back. Each call: its number, the part it carries (None),
    its seconds, whether it starts the runs and whether it is the last."""
    clock.check()
    data_calls = max(parts, 1)
    if data_calls > MAX_CALLS:
        raise UserError(f"the runs' data need {data_calls} calls to travel, more than a lease's {MAX_CALLS}")
    ready_at = clock.transfer_s + clock.check_s + clock.levers_s  # seconds after the machine's start
    left, now, calls, training = clock.lease_s - clock.start_s, 0, [], 0
    for number in range(1, data_calls + 1):
        starts = number == data_calls
        seconds = min(clock.call_limit_s, left) if starts else clock.transfer_s + QUICK_S
        calls.append({"call": number, "part": number - 1 if number <= parts else None, "seconds": seconds,
                      "starts": starts, "last": False})
        if starts:  # the runs train from when the data are joined and the levers chosen to the call's end
            training = now + seconds - max(now + clock.transfer_s + clock.launch_s, ready_at)
        now += seconds + clock.gap_s
        left -= seconds + clock.gap_s
    starting = calls[-1]
    after = starting["seconds"] - clock.transfer_s  # from the starting call's command to the end of its call
    if len(calls) < MAX_CALLS and left > clock.transfer_s + clock.stop_s:  # the runs go on through the gap
        seconds = min(clock.call_limit_s, left)
        calls.append({"call": len(calls) + 1, "part": None, "seconds": seconds, "starts": False, "last": False})
        training += clock.gap_s + seconds - clock.transfer_s
        after += clock.gap_s + seconds - clock.transfer_s
    calls[-1]["last"] = True
    training -= clock.stop_s
    starting["stop_after_s"] = after - clock.stop_s  # the supervisor's deadline, from its call's command
    if training <= 0:
        raise UserError(f"a lease of {clock.lease_s} s leaves no time to train after its {len(calls)} call(s)")
    return calls, training


def runs_that_finish(entries: list[Entry], rows: list[dict], seconds: float) -> int:
    """How many of `entries`, started at once, finish in `seconds` at the rate on file for their number."""
    count = 0
    for n in range(1, len(entries) + 1):
        rate = shared_rate(rows, entries[0].run.dataset, n)
        if rate is None or sum(e.run.rounds for e in entries[:n]) > rate["rate"] * seconds:
            break
        count = n
    return count


@dataclass
class Prepared:
    runs: list[dict]
    calls: list[dict]
    training_s: int
    rate: dict
    expected: int
    payload_mib: float
    data_mib: float
    parts: int
    skipped: list[str]
    tree_mib: float
    #: the largest tree with which the data still travel in MAX_CALLS calls
    tree_limit_mib: float


def _runs_of_one_dataset(entries: list[Entry]) -> tuple[list[Entry], list[str]]:
    """The entries of the first one's dataset, in order, and the names of the others (a later lease's)."""
    dataset = entries[0].run.dataset
    return [e for e in entries if e.run.dataset == dataset], [e.name for e in entries if e.run.dataset != dataset]


def _run_entry(entry: Entry, base: Path, spare: bool) -> dict:
    plan, run = entry.plan, entry.run
    return {"name": entry.name, "run_dir": run.run_dir, "log": str(entry.log), "rounds": run.rounds, "dataset": run.dataset,
            "algorithm": run.algorithm, "partition": entry.partition, "record": str(entry.record),
            "snapshot": str(entry.snapshot) if (base / entry.snapshot).is_file() else None, "spare": spare,
            "words": plan.train_words(run, entry.partition, plan.config["threads_per_job"])}


def _draw_partitions(entries: list[Entry], config: str, overrides: list[str], base: Path) -> None:
    """The runs' partition files (and the prepared datasets they are drawn from), by the workflow's rule."""
    wanted = sorted({e.partition for e in entries if not (base / e.partition).is_file()})
    if not wanted:
        return
    overrides = [item for item in overrides if not item.startswith("device=")] + ["device=cpu"]  # drawn here, no GPU
    done = subprocess.run([sys.executable, "-m", "snakemake", *wanted, "--configfile", config, "--cores", "1",
                           *(["--config", *overrides] if overrides else [])], cwd=base, capture_output=True, text=True)
    if done.returncode != 0:
        output = done.stdout + done.stderr
        logs = sorted(set(re.findall(r"log: (\S+) \(check log", output)))  # Snakemake names the failed jobs' logs
        tail = " | ".join(output.strip().splitlines()[-3:])
        raise UserError(f"drawing the partitions {', '.join(wanted)} failed" + (f" (see {', '.join(logs)})" if logs else "")
                        + f": {tail}")


def _dataset_files(entries: list[Entry], base: Path) -> list[Path]:
    """The prepared dataset files the runs read (`--root`), relative to `base`."""
    plan = entries[0].plan
    files = sorted({Path(plan.data) / f"{e.run.dataset}.npz" for e in entries})
    missing = [str(f) for f in files if not (base / f).is_file()]
    if missing:
        raise UserError(f"prepared dataset {', '.join(missing)} not found after drawing the partitions")
    return files


def _packed_data(files: list[Path], base: Path, cache: Path) -> Path:
    """The dataset files, their images as residuals (`fedgmh.lease_data`), as one xz-compressed tar (kept
    in `cache` while the files are unchanged: compressing CIFAR-100 takes minutes)."""
    stamp = hashlib.sha256(json.dumps([[str(f), (base / f).stat().st_size, (base / f).stat().st_mtime_ns] for f in files]
                                      + [lease_data.SUFFIX]).encode()).hexdigest()[:16]
    packed = cache / f"data-{stamp}.tar.xz"
    if not packed.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        for old in cache.glob("data-*"):
            old.unlink()
        partial, encoded = packed.with_suffix(".xz.part"), cache / f"data-{stamp}{lease_data.SUFFIX}"
        with lzma.open(partial, "wb", preset=6) as stream, tarfile.open(fileobj=stream, mode="w") as archive:
            for name in files:
                lease_data.encode_file(base / name, encoded)
                archive.add(encoded, arcname=f"{name}{lease_data.SUFFIX}")
                encoded.unlink()
        partial.rename(packed)
    return packed


def lease_overrides(overrides: list[str]) -> list[str]:
    """The `--config` values of the lease's runs: `overrides`, `device=cuda` unless they name a device, and
    `jobs_per_gpu` = MAX_AT_ONCE unless they give it: with the config's own (1 in the paper's), every run
    started on the GPU but the first would wait for its one slot (fedgmh.gpu_slots). Neither is in the run key."""
    overrides = list(overrides)
    if not any(item.startswith("device=") for item in overrides):
        overrides.append("device=cuda")
    if not any(item.startswith("jobs_per_gpu=") for item in overrides):
        overrides.append(f"jobs_per_gpu={MAX_AT_ONCE}")
    return overrides


def prepare_lease(campaign: str, base: Path | str = ".", overrides: list[str] = (), clock: Clock = Clock(),
                  rates: Path | str | None = None, snakefile: str = "Snakefile", call_mib: float = CALL_MIB) -> Prepared:
    """Write `.lease/` in `base` for the next runs of the campaign file `campaign` (see the module), each
    call carrying at most `call_mib` MiB with the tree. Everything is checked before the old `.lease/`
    is replaced."""
    base, overrides = Path(base), lease_overrides(overrides)
    clock.check()
    rows = gpu_measurements(base / (rates or GPU_RATES))
    entries = next_runs(load_campaign(base / campaign, base, base / snakefile, list(overrides)), base)
    if not entries:
        raise UserError(f"campaign {campaign}: every run is done or running; nothing to lease")
    entries, skipped = _runs_of_one_dataset(entries)
    dataset = entries[0].run.dataset
    if shared_rate(rows, dataset, 1) is None:
        raise UserError(f"no GPU rate on file for {dataset} ({rates or GPU_RATES}): the lease cannot tell how many runs finish")
    tree = tree_bytes(base)
    payload = int(call_mib * MIB) - tree
    if payload <= 0:
        raise UserError(f"the tree is {tree / MIB:.1f} MiB: nothing more fits in a call of {call_mib:g} MiB")
    config = entries[0].config
    _draw_partitions(entries, config, list(overrides), base)
    files = _dataset_files(entries, base)
    work = base / LEASE_DIR
    packed = _packed_data(files, base, work / "cache")
    carried_files = {str(p) for e in entries for p in (e.partition, e.snapshot) if (base / p).is_file()}  # each once
    meta_bytes = sum((base / p).stat().st_size for p in carried_files)
    first_room = payload - meta_bytes  # call 1 carries the meta folder too
    if first_room <= 0:
        raise UserError(f"the partitions and snapshots ({meta_bytes / MIB:.1f} MiB) do not fit in one call with the tree")
    data = packed.stat().st_size
    parts = 0 if data == 0 else 1 + math.ceil(max(0, data - first_room) / payload)
    calls, training = schedule(parts, clock)
    expected = runs_that_finish(entries, rows, training)
    if expected == 0:
        raise UserError(f"not one run of {dataset} finishes in the lease's {training} s of training at the rate on file")
    chosen = entries[: 2 * expected]
    runs = [_run_entry(e, base, spare=index >= expected) for index, e in enumerate(chosen)]
    rate = {k: v for k, v in shared_rate(rows, dataset, expected).items()}

    shutil.rmtree(work / "meta", ignore_errors=True)
    for old in work.glob("part-*"):
        old.unlink()
    (work / "meta" / "files").mkdir(parents=True)
    for entry in chosen:
        for path in (entry.partition, entry.snapshot):
            if (base / path).is_file():
                (work / "meta" / "files" / path).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(base / path, work / "meta" / "files" / path)
    with open(packed, "rb") as source:
        for index in range(parts):
            chunk = source.read(first_room if index == 0 else payload)
            (work / f"part-{index:02d}").write_bytes(chunk)
    lease = {"runs": runs, "calls": calls, "training_s": training, "rate": rate, "clock": asdict(clock),
             "parts": parts, "data_sha256": hashlib.sha256(packed.read_bytes()).hexdigest(), "data_root": entries[0].plan.data,
             "config": config, "name": entries[0].plan.name}
    (work / "meta" / "lease.json").write_text(json.dumps(lease, indent=1) + "\n")
    (work / "calls.txt").write_text("".join(call_line(call) + "\n" for call in calls))
    tree_limit = int(call_mib * MIB) - (data + meta_bytes) / MAX_CALLS
    return Prepared(runs, calls, training, rate, expected, payload / MIB, data / MIB, parts, skipped, tree / MIB, tree_limit / MIB)


def carried(call: dict) -> list[str]:
    """The paths call `call` carries."""
    paths = [str(LEASE_DIR / "meta")] if call["call"] == 1 else []
    return paths + ([str(LEASE_DIR / f"part-{call['part']:02d}")] if call["part"] is not None else [])


def call_line(call: dict) -> str:
    return (f"call {call['call']} ({call['seconds']} s{', starts the runs' if call['starts'] else ''}"
            f"{', brings them back' if call['last'] else ''}): carry {' '.join(carried(call)) or 'nothing'}; "
            f"timeout_s {call['seconds']}; command: {DEVICE_COMMAND.format(call=call['call'])}")


def summary(prepared: Prepared) -> list[str]:
    rate = prepared.rate
    lines = [f"{len(prepared.runs)} runs carried: {prepared.expected} expected to finish in {prepared.training_s} s of "
             f"training at {rate['rate']:.2f} rounds/s ({rate['device']}, {rate['runs_at_once']} at once, "
             f"benchmarks/gpu_throughput.csv), {len(prepared.runs) - prepared.expected} spares the device starts if it "
             "measures more",
             f"data: {prepared.data_mib:.1f} MiB in {prepared.parts} part(s), one a call, each at most "
             f"{prepared.payload_mib:.1f} MiB besides the tree ({prepared.tree_mib:.1f} MiB; the data travel in "
             f"{MAX_CALLS} calls while it stays under {prepared.tree_limit_mib:.1f} MiB)"]
    if prepared.skipped:
        lines.append(f"left for a lease of their own dataset: {len(prepared.skipped)} run(s), first {prepared.skipped[0]}")
    return lines + [call_line(call) for call in prepared.calls]
