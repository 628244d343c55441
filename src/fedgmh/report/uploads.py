"""Cumulative client uploads to reach a target accuracy (CE-pFL's Table 1, seed 004).

For each algorithm of one (experiment, setting) and each target accuracy (percent), a run's value is
the number of client uploads made before its model first reaches the target: the sum of
`clients_up` (metrics.csv: clients that uploaded in that round) over the training rounds that
produced the first evaluated accuracy >= the target. metrics.csv row `r` holds the accuracy
evaluated at the start of round r (after r training rounds, PFLlib's order) and the uploads of
round r's training, so the value is the sum of `clients_up` over the rows before that row
(counting training rounds from 1: the uploads of every round up to and including the round after
which the accuracy reaches the target). Every round must be evaluated (engine option eval_every 1,
no eval_last), else uploads of unevaluated rounds would be missing: such runs are refused.

The accuracy is `test_acc_mean` by default (the unweighted mean of the clients' accuracies, CE-pFL's
eq. 12), or the pooled `test_acc`. A cell is the median over seeds (a seed that never reaches the
target counts as infinitely late, so the median is '–' when half or more never do), with how many
seeds reach it and the paper's value where given.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from fedgmh.errors import UserError
from fedgmh.io import write_csv, write_text
from fedgmh.report.figures import setting_title
from fedgmh.report.latex import latex_table
from fedgmh.cards import algorithm_name, algorithm_order
from fedgmh.report.labels import format_number
from fedgmh.report.runs import read_curves
from fedgmh.report.parsing import order_key

NEVER = "–"
METRICS = {"test_acc_mean": "mean client test accuracy (unweighted, CE-pFL's eq. 12)", "test_acc": "pooled test accuracy"}
DEFAULT_METRIC = "test_acc_mean"


def run_uploads(rounds: np.ndarray, accuracy: np.ndarray, uploads: np.ndarray, target: float) -> float:
    """Client uploads of one run before its accuracy (percent) first reaches `target`; inf when never.

    `rounds`, `accuracy`, `uploads`: the run's metrics rows in round order (round r: the accuracy after
    r training rounds, the uploads of round r's training)."""
    hits = np.nonzero(accuracy >= target)[0]
    if not len(hits):
        return math.inf
    return float(np.sum(uploads[: hits[0]]))


def _check_run(run_dir: str, data: pd.DataFrame, metric: str) -> None:
    if "clients_up" not in data.columns or data["clients_up"].isna().any():
        raise UserError(f"run {run_dir}: its metrics.csv has no clients_up column (clients that uploaded per round); "
                        "it was trained before the upload counter existed: train it again to count its uploads")
    if metric not in data.columns or data[metric].isna().any():
        raise UserError(f"run {run_dir}: its metrics.csv has no {metric} column")
    rounds = data["round"].to_numpy()
    if not np.array_equal(rounds, np.arange(rounds[0], rounds[0] + len(rounds))) or rounds[0] != 0:
        raise UserError(f"run {run_dir}: not every round is evaluated (rounds {format_number(rounds[0])}..{format_number(rounds[-1])}, "
                        f"{len(rounds)} rows), so uploads of unevaluated rounds are unknown; train with eval_every 1 and no eval_last")


def uploads_to_target(curves: pd.DataFrame, experiment: str, setting: str, targets: Sequence[float],
                      metric: str = DEFAULT_METRIC, paper: Mapping[str, Sequence[float | None]] | None = None) -> pd.DataFrame:
    """One row per (algorithm, target): median_seed, seeds_reached, n_seeds, per_seed, paper (both as text)."""
    if not targets:
        raise UserError("no target accuracy given")
    if metric not in METRICS:
        raise UserError(f"accuracy {metric!r} is not one of {', '.join(METRICS)}")
    frame = curves[(curves["experiment"] == experiment) & (curves["setting"] == setting)]
    if frame.empty:
        present = sorted(set(curves.loc[curves["experiment"] == experiment, "setting"]))
        raise UserError(f"no curves of experiment {experiment!r}, setting {setting!r}; its settings: {', '.join(present) or 'none'}")
    paper = paper or {}
    for algorithm, values in paper.items():
        if len(values) != len(targets):
            raise UserError(f"paper uploads of {algorithm}: {len(values)} values for {len(targets)} targets")
    name = setting_title(frame, setting)
    rows = []
    algorithms = sorted(set(frame["algorithm"]) | set(paper), key=order_key(algorithm_order()))
    for algorithm in algorithms:
        data = frame[frame["algorithm"] == algorithm]
        per_seed: dict[int, list[float]] = {}
        for (run_dir, seed), run in data.groupby(["run_dir", "seed"], sort=True):
            run = run.sort_values("round")
            _check_run(str(run_dir), run, metric)
            per_seed[int(seed)] = [run_uploads(run["round"].to_numpy(), 100.0 * run[metric].to_numpy(),
                                               run["clients_up"].to_numpy(), target) for target in targets]
        for i, target in enumerate(targets):
            values = [v[i] for v in per_seed.values()]
            median = float(np.median(values)) if values else math.nan
            value = (paper.get(algorithm) or [None] * len(targets))[i]
            rows.append({
                "experiment": experiment, "setting": setting, "setting_name": name, "metric": metric,
                "algorithm": algorithm, "algorithm_name": algorithm_name(algorithm), "target": float(target),
                "uploads": "not run" if not values else (NEVER if math.isinf(median) else format_number(median)),
                "seeds_reached": sum(not math.isinf(v) for v in values), "n_seeds": len(values),
                "per_seed": " ".join(NEVER if math.isinf(v) else format_number(v) for v in values),
                "paper": NEVER if algorithm in paper and value is None else ("" if value is None else format_number(value)),
            })
    return pd.DataFrame(rows)


def _wide(table: pd.DataFrame) -> pd.DataFrame:
    """Methods x (target, ours / seeds / paper)."""
    out = pd.DataFrame(index=pd.Index(list(dict.fromkeys(table["algorithm_name"])), name="Method"))
    for target, group in table.groupby("target", sort=False):
        t = format_number(target) + "%"
        group = group.set_index("algorithm_name")
        out[(t, "ours")] = group["uploads"]
        out[(t, "seeds")] = [f"{a}/{n}" if n else "" for a, n in zip(group["seeds_reached"], group["n_seeds"])]
        out[(t, "paper")] = group["paper"]
    return out


def uploads_latex(table: pd.DataFrame, title: str = "Client uploads to target") -> str:
    wide = _wide(table)
    wide.columns = pd.MultiIndex.from_tuples(wide.columns)
    first = table.iloc[0]
    caption = (f"{title}: cumulative client uploads until the {METRICS[first['metric']]} on {first['setting_name']} "
               f"({first['experiment']}) first reaches each target. Ours: median over seeds; seeds: how many reach it; "
               f"paper: the paper's value; {NEVER}: never reached; blank: no value.")
    return latex_table(wide, caption, "tab:uploads_to_target", corner="Method", comment="Generated by `fedgmh uploads`.")


def write_uploads_to_target(curves_path: Path | str, experiment: str, setting: str, targets: Sequence[float], out_tex: Path | str,
                            out_csv: Path | str | None = None, metric: str = DEFAULT_METRIC,
                            paper: Mapping[str, Sequence[float | None]] | None = None,
                            title: str = "Client uploads to target") -> pd.DataFrame:
    table = uploads_to_target(read_curves(curves_path), experiment, setting, targets, metric=metric, paper=paper)
    write_text(uploads_latex(table, title), out_tex)
    if out_csv:
        wide = _wide(table)
        wide.columns = [f"{t} {what}" for t, what in wide.columns]
        write_csv(wide.reset_index(), out_csv)
    return table
