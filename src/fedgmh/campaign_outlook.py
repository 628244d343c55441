"""What the campaign's groups are worth and cost (`fedgmh campaign status`): the paper's claims each
group decides, and how long its runs take.

A group decides a claim still undecided when, after its runs and those of the groups before it, every
cell the claim needs (`Claim.needs`) has runs of as many seeds as its test can decide on
(`Claim.fewest_seeds`: 3, or 5 for a sign test: which method comes first, only after a round) under a
reading of the protocol; a claim whose cells were complete before the group is not the group's. Runs exist when the store holds a record of their computation (`RunSpec.computation`:
FedProx with mu = 0 is FedAvg). A run gives a seed to its experiment's cell under the paper's text,
or, when its experiment and variant stand for a paper experiment under PFLlib's reading (config
`official_reading`), to that experiment's cell there; Table 5's official FedGMH runs stand for Table
2's (`STAND_INS`, as fedgmh.so_far reads them). Verdicts come from the committed
comparison so far (claims.csv under the paper's text, claims_pflib.csv under PFLlib's).

Times: a run on one CPU core takes the median wall time of the committed records trained on a CPU with
the same dataset and rounds, from start to end (resumed runs left out), `jobs` at a time; on a GPU,
the group's rounds at the best rate measured for the dataset (benchmarks/gpu_throughput.csv).
"""

from __future__ import annotations

import csv
import json
import statistics
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from fedgmh.filing import parse_setting_id
from fedgmh.plan_estimate import GPU_RATES, gpu_measurements, slots_end
from fedgmh.report.artifacts.paper import official_reading
from fedgmh.runspec import RunSpec
from fedgmh.store import scan_specs

#: verdicts more runs do not change: decided, or the data are not to be had offline (CIFAR-10)
SETTLED = ("holds", "does not hold", "data unavailable offline")
READINGS = {"paper": "claims.csv", "official": "claims_pflib.csv"}

Cell = tuple[str, str, str, str]  # reading, experiment, setting (without its @variant), algorithm
#: (reading, experiment, algorithm) -> the experiment whose cell of the same setting it also stands for:
#: Table 5's FedGMH under the official code is Table 2's, evaluated every round (config/config.yaml)
STAND_INS = {("official", "table5", "fedgmh"): "table2"}


def run_cells(run: Any, official: Mapping[tuple[str, str], str]) -> list[Cell]:
    """The claims' cells a plan's run gives a seed to (`official`: (experiment, variant) -> the paper
    experiment it stands for under PFLlib's reading, the inverse of config `official_reading`)."""
    setting, paper = parse_setting_id(run.setting).without_variant, official.get((run.experiment, run.variant))
    cell = ("official", paper, setting, run.algorithm) if paper else ("paper", run.experiment, setting, run.algorithm)
    other = STAND_INS.get((cell[0], cell[1], cell[3]))
    return [cell] + ([(cell[0], other, setting, cell[3])] if other else [])


def official_sources(plan: Any) -> dict[tuple[str, str], str]:
    """(experiment, variant) -> the paper experiment it stands for under PFLlib's reading."""
    return {source: paper for paper, source in official_reading(plan).items()}


def stored_computations(stores: Iterable[Path]) -> set[RunSpec]:
    """What the records of the stores compute, their data unknown (as a plan's specs are)."""
    return {spec.without_data().computation() for _, spec in scan_specs(stores)[0]}


def stored_seeds(runs: Iterable[Any], computations: set[RunSpec], official: Mapping[tuple[str, str], str]) -> dict[Cell, set[int]]:
    """cell -> the seeds of the plan's `runs` whose computation a record holds."""
    seeds: dict[Cell, set[int]] = {}
    for run in runs:
        if run.spec.computation() in computations:
            for cell in run_cells(run, official):
                seeds.setdefault(cell, set()).add(run.seed)
    return seeds


def entry_cells(runs: Iterable[Any], plan_runs: Iterable[Any], official: Mapping[tuple[str, str], str]) -> list[tuple[Cell, int]]:
    """The (cell, seed)s that training `runs` gives: those of every plan run of the same computation
    (FedAvg's run gives FedProx's mu = 0 cell its seed too)."""
    same: dict[RunSpec, list[Any]] = {}
    for run in plan_runs:
        same.setdefault(run.spec.computation(), []).append(run)
    return [(cell, other.seed) for run in runs for other in same.get(run.spec.computation(), [run])
            for cell in run_cells(other, official)]


def decidable(claims: Iterable, verdicts: Mapping[str, Mapping[str, str]], seeds: Mapping[Cell, set[int]]) -> set[tuple[str, str]]:
    """(reading, claim id) of every claim undecided under a reading (no settled verdict) whose every
    needed cell has the claim's fewest seeds there."""
    found = set()
    for claim in claims:
        needs, fewest = claim.needs(), claim.fewest_seeds()
        for reading in READINGS:
            if needs and verdicts.get(reading, {}).get(claim.id) not in SETTLED and all(
                    len(seeds.get((reading, n.experiment, n.setting, n.algorithm), ())) >= fewest for n in needs):
                found.add((reading, claim.id))
    return found


def decided_by_group(groups: Iterable[tuple[str, list[tuple[Cell, int]]]], claims: list, verdicts: Mapping[str, Mapping[str, str]],
                     seeds: Mapping[Cell, set[int]]) -> dict[str, list[tuple[str, str]]]:
    """group title -> the (reading, claim id) it decides, in order: decidable after its (cell, seed)s and
    those of the groups before it, and not before."""
    seeds = {cell: set(found) for cell, found in seeds.items()}
    before, decided = decidable(claims, verdicts, seeds), {}
    for title, cells in groups:
        for cell, seed in cells:
            seeds.setdefault(cell, set()).add(seed)
        after = decidable(claims, verdicts, seeds)
        decided[title] = sorted(after - before)
        before = after
    return decided


def claims_text(decided: list[tuple[str, str]]) -> str:
    """'N claim(s) (ids, [PFLlib's reading: ids])'."""
    paper = [claim for reading, claim in decided if reading == "paper"]
    official = [claim for reading, claim in decided if reading == "official"]
    parts = [", ".join(paper)] if paper else []
    parts += [f"under PFLlib's reading {', '.join(official)}"] if official else []
    return f"{len(decided)} claim(s)" + (f" ({'; '.join(parts)})" if parts else "")


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


def times(entries: list, cpu_seconds: Mapping[tuple[str, int], float], rates: Mapping[str, tuple[float, str]],
          jobs: int) -> tuple[float | None, float | None]:
    """Seconds the entries' runs take `jobs` at a time on CPU cores (each slot taking the next run), and
    on one GPU at the best rate measured there (many runs sharing it); None where no record or rate says."""
    known = [cpu_seconds.get((e.run.dataset, e.run.rounds)) for e in entries]
    measured = [rates.get(e.run.dataset) for e in entries]
    cpu = None if None in known else slots_end(known, jobs)
    gpu = None if None in measured else sum(e.run.rounds / rate for e, (rate, _) in zip(entries, measured))
    return cpu, gpu


def estimate(entries: list, cpu_seconds: Mapping[tuple[str, int], float],
             rates: Mapping[str, tuple[float, str]], jobs: int) -> str:
    """How long the entries' runs take (`times`), in words."""
    cpu_s, gpu_s = times(entries, cpu_seconds, rates, jobs)
    cpu = "no CPU record to estimate from" if cpu_s is None else f"{duration(cpu_s)} at --jobs {jobs} on CPU cores"
    if gpu_s is None:
        return f"{cpu}, no GPU rate measured for {', '.join(sorted({e.run.dataset for e in entries if e.run.dataset not in rates}))}"
    devices = " / ".join(sorted({rates[e.run.dataset][1] for e in entries}))
    return f"{cpu}, {duration(gpu_s)} of one {devices} at its best measured rate"


def worth(decided: list[tuple[str, str]], left: list, cpu_seconds: Mapping[tuple[str, int], float],
          rates: Mapping[str, tuple[float, str]], jobs: int) -> str:
    """One line on a group: the claims it decides, its runs still to train, their machine-hours (CPU,
    `jobs` at a time), GPU-minutes, and claims decided per machine-hour."""
    cpu_s, gpu_s = times(left, cpu_seconds, rates, jobs)
    hours = "no CPU record to estimate from" if cpu_s is None else f"{cpu_s / 3600:.1f} machine-hours at --jobs {jobs} on CPU"
    gpu = "no GPU rate measured" if gpu_s is None else f"{gpu_s / 60:.0f} GPU-minutes"
    rate = f"; {len(decided) / (cpu_s / 3600):.2f} claims per machine-hour" if cpu_s and decided else ""
    return f"decides {claims_text(decided)}; {len(left)} to train: {hours}, {gpu}{rate}"
