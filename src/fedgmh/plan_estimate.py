"""How long a set of runs takes to train (`fedgmh plan`): on CPU cores, `jobs` at a time, and on one GPU
that the runs share.

A run's work is rounds x local epochs x join ratio, what its time grows with. On a CPU a run takes its
work times the median seconds per unit of work of the nearest records trained on a CPU (resumed runs left
out): those of its method on its dataset; else those of every method on its dataset; else the rate
`plan.CPU_MINUTES_PER_ROUND_EPOCH` gives for its dataset's channels. The runs go to `jobs` slots, the
longest first, each to the slot that frees first (`slots_end`). On a GPU the runs share the card: their
work, counted in rounds of the paper's protocol (PAPER_ROUND_WORK), at the rate measured for their dataset
(benchmarks/gpu_throughput.csv; a dataset without one at that of a measured dataset with as many channels).
A measurement of k runs at once at r rounds/s gives n runs r x min(1, n / k): the best of these counts.
Nothing here imports torch.
"""

from __future__ import annotations

import csv
import heapq
import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedgmh.datasets import DATASETS
from fedgmh.plan import CPU_MINUTES_PER_ROUND_EPOCH

GPU_RATES = Path("benchmarks") / "gpu_throughput.csv"
#: the work of one round of the paper's protocol (E = 2 at 20 % participation), that of the measured GPU rates
PAPER_ROUND_WORK = 2 * 0.2


def work(rounds: float, local_epochs: float, join_ratio: float) -> float:
    return rounds * local_epochs * join_ratio


def slots_end(seconds: Iterable[float], jobs: int) -> float:
    """When the last of the runs ends with `jobs` at a time, the longest first, each slot taking the next run when free."""
    ends = [0.0] * max(1, jobs)
    for length in sorted(seconds, reverse=True):
        heapq.heapreplace(ends, ends[0] + length)
    return max(ends)


def gpu_measurements(path: Path = GPU_RATES) -> list[dict[str, Any]]:
    """The rows of the GPU measurements: dataset, device, runs_at_once, rounds_per_s (empty when absent)."""
    if not Path(path).is_file():
        return []
    with open(path, newline="", encoding="utf-8") as handle:
        rows = [{"dataset": row["dataset"], "device": row["device"], "runs_at_once": int(row.get("runs_at_once") or 1),
                 "rounds_per_s": float(row["rounds_per_s"])} for row in csv.DictReader(handle)]
    return [row for row in rows if math.isfinite(row["rounds_per_s"]) and row["rounds_per_s"] > 0]


def shared_rate(rows: list[dict[str, Any]], dataset: str, runs: int) -> dict[str, Any] | None:
    """The measurement that gives `runs` runs of `dataset` sharing a GPU the most rounds per second, with
    `rate` (what it gives them); None without one."""
    fits = [{**row, "rate": row["rounds_per_s"] * min(1.0, runs / row["runs_at_once"])} for row in rows if row["dataset"] == dataset]
    return max(fits, key=lambda row: row["rate"], default=None)


def _stand_in(dataset: str, measured: Iterable[str]) -> str | None:
    """A measured dataset with as many channels as `dataset` (itself when measured)."""
    measured = sorted(measured)
    if dataset in measured:
        return dataset
    channels = DATASETS[dataset].channels if dataset in DATASETS else None
    return next((other for other in measured if other in DATASETS and DATASETS[other].channels == channels), None)


@dataclass
class Estimate:
    """The time of some runs: on CPU cores at `jobs` at a time, and on one GPU they share."""

    runs: int
    jobs: int
    cpu_seconds: float = 0.0
    cpu_records: int = 0  # records behind the CPU estimate
    cpu_nearest: dict[str, list[str]] = field(default_factory=dict)  # where the rate came from -> 'method on dataset' of the runs
    gpu_seconds: float | None = None
    gpu_used: dict[str, dict[str, Any]] = field(default_factory=dict)  # dataset -> the measurement used (with `rate`, `as`)
    gpu_missing: list[str] = field(default_factory=list)  # datasets without a measurement of their kind


def cpu_rates(records: Iterable[dict[str, Any]]) -> dict[tuple[str, str], list[float]]:
    """(dataset, algorithm) -> seconds per unit of work of the records trained whole on a CPU."""
    found: dict[tuple[str, str], list[float]] = {}
    for record in records:
        config, wall = record.get("config", {}), record.get("wall_time_s")
        if str(record.get("device", "")).startswith("cuda") or record.get("resumed_from_round") is not None \
                or not isinstance(wall, (int, float)):
            continue
        done = work(config.get("rounds", 0), config.get("local_epochs", 0), config.get("join_ratio", 0))
        if done > 0:
            found.setdefault((config["dataset"], config["algorithm"]), []).append(wall / done)
    return found


def nearest(rates: dict[tuple[str, str], list[float]], dataset: str, algorithm: str) -> tuple[str, list[tuple[str, str]]]:
    """The records' keys a run's CPU rate comes from, and how they are near ('' for its own): its method
    on its dataset; the other methods on it; its method on a dataset with as many channels; every method
    there. No keys: none of these has a record."""
    if (dataset, algorithm) in rates:
        return "", [(dataset, algorithm)]
    same = [key for key in rates if key[0] == dataset]
    if same:
        return f"the other methods on {dataset}", same
    channels = DATASETS[dataset].channels
    alike = sorted({key[0] for key in rates if key[0] in DATASETS and DATASETS[key[0]].channels == channels})
    for other in alike:
        if (other, algorithm) in rates:
            return f"their method on {other}", [(other, algorithm)]
    if alike:
        return f"every method on {alike[0]}", [key for key in rates if key[0] == alike[0]]
    return f"the {channels}-channel rate of fedgmh.plan (CPU_MINUTES_PER_ROUND_EPOCH)", []


def estimate(runs: list[Any], records: Iterable[dict[str, Any]], jobs: int = 1, gpu_rows: list[dict[str, Any]] | None = None) -> Estimate:
    """The time of `runs` (each with dataset, algorithm, rounds, local_epochs, join_ratio) from the `records`
    (run.json contents) and the GPU measurements (default: benchmarks/gpu_throughput.csv)."""
    rates = cpu_rates(records)
    result, seconds, used = Estimate(len(runs), jobs), [], set()
    for run in runs:
        how, keys = nearest(rates, run.dataset, run.algorithm)
        if keys:
            values = [value for key in keys for value in rates[key]]
            used.update(keys)
        else:
            values = [60 * CPU_MINUTES_PER_ROUND_EPOCH[DATASETS[run.dataset].channels] / 0.2]
        if how:
            result.cpu_nearest.setdefault(how, []).append(f"{run.algorithm} on {run.dataset}")
        seconds.append(statistics.median(values) * work(run.rounds, run.local_epochs, run.join_ratio))
    result.cpu_seconds = slots_end(seconds, jobs)
    result.cpu_records = sum(len(rates[key]) for key in used)
    rows = gpu_measurements() if gpu_rows is None else gpu_rows
    gpu_work: dict[str, float] = {}
    for run in runs:
        gpu_work[run.dataset] = gpu_work.get(run.dataset, 0.0) + work(run.rounds, run.local_epochs, run.join_ratio)
    total = 0.0
    for dataset, done in sorted(gpu_work.items()):
        stand_in = _stand_in(dataset, {row["dataset"] for row in rows})
        count = sum(1 for run in runs if run.dataset == dataset)
        measured = shared_rate(rows, stand_in, count) if stand_in else None
        if measured is None:
            result.gpu_missing.append(dataset)
            continue
        result.gpu_used[dataset] = {**measured, "as": stand_in}
        total += done / PAPER_ROUND_WORK / measured["rate"]
    result.gpu_seconds = None if result.gpu_missing else total
    return result
