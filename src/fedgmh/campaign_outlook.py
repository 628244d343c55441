"""What the campaign's remaining runs are worth and cost (`fedgmh campaign status`): the paper's claims
still undecided that each group's runs add seeds to, and how long the group takes.

Claims and their verdicts come from the committed comparison so far (`tools/comparison_so_far.sh`:
claims.csv under the paper's text, claims_pflib.csv under PFLlib's reading). An experiment named `X_pflib`
holds experiment X's methods under PFLlib's reading (config/config.yaml), so
its runs count for X's claims under that reading. Times: a run on one CPU core takes the median wall
time of the committed records trained on a CPU with the same dataset and rounds, from start to end
(resumed runs left out); on a GPU, the group's rounds at the best rate measured for the dataset
(benchmarks/gpu_throughput.csv).
"""

from __future__ import annotations

import csv
import json
import statistics
from collections.abc import Iterable, Mapping
from pathlib import Path

from fedgmh.campaign import Entry
from fedgmh.plan_estimate import GPU_RATES, gpu_measurements, slots_end

#: verdicts more runs do not change: decided, or the data are not to be had offline (CIFAR-10)
SETTLED = ("holds", "does not hold", "data unavailable offline")
READINGS = {"paper": "claims.csv", "official": "claims_pflib.csv"}
OFFICIAL_SUFFIX = "_pflib"

Cell = tuple[str, str, str, str]  # reading, experiment, setting (without its @variant), algorithm


def paper_cell(entry: Entry) -> Cell:
    """The cell of the paper's claims the entry's run adds a seed to."""
    run = entry.run
    experiment, reading = run.experiment, "paper"
    if experiment.endswith(OFFICIAL_SUFFIX):
        experiment, reading = experiment[: -len(OFFICIAL_SUFFIX)], "official"
    return reading, experiment, run.setting.split("@")[0], run.algorithm


def claim_cells(claims: Iterable, verdicts: Mapping[str, Mapping[str, str]]) -> dict[Cell, set[str]]:
    """For every cell a claim reads, the ids of the claims still undecided under each reading
    (`verdicts`: reading -> claim id -> verdict; a claim without a verdict counts as undecided)."""
    cells: dict[Cell, set[str]] = {}
    for claim in claims:
        for reading, verdict_of in verdicts.items():
            if verdict_of.get(claim.id) in SETTLED:
                continue
            for need in claim.needs():
                cells.setdefault((reading, need.experiment, need.setting, need.algorithm), set()).add(claim.id)
    return cells


def read_verdicts(so_far: Path) -> dict[str, dict[str, str]]:
    """reading -> claim id -> verdict, from the committed comparison so far (empty where absent)."""
    verdicts: dict[str, dict[str, str]] = {}
    for reading, name in READINGS.items():
        path = so_far / name
        if path.is_file():
            with open(path, newline="", encoding="utf-8") as f:
                verdicts[reading] = {row["id"]: row["verdict"] for row in csv.DictReader(f)}
    return verdicts


def cpu_run_seconds(records: Path) -> dict[tuple[str, int], float]:
    """(dataset, rounds) -> median wall time of the committed records trained whole on a CPU."""
    times: dict[tuple[str, int], list[float]] = {}
    for path in records.glob("**/run.json"):
        try:
            record = json.loads(path.read_text())
            if str(record.get("device", "")).startswith("cpu") and record.get("resumed_from_round") is None:
                key = (str(record["dataset"]), int(record["config"]["rounds"]))
                times.setdefault(key, []).append(float(record["wall_time_s"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # `fedgmh store check` reports broken records; an estimate skips them
    return {key: statistics.median(values) for key, values in times.items()}


def gpu_rates(path: Path = GPU_RATES) -> dict[str, tuple[float, str]]:
    """dataset -> (best rounds per second measured, the device), from the lease measurements."""
    best: dict[str, tuple[float, str]] = {}
    for row in gpu_measurements(path):
        if row["rounds_per_s"] > best.get(row["dataset"], (0.0, ""))[0]:
            best[row["dataset"]] = (row["rounds_per_s"], row["device"])
    return best


def duration(seconds: float) -> str:
    minutes = round(seconds / 60)
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{max(minutes, 1)} min"


def estimate(entries: list[Entry], cpu_seconds: Mapping[tuple[str, int], float],
             rates: Mapping[str, tuple[float, str]], jobs: int) -> str:
    """How long the entries' runs take: `jobs` at a time on CPU cores (each slot taking the next run),
    and on one GPU at the best rate measured there (many runs sharing it)."""
    known = [cpu_seconds.get((e.run.dataset, e.run.rounds)) for e in entries]
    if None in known:
        cpu = "no CPU record to estimate from"
    else:
        cpu = f"{duration(slots_end(known, jobs))} at --jobs {jobs} on CPU cores"
    measured = [rates.get(e.run.dataset) for e in entries]
    if None in measured:
        return f"{cpu}, no GPU rate measured for {', '.join(sorted({e.run.dataset for e in entries if e.run.dataset not in rates}))}"
    seconds = sum(e.run.rounds / rate for e, (rate, _) in zip(entries, measured))
    devices = " / ".join(sorted({device for _, device in measured}))
    return f"{cpu}, {duration(seconds)} of one {devices} at its best measured rate"


def outlook(entries: list[Entry], cells: Mapping[Cell, set[str]], cpu_seconds: Mapping[tuple[str, int], float],
            rates: Mapping[str, tuple[float, str]], jobs: int) -> str:
    """One line on runs still to train: the undecided claims they bear on, and their time."""
    claims = sorted(set().union(*(cells.get(paper_cell(e), set()) for e in entries)))
    bears = f"{len(claims)} undecided claim(s) ({', '.join(claims)})" if claims else "no undecided claim"
    return f"{len(entries)} to train; {bears}; {estimate(entries, cpu_seconds, rates, jobs)}"
