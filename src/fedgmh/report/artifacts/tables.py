"""The tables: one per experiment, rounds and uploads to target, the costs, the controls summary."""

from __future__ import annotations

from typing import Any

from fedgmh.errors import ConfigError
from fedgmh.filing import format_number
from fedgmh.report.artifact import Artifact, Entry, Output, aggregated, every, need, one, switched_on, title


def _table_entry(caption: str, subcategory: str, table: str, form: str) -> Entry:
    return Entry(caption=caption, category="Tables", subcategory=subcategory, labels={"table": table, "format": form})


def _write_table(inputs, outputs, params) -> str:
    from fedgmh import report

    out = need(outputs, "tex")
    table = report.write_table(need(inputs, "results"), params["experiment"], out, out_csv=one(outputs, "csv"),
                               cells_csv=one(outputs, "cells"), title=params["title"], reference_path=one(inputs, "reference"),
                               accuracy=params["accuracy"])
    cells = table["cells"]
    return f"table {params['experiment']}: {cells['algorithm'].nunique()} methods x {len(table['settings'])} settings -> {out}"


TABLE = Artifact(
    name="table",
    kind="table",
    wildcard="experiment",
    outputs={
        "tex": Output("{experiment}.tex", _table_entry("table.rst", "{experiment}", "{experiment}", "LaTeX")),
        "csv": Output("{experiment}.csv", _table_entry("table.rst", "{experiment}", "{experiment}", "CSV")),
        "cells": Output("{experiment}.cells.csv"),
    },
    inputs=lambda plan, experiment: {"results": [aggregated(plan, experiment)], "reference": [plan.reference] if plan.reference else []},
    params=lambda plan, experiment: {"experiment": experiment, "title": title(plan, experiment),
                                     "accuracy": plan.config["table_accuracy"]},
    instances=lambda plan: list(plan.config["experiments"]),
    write=_write_table,
)


def target_numbers(spec: dict[str, Any]) -> list[float]:
    """A to-target key's targets as the tables take them."""
    return [float(format_number(t)) for t in spec.get("targets", [])]


def rounds_figure_experiment(plan) -> str:
    return plan.config["figures"][plan.rounds_to_target["figure"]]["experiment"]


def _check_rounds(plan) -> None:
    spec = plan.rounds_to_target
    if not spec:
        return
    figure = spec["figure"]
    if figure not in plan.config["figures"]:
        raise ConfigError(
            f"config: rounds_to_target.figure {figure!r} is not a figure; figures: {', '.join(plan.config['figures']) or 'none'}"
        )
    for algorithm, rounds in (spec.get("paper") or {}).items():
        if len(rounds) != len(spec["targets"]):
            raise ConfigError(f"config: rounds_to_target.paper.{algorithm} has {len(rounds)} rounds for {len(spec['targets'])} targets")


def check_experiment_setting(plan, name: str) -> None:
    """A report key naming an experiment and one of its settings (`uploads_to_target`, `layer_weights`):
    both must exist, the algorithms it names must be run there, `paper` values one per target."""
    spec, experiments = plan.config.get(name) or {}, plan.config["experiments"]
    if not spec:
        return
    exp = spec["experiment"]
    if exp not in experiments:
        raise ConfigError(f"config: {name}.experiment {exp!r} is not an experiment; experiments: {', '.join(experiments)}")
    settings = sorted({r.setting for r in plan.runs if r.experiment == exp})
    if spec["setting"] not in settings:
        raise ConfigError(f"config: {name}.setting {spec['setting']!r} is not a setting of {exp}; its settings: {', '.join(settings)}")
    run = set(experiments[exp]["algorithms"])
    unknown = sorted(set(spec.get("algorithms") or []) - run)
    if unknown:
        raise ConfigError(f"config: {name}.algorithms {unknown} are not run in {exp}; its algorithms: {', '.join(sorted(run))}")
    for algorithm, values in (spec.get("paper") or {}).items():
        if len(values) != len(spec["targets"]):
            raise ConfigError(f"config: {name}.paper.{algorithm} has {len(values)} values for {len(spec['targets'])} targets")


def _write_rounds(inputs, outputs, params) -> str:
    from fedgmh import report

    out = need(outputs, "tex")
    table = report.write_rounds_to_target(need(inputs, "curves"), params["experiment"], params["setting"], params["targets"], out,
                                          out_csv=one(outputs, "csv"), paper=params["paper"], title="Rounds to target")
    return f"rounds: {table['algorithm'].nunique()} methods x {len(params['targets'])} targets -> {out}"


ROUNDS_TO_TARGET = Artifact(
    name="rounds_to_target",
    kind="table",
    switch="rounds_to_target",
    outputs={
        "tex": Output("rounds_to_target.tex", _table_entry("rounds.rst", "rounds to target", "rounds to target", "LaTeX")),
        "csv": Output("rounds_to_target.csv", _table_entry("rounds.rst", "rounds to target", "rounds to target", "CSV")),
    },
    inputs=lambda plan, _: {"curves": [aggregated(plan, rounds_figure_experiment(plan), "curves")]},
    params=lambda plan, _: {
        "experiment": rounds_figure_experiment(plan),
        "setting": plan.config["figures"][plan.rounds_to_target["figure"]]["setting"],
        "targets": target_numbers(plan.rounds_to_target),
        "paper": plan.rounds_to_target.get("paper") or {},
    },
    instances=switched_on(lambda plan: plan.rounds_to_target),
    check=_check_rounds,
    document="tex",
    rank=1,
    write=_write_rounds,
)


def _write_uploads(inputs, outputs, params) -> str:
    from fedgmh.report.to_target import write_uploads_to_target

    out = need(outputs, "tex")
    table = write_uploads_to_target(need(inputs, "curves"), params["experiment"], params["setting"], params["targets"], out,
                                    out_csv=one(outputs, "csv"), metric=params["metric"], paper=params["paper"], title=params["title"])
    return f"uploads: {table['algorithm'].nunique()} methods x {len(params['targets'])} targets -> {out}"


UPLOADS_TO_TARGET = Artifact(
    name="uploads_to_target",
    kind="table",
    switch="uploads_to_target",
    outputs={
        "tex": Output("uploads_to_target.tex", _table_entry("uploads.rst", "uploads to target", "uploads to target", "LaTeX")),
        "csv": Output("uploads_to_target.csv", _table_entry("uploads.rst", "uploads to target", "uploads to target", "CSV")),
    },
    inputs=lambda plan, _: {"curves": [aggregated(plan, plan.uploads_to_target["experiment"], "curves")]},
    params=lambda plan, _: {
        "experiment": plan.uploads_to_target["experiment"],
        "setting": plan.uploads_to_target["setting"],
        "targets": target_numbers(plan.uploads_to_target),
        "metric": plan.uploads_to_target.get("metric") or "test_acc_mean",
        "paper": plan.uploads_to_target.get("paper") or {},
        "title": plan.uploads_to_target.get("title") or "Client uploads to target",
    },
    instances=switched_on(lambda plan: plan.uploads_to_target),
    check=lambda plan: check_experiment_setting(plan, "uploads_to_target"),
    document="tex",
    rank=2,
    write=_write_uploads,
)


COSTS = Artifact(
    name="costs",
    kind="table",
    switch="costs_runs",
    outputs={
        "csv": Output("costs.csv", _table_entry("costs.rst", "costs", "costs", "CSV")),
        "tex": Output("costs.tex", _table_entry("costs.rst", "costs", "costs", "LaTeX")),
    },
    inputs=lambda plan, _: {"records": [f"{d}/run.json" for d in plan.experiment_run_dirs(plan.experiment_key("costs_runs"))]
                            if plan.experiment_key("costs_runs") else []},
    document="tex",
    rank=3,
    write="fedgmh.cli_costs:write_artifact",
)


def _write_controls(inputs, outputs, params) -> str:
    from pathlib import Path

    from fedgmh.report.controls import write_control_summary

    out = need(outputs, "md")
    summary = write_control_summary(Path(need(inputs, "results")), [Path(p) for p in every(inputs, "stats")], Path(out),
                                    Path(need(outputs, "csv")), params["title"])
    return f"controls: {summary['method'].nunique()} methods x {summary['setting'].nunique()} settings -> {out}"


def _controls_inputs(plan, _) -> dict[str, list[str]]:
    experiment = plan.experiment_key("controls_summary")
    stats = sorted({f"{plan.results}/partitions/{run.partition}.stats.csv" for run in plan.runs if run.experiment == experiment})
    return {"results": [aggregated(plan, experiment)], "stats": stats}


CONTROLS_SUMMARY = Artifact(
    name="controls_summary",
    kind="table",
    switch="controls_summary",
    outputs={
        "md": Output("controls_summary.md", _table_entry("controls.rst", "controls", "controls summary", "Markdown")),
        "csv": Output("controls_summary.csv"),
    },
    inputs=_controls_inputs,
    params=lambda plan, _: {"title": title(plan, plan.experiment_key("controls_summary"))},
    instances=switched_on(lambda plan: plan.experiment_key("controls_summary")),
    write=_write_controls,
)

ARTIFACTS = (TABLE, ROUNDS_TO_TARGET, UPLOADS_TO_TARGET, COSTS, CONTROLS_SUMMARY)
