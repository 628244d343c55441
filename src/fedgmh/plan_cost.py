"""What a config's workflow will cost before it runs (`fedgmh plan`): which planned runs reuse a
finished record, which will train, and for about how long.

A planned run is reused when a record of it exists: a finished run in its own folder under
results/<name>/runs/, or a record anywhere in the config's `stores` (paper_artifacts/ by default) whose
spec equals the run's, or computes the same (`RunSpec.computation`), in everything a plan knows without the data (`Run.spec`; the dataset's
fingerprint and the partition's digest are compared by the training job itself). The time of a run
to train (of every planned run, when none is left to train) is estimated by fedgmh.plan_estimate: on
CPU cores from the nearest records' wall times, on one GPU the runs share from the measured rates.
Nothing here imports torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from fedgmh.errors import UserError
from fedgmh.plan import Plan, Run, config_problems
from fedgmh.plan_estimate import GPU_RATES, Estimate, estimate
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
    if not (workflow_dir / SCHEMA).is_file():
        raise UserError(f"{workflow_dir.resolve()} is not the repository's root (it has no {SCHEMA}): "
                        "run from the repository root, the folder with the Snakefile")
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
    problems = config_problems(config, schema)
    if problems:
        raise UserError("invalid configuration: " + "; ".join(line.strip() for line in problems) + " (every key: config/README.md)")
    return Plan(config, basedir=workflow_dir)




@dataclass
class Cost:
    """A plan's runs split by where their results come from, and the estimated time of those to train."""

    runs: int
    reused: dict[str, int]  # source (a results folder or a store) -> runs it gives
    to_train: list[Run]
    estimate: Estimate | None = None  # of the runs to train; with none to train, of training every run again


def plan_cost(plan: Plan, jobs: int = 1) -> Cost:
    """Which of the plan's training runs are reused (from the finished runs of its results folder
    first, then from its stores) and the estimated time of the others (of all, when none is left) on
    CPU cores, `jobs` at a time, and on one GPU they share (fedgmh.plan_estimate)."""
    results = f"{plan.results}/runs"
    found: dict[str, list[StoredRun]] = {source: scan([source])[0] for source in [results, *plan.config["stores"]]}
    finished = {stored.folder.resolve(): stored.spec.without_data() for stored in found[results]}
    stored_in: dict[RunSpec, str] = {}  # specs compare and hash as values (alpha 5 == 5.0)
    for source in plan.config["stores"]:  # in config order, as the training job searches them
        for stored in found[source]:
            stored_in.setdefault(stored.spec.without_data().computation(), source)
    reused: dict[str, int] = {}
    to_train = []
    for run in plan.train_jobs.values():
        if finished.get(Path(run.run_dir).resolve()) == run.spec:  # finished in its own folder: the job does not run
            source = results
        else:
            source = stored_in.get(run.spec.computation())
        if source is None:
            to_train.append(run)
        else:
            reused[source] = reused.get(source, 0) + 1
    cost = Cost(len(plan.train_jobs), reused, to_train)
    records = [stored.record for stored_runs in found.values() for stored in stored_runs]
    cost.estimate = estimate(to_train or list(plan.train_jobs.values()), records, jobs)
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
    if cost.estimate is None or not cost.estimate.runs:
        return lines
    if not cost.to_train:
        lines.append(f"nothing to train; training all {cost.runs} again (without the records) would take:")
    lines += estimate_lines(cost.estimate, listed)
    if listed:
        lines += [f"to train: {run.run_dir}" for run in cost.to_train]
    return lines


def _shown(names: list[str], listed: bool) -> str:
    names = sorted(set(names))
    return ", ".join(names if listed or len(names) <= SHOWN_PAIRS else names[:SHOWN_PAIRS] + [f"{len(names) - SHOWN_PAIRS} more (--list)"])


def estimate_lines(found: Estimate, listed: bool = False) -> list[str]:
    """The CPU and GPU lines of an estimate."""
    pace = "one after the other" if found.jobs == 1 else f"{found.jobs} at a time (--jobs {found.jobs})"
    cpu = (f"on a CPU: about {duration(found.cpu_seconds)} for {found.runs} run(s), {pace}, from {found.cpu_records} "
           "records' wall times")
    if found.cpu_nearest:
        cpu += "; without records of their own, " + "; ".join(f"{len(names)} run(s) ({_shown(names, listed)}) at the rate of {how}"
                                                           for how, names in found.cpu_nearest.items())
    if found.gpu_seconds is None:
        return [cpu, f"on one GPU: no estimate, no rate measured for {', '.join(found.gpu_missing)} or a dataset like it ({GPU_RATES})"]
    measured = {(used["as"], used["rounds_per_s"], used["runs_at_once"], used["device"]) for used in found.gpu_used.values()}
    rates = ", ".join(f"{dataset} {rate:g} on an {device} with {runs} at once" for dataset, rate, runs, device in sorted(measured))
    stand_ins = [f"{dataset} at {used['as']}'s rate" for dataset, used in found.gpu_used.items() if used["as"] != dataset]
    gpu = (f"on one GPU: about {duration(found.gpu_seconds)} for the {found.runs} run(s) sharing it, at the rounds/s measured "
           f"({rates}{'; ' + ', '.join(stand_ins) if stand_ins else ''}; {GPU_RATES})")
    return [cpu, gpu]
