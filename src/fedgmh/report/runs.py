"""Run directories -> tidy results (one row per run) and per-round curves (long format).

A run directory is what `fedgmh train --out RUNDIR` writes: `metrics.csv` (one row per evaluated
round) and `run.json`, the run's one record: its `config`, the parameters of its `partition`
(classes_per_client, alpha, num_clients) and, for runs of the workflow, its `workflow` labels
(experiment, ...).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from fedgmh.cards import resolve_options
from fedgmh.errors import UserError
from fedgmh.io import reading, write_csv
from fedgmh.record import check_fields, load_record, results_of
from fedgmh.report.checks import check_aggregate
from fedgmh.report.labels import (
    ADAPTATION_COLUMNS, BASE_COLUMNS, PARTITION_FIELDS, REPORTED_OPTIONS, RESULT_COLUMNS,
)
from fedgmh.filing import assign_setting_ids, base_id, parse_setting_id
from fedgmh.report.outputs import check_outputs
from fedgmh.report.parsing import jsonable, parse_options
from fedgmh.runspec import EXECUTION_OPTIONS

LAST_ROUNDS = 10  # `last10_test_acc`: the mean test accuracy of the last 10 evaluated rounds
#: metrics.csv columns kept in curves.csv when a run has them (`clients_up`: clients that uploaded in the round)
CURVE_COLUMNS = ("round", "test_acc", "test_acc_mean", "test_acc_std", "train_loss", "clients_up")
#: the engine options that choose which rounds are evaluated (they draw nothing: training is the same)
EVALUATION_OPTIONS = ("eval_every", "eval_last")


def load_run(run_dir: Path | str, preset_evaluation: bool = False,
             best_of_last: int | None = None) -> tuple[dict[str, Any], pd.DataFrame]:
    """One run's tidy record (without setting; `workflow`: its workflow labels, {} for none) and its metrics frame.

    With `preset_evaluation`, a run trained with its own `eval_every` / `eval_last` is reported as
    its preset evaluates (`as_preset_evaluates`); the metrics frame keeps every evaluated round.
    With `best_of_last` N, its best accuracies are over its last N rounds (`over_last_rounds`).
    A missing, incomplete or invalid run (fedgmh.record: its numbers disagree, a file is a link...)
    raises a UserError that names the run directory.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise UserError(f"run {run_dir}: directory not found (has the training run?)")
    missing = [name for name in ("run.json", "metrics.csv") if not os.path.lexists(run_dir / name)]
    if missing:
        raise UserError(f"run {run_dir}: {' and '.join(missing)} missing; the run is incomplete or failed (see its log) - re-run it")
    try:
        record, metrics = load_record(run_dir)
    except UserError as err:
        raise UserError(f"run {run_dir}: {err}") from None
    absent = check_fields(record)
    if absent:
        raise UserError(f"run {run_dir}: run.json lacks {', '.join(absent)}; it was not written by a finished `fedgmh train`")
    config = record["config"]

    partition = record.get("partition") if isinstance(record.get("partition"), dict) else {}
    absent = [k for k in PARTITION_FIELDS if partition.get(k) is None]
    if absent:
        raise UserError(f"run {run_dir}: run.json's partition lacks {' and '.join(absent)}; it was not written by a finished `fedgmh train`")
    row: dict[str, Any] = {
        "dataset": record["dataset"],
        "classes_per_client": partition["classes_per_client"],
        "alpha": partition["alpha"],
        "clients": partition.get("num_clients", record.get("num_clients")),
        "assignment": partition.get("assignment") or "random",  # absent: ExDir's random draw (records before `chain`)
        "algorithm": record["algorithm"],
        "seed": int(record["seed"]),
        "rounds": config.get("rounds"),
        "local_epochs": config.get("local_epochs"),
        "join_ratio": config.get("join_ratio"),
        "batch_size": config.get("batch_size"),
        "lr": config.get("lr"),
        # how a run was computed (memory_format, conv, ...) is not what it is: not a cell's option
        "options": {k: v for k, v in parse_options(config.get("overrides")).items() if k not in EXECUTION_OPTIONS},
        "resolved_options": {k: jsonable(v) for k, v in (record.get("algorithm_options") or {}).items()
                             if k in REPORTED_OPTIONS and isinstance(v, (str, int, float, bool))},
        "best_test_acc": float(record["best_test_acc"]),
        "best_round": int(record["best_round"]),
        "final_test_acc": float(record["final_test_acc"]),
        "last10_test_acc": float(metrics["test_acc"].tail(LAST_ROUNDS).mean()),
        "best_test_acc_mean": best_client_mean(metrics),
        "rounds_evaluated": int(len(metrics)),
        "wall_time_s": float(record["wall_time_s"]),
        "run_dir": str(run_dir),
        "experiment": str((record.get("workflow") or {}).get("experiment", "")),
        "workflow": dict(record.get("workflow") or {}),
    }
    if preset_evaluation:
        row = as_preset_evaluates(row, metrics, run_dir)
    if best_of_last:
        row = over_last_rounds(row, metrics, best_of_last, run_dir)
    return row | adaptation_of(run_dir), metrics


def as_preset_evaluates(row: dict[str, Any], metrics: pd.DataFrame, run_dir: Path) -> dict[str, Any]:
    """A run's row as if trained without its `eval_every` / `eval_last` options: its best, final and
    last-10 accuracies over the rounds its preset evaluates (the official FedGMH code: the last 20),
    those options dropped. Evaluation draws nothing from the training streams, so this is the
    number the preset's own run reports; a run that lacks one of those rounds is refused."""
    given = [k for k in EVALUATION_OPTIONS if k in row["options"]]
    if not given:
        return row
    options = {k: v for k, v in row["options"].items() if k not in EVALUATION_OPTIONS}
    _, engine = resolve_options(row["algorithm"], options)
    rounds = int(row["rounds"])
    wanted = [r for r in range(rounds + 1) if engine.evaluates(r, rounds)]
    missing = sorted(set(wanted) - set(metrics["round"].astype(int)))
    if missing:
        raise UserError(f"run {run_dir}: its preset evaluates rounds it did not ({len(missing)}, e.g. {missing[0]}): "
                        "it cannot be reported as its preset evaluates")
    evaluated = metrics[metrics["round"].isin(wanted)].reset_index(drop=True)
    results = results_of(evaluated)
    return row | {"options": options, "best_test_acc": results["best_test_acc"], "best_round": results["best_round"],
                  "final_test_acc": results["final_test_acc"], "rounds_evaluated": results["evaluated_rounds"],
                  "last10_test_acc": float(evaluated["test_acc"].tail(LAST_ROUNDS).mean()),
                  "best_test_acc_mean": best_client_mean(evaluated)}


def over_last_rounds(row: dict[str, Any], metrics: pd.DataFrame, last: int, run_dir: Path) -> dict[str, Any]:
    """A run's row with its best accuracies (pooled and mean over clients) and their round taken over
    its last `last` rounds, the one scoring rule that every run of a reading can follow (the official
    FedGMH code evaluates only its last 20); a run that did not evaluate each of them is refused."""
    rounds = int(row["rounds"])
    wanted = set(range(rounds - last + 1, rounds + 1))
    missing = sorted(wanted - set(metrics["round"].astype(int)))
    if missing:
        raise UserError(f"run {run_dir}: it did not evaluate {len(missing)} of its last {last} rounds (e.g. {missing[0]}), "
                        f"so its best over them is unknown")
    window = metrics[metrics["round"].isin(wanted)].reset_index(drop=True)
    results = results_of(window)
    return row | {"best_test_acc": results["best_test_acc"], "best_round": results["best_round"],
                  "best_test_acc_mean": best_client_mean(window)}


def best_client_mean(metrics: pd.DataFrame) -> float:
    """The best over the evaluated rounds of the unweighted mean of the clients' accuracies
    (`test_acc_mean`), the other reading of the paper's "average accuracy of all clients" beside the
    pooled `test_acc` (docs/verdicts.md); nan for a record without that column."""
    if "test_acc_mean" not in metrics.columns or metrics["test_acc_mean"].isna().all():
        return math.nan
    return float(metrics["test_acc_mean"].max())


def adaptation_of(run_dir: Path) -> dict[str, Any]:
    """ADAPTATION_COLUMNS of a run with a non-empty adaptation.csv (FedBABU, Per-FedAvg), else {}."""
    path = run_dir / "adaptation.csv"
    table = pd.read_csv(path) if path.is_file() else pd.DataFrame()
    if table.empty:
        return {}
    return {"before_adaptation": float(table["correct_before"].sum() / table["test_samples"].sum()),
            "adaptation_budget": str(table["budget"].iloc[0])}


def aggregate_runs(run_dirs: Sequence[Path | str], experiment: str | None = None,
                   variants: Sequence[str] | None = None, default_clients: int | None = None,
                   preset_evaluation: bool = False, best_of_last: int | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Tidy results (one row per run) and curves (one row per run and evaluated round).

    `experiment` labels every row (the workflow passes the table id); otherwise each run's own
    (run.json `workflow.experiment`) is used, or '' when it has none. A run's setting id is the one
    its record files it under (`recorded_setting`), else the one `assign_setting_ids` gives it among the
    runs of its experiment.
    `variants`, one name per run directory (the workflow passes them for experiments with
    `variants`), become the `variant` column and the `@<variant>` part of the setting ids.
    `default_clients`: the config's number of clients; runs with another get `_n<N>` in their setting
    id, as the workflow's run folders (None: no such part). `preset_evaluation`, `best_of_last`: see `load_run`.
    """
    if not run_dirs:
        raise UserError("no run directories given")
    if best_of_last is not None and best_of_last < 1:
        raise UserError(f"--best-of-last {best_of_last}: give a number of rounds >= 1")
    if default_clients is not None and default_clients < 1:
        raise UserError(f"--clients {default_clients}: give a number of clients >= 1")
    if variants is not None and len(variants) != len(run_dirs):
        raise UserError(f"{len(variants)} variant names for {len(run_dirs)} run directories; give one per run")
    rows, curves = [], []
    seen: dict[str, str] = {}
    for index, run_dir in enumerate(run_dirs):
        key = str(Path(run_dir).resolve())
        if key in seen:
            raise UserError(f"run {run_dir} is listed twice")
        seen[key] = str(run_dir)
        with reading(run_dir):
            row, metrics = load_run(run_dir, preset_evaluation, best_of_last)
        row["variant"] = variants[index] if variants is not None else ""
        if experiment is not None:
            row["experiment"] = experiment
        rows.append(row)
        curves.append(metrics)

    # setting ids, per experiment
    by_experiment: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        by_experiment.setdefault(row["experiment"], []).append(i)
    for indices in by_experiment.values():
        ids = assign_setting_ids([rows[i] for i in indices], default_clients=default_clients)
        for i, sid in zip(indices, ids):
            rows[i]["setting"] = recorded_setting(rows[i], default_clients) or sid
        _check_duplicates([rows[i] for i in indices])

    option_keys = sorted({k for row in rows for k in (*row["options"], *row["resolved_options"])})
    option_columns = {k: (k if k not in BASE_COLUMNS + RESULT_COLUMNS else f"opt_{k}") for k in option_keys}
    records = []
    for row in rows:
        rec = {c: row.get(c) for c in BASE_COLUMNS}
        rec["options"] = json.dumps(row["options"], sort_keys=True)
        for key, column in option_columns.items():
            rec[column] = row["options"].get(key, row["resolved_options"].get(key))
        rec.update({c: row[c] for c in RESULT_COLUMNS})
        rec.update({c: row[c] for c in ADAPTATION_COLUMNS if c in row})
        records.append(rec)
    results = pd.DataFrame.from_records(records)

    long_frames = []
    id_columns = ["experiment", "setting", "dataset", "classes_per_client", "alpha", "clients", "assignment", "algorithm", "variant",
                  "seed", "run_dir"]
    for rec, metrics in zip(records, curves):
        keep = [c for c in CURVE_COLUMNS if c in metrics.columns]
        frame = metrics[keep].copy()
        for column in reversed(id_columns):
            frame.insert(0, column, rec[column])
        long_frames.append(frame)
    curves_frame = pd.concat(long_frames, ignore_index=True)
    return results, curves_frame


def recorded_setting(row: dict[str, Any], default_clients: int | None) -> str | None:
    """The setting id run.json records (`workflow.setting`), when the row is labelled as the record
    is (same experiment and variant: a run aggregated under another experiment, or without its variant,
    gets the id of that use) and its partition part is the row's for these `default_clients`; else None."""
    labels = row["workflow"]
    if not labels.get("setting") or (labels.get("experiment", ""), labels.get("variant") or "") != (row["experiment"], row["variant"]):
        return None
    try:
        parts = parse_setting_id(labels["setting"])
    except ValueError:
        return None
    return labels["setting"] if parts.partition == base_id(row, default_clients) else None


def _check_duplicates(rows: Sequence[dict[str, Any]]) -> None:
    seen: dict[tuple, dict[str, Any]] = {}
    for row in rows:
        key = (row["setting"], row["algorithm"], row["seed"])
        if key in seen:
            other = seen[key]
            hint = (f"; they differ in their number of clients ({other['clients']} and {row['clients']}): give the config's "
                    "clients (`fedgmh aggregate --clients N`) so that the others' setting ids get _n<N>"
                    if other.get("clients") != row.get("clients") else "; pass each run once")
            raise UserError(
                f"runs {other['run_dir']} and {row['run_dir']} are the same cell (experiment {row['experiment']!r}, "
                f"setting {row['setting']}, algorithm {row['algorithm']}, seed {row['seed']}){hint}"
            )
        seen[key] = row


IDENTITY_COLUMNS = ["experiment", "setting", "dataset", "classes_per_client", "alpha", "algorithm", "seed"]


def _read_aggregate_csv(path: Path | str, what: str, flag: str, value_columns: list[str]) -> pd.DataFrame:
    """Read a CSV written by `fedgmh aggregate` (results or curves), checking its columns and numbers
    (`fedgmh.report.checks`)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{what} file {path} not found; make it with `fedgmh aggregate {flag} {path}`")
    with reading(path):
        frame = pd.read_csv(path)
        absent = [c for c in IDENTITY_COLUMNS + value_columns if c not in frame.columns]
        if absent:
            raise UserError(f"{what} file {path} lacks column(s) {', '.join(absent)}; was it written by `fedgmh aggregate {flag}`?")
        frame["experiment"] = frame["experiment"].astype(object).fillna("").astype(str)
        frame["variant"] = frame["variant"].astype(object).fillna("").astype(str) if "variant" in frame.columns else ""
    check_aggregate(frame, f"{what} file {path}")
    return frame


def read_results(path: Path | str) -> pd.DataFrame:
    return _read_aggregate_csv(path, "results", "--out", ["best_test_acc"])


def read_curves(path: Path | str) -> pd.DataFrame:
    return _read_aggregate_csv(path, "curves", "--curves", ["round", "test_acc"])


def write_aggregate(run_dirs: Sequence[Path | str], out: Path | str, curves_out: Path | str | None = None,
                    experiment: str | None = None, variants: Sequence[str] | None = None,
                    default_clients: int | None = None, preset_evaluation: bool = False,
                    best_of_last: int | None = None) -> pd.DataFrame:
    check_outputs(out, curves_out)
    results, curves = aggregate_runs(run_dirs, experiment=experiment, variants=variants, default_clients=default_clients,
                                     preset_evaluation=preset_evaluation, best_of_last=best_of_last)
    write_csv(results, out)
    if curves_out:
        write_csv(curves, curves_out)
    return results
