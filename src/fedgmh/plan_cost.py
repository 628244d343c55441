"""What a config's workflow will cost before it runs (`fedgmh plan`): which planned runs reuse a
finished record, which will train, and for about how long.

A planned run is reused when a record of it exists: a finished run in its own folder under
results/<name>/runs/, or a record anywhere in the config's `stores` (paper_artifacts/ by default) whose
spec equals the run's in everything a plan knows without the data (`Run.spec`; the dataset's
fingerprint and the partition's digest are compared by the training job itself). The time of a run
to train is estimated from the records of its dataset and algorithm, separately for a CPU and a GPU:
their median wall time per unit of work (rounds x local epochs x join ratio, what a run's time
grows with), times the run's work. Records of a resumed run (wall time of a part only) are left out.
Nothing here imports torch.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fedgmh.errors import UserError
from fedgmh.plan import Plan, Run, schema_problems, with_defaults
from fedgmh.runspec import RunSpec
from fedgmh.store import StoredRun, scan

#: the workflow's config when no --configfile is given (the Snakefile's `configfile:`)
DEFAULT_CONFIG = "config/config.yaml"
SCHEMA = "workflow/schemas/config.schema.yaml"
DEVICE_KINDS = ("CPU", "GPU")
#: (algorithm, dataset) pairs without an estimate that a line names before "N more"
SHOWN_PAIRS = 4


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """Snakemake's `--config KEY=VALUE ...`: top-level keys, each value read as YAML."""
    parsed = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserError(f"--config {item!r} is not KEY=VALUE")
        parsed[key] = yaml.safe_load(value)
    return parsed


def _merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """`update` over `base`, mappings merged key by key (as Snakemake merges config files and --config)."""
    merged = dict(base)
    for key, value in update.items():
        merged[key] = _merge(merged[key], value) if isinstance(value, dict) and isinstance(merged.get(key), dict) else value
    return merged


def load_plan(configfiles: list[str], overrides: list[str], basedir: Path | str = ".", workflow_dir: Path | str | None = None) -> Plan:
    """The plan the workflow builds for `snakemake --configfile FILES --config KEY=VALUE...` run in
    `basedir` (the config files' folder) with the Snakefile of `workflow_dir` (its schema; default
    `basedir`). Each problem of the config is one line naming the file or the key."""
    basedir = Path(basedir)
    workflow_dir = Path(workflow_dir) if workflow_dir is not None else basedir
    config: dict[str, Any] = {}
    for name in configfiles or [DEFAULT_CONFIG]:
        path = basedir / name
        try:
            loaded = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError) as err:
            raise UserError(f"config file {name} cannot be read ({err})") from None
        if not isinstance(loaded, dict):
            raise UserError(f"config file {name} is not a mapping of config keys")
        config = _merge(config, loaded)
    config = _merge(config, parse_overrides(overrides))
    schema = yaml.safe_load((workflow_dir / SCHEMA).read_text())
    with_defaults(config, schema)
    problems = schema_problems(config, schema)
    if problems:
        raise UserError(f"invalid configuration: {problems[0]}" + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
    return Plan(config, basedir=workflow_dir)


def _work(rounds: float, local_epochs: float, join_ratio: float) -> float:
    return rounds * local_epochs * join_ratio


def device_kind(record: dict[str, Any]) -> str:
    """CPU or GPU, from a record's `device` ('cpu', 'cuda:0 (NVIDIA H100 ...)')."""
    return "GPU" if str(record.get("device", "")).startswith("cuda") else "CPU"


def rates(records: list[StoredRun]) -> dict[tuple[str, str, str], tuple[float, int]]:
    """(dataset, algorithm, device kind) -> (median seconds per unit of work, records it comes from)."""
    found: dict[tuple[str, str, str], list[float]] = {}
    for stored in records:
        record, config = stored.record, stored.record.get("config", {})
        wall = record.get("wall_time_s")
        if record.get("resumed_from_round") is not None or not isinstance(wall, (int, float)):
            continue
        work = _work(config["rounds"], config["local_epochs"], config["join_ratio"])
        if work > 0:
            found.setdefault((config["dataset"], config["algorithm"], device_kind(record)), []).append(wall / work)
    return {group: (statistics.median(values), len(values)) for group, values in found.items()}


@dataclass
class Cost:
    """A plan's runs split by where their results come from, and the estimated time of those to train."""

    runs: int
    reused: dict[str, int]  # source (a results folder or a store) -> runs it gives
    to_train: list[Run]
    seconds: dict[str, float] = field(default_factory=dict)  # device kind -> estimated seconds of the runs it can estimate
    records_used: dict[str, int] = field(default_factory=dict)  # device kind -> records behind the estimate
    unestimated: dict[str, dict[tuple[str, str], int]] = field(default_factory=dict)  # kind -> (dataset, algorithm) -> runs


def plan_cost(plan: Plan) -> Cost:
    """Which of the plan's training runs are reused (from the finished runs of its results folder
    first, then from its stores) and the estimated time of the others on a CPU and on a GPU."""
    results = f"{plan.results}/runs"
    found: dict[str, list[StoredRun]] = {source: scan([source])[0] for source in [results, *plan.config["stores"]]}
    finished = {stored.folder.resolve(): stored.spec.without_data() for stored in found[results]}
    stored_in: dict[RunSpec, str] = {}  # specs compare and hash as values (alpha 5 == 5.0)
    for source in plan.config["stores"]:  # in config order, as the training job searches them
        for stored in found[source]:
            stored_in.setdefault(stored.spec.without_data(), source)
    reused: dict[str, int] = {}
    to_train = []
    for run in plan.train_jobs.values():
        if finished.get(Path(run.run_dir).resolve()) == run.spec:  # finished in its own folder: the job does not run
            source = results
        else:
            source = stored_in.get(run.spec)
        if source is None:
            to_train.append(run)
        else:
            reused[source] = reused.get(source, 0) + 1
    cost = Cost(len(plan.train_jobs), reused, to_train)
    known = rates([stored for records in found.values() for stored in records])
    for kind in DEVICE_KINDS:
        cost.seconds[kind], cost.records_used[kind], cost.unestimated[kind] = 0.0, 0, {}
        used: set[tuple[str, str]] = set()
        for run in to_train:
            rate = known.get((run.dataset, run.algorithm, kind))
            if rate is None:
                group = cost.unestimated[kind]
                group[(run.dataset, run.algorithm)] = group.get((run.dataset, run.algorithm), 0) + 1
                continue
            cost.seconds[kind] += rate[0] * _work(run.rounds, run.local_epochs, run.join_ratio)
            if (run.dataset, run.algorithm) not in used:
                used.add((run.dataset, run.algorithm))
                cost.records_used[kind] += rate[1]
    return cost


def duration(seconds: float) -> str:
    """'3 h 05 min', '12 min', '40 s'."""
    if seconds < 60:
        return f"{math.ceil(seconds)} s"
    minutes = math.ceil(seconds / 60)
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{minutes} min"


def cost_lines(plan: Plan, cost: Cost, listed: bool = False) -> list[str]:
    """What `fedgmh plan` prints."""
    sources = ", ".join(f"{n} from {source}" for source, n in cost.reused.items())
    lines = [f"plan {plan.name}: {cost.runs} training runs: {sum(cost.reused.values())} reused"
             + (f" ({sources})" if sources else "") + f", {len(cost.to_train)} to train"]
    if not cost.to_train:
        return lines
    for kind in DEVICE_KINDS:
        missing = cost.unestimated[kind]
        estimated = len(cost.to_train) - sum(missing.values())
        line = f"on a {kind}: " + (f"about {duration(cost.seconds[kind])} for {estimated} run(s), one after the other (from "
                                   f"{cost.records_used[kind]} records' wall times)" if estimated else "no estimate")
        if missing:
            pairs = [f"{algorithm} on {dataset}" for dataset, algorithm in sorted(missing)]
            shown = pairs if listed or len(pairs) <= SHOWN_PAIRS else pairs[:SHOWN_PAIRS] + [f"{len(pairs) - SHOWN_PAIRS} more (--list)"]
            line += f"; no record of {', '.join(shown)} for {'the other' if estimated else 'its'} {sum(missing.values())} run(s)"
        lines.append(line)
    if listed:
        lines += [f"to train: {run.run_dir}" for run in cost.to_train]
    return lines
