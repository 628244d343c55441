"""Rounds to a target accuracy (the paper's text on Figure 3: FedGMH reaches 70 % at round 68, ...).

For each algorithm of one (experiment, setting) and each target accuracy (percent):

- `mean_curve`: the first evaluated round at which the mean-over-seeds accuracy curve reaches the
  target (only rounds that every seed evaluated count);
- `median_seed`: the median over seeds of each seed's first round reaching it (a seed that never
  reaches it counts as infinitely late, so the median is 'not reached' when half or more never do);
- `seeds_reached`: how many seeds reach it at all;
- `paper`: the paper's round, where it gives one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from fedgmh.errors import UserError
from fedgmh.io import write_csv, write_text
from fedgmh.report.latex import latex_table
from fedgmh.cards import algorithm_name, algorithm_order
from fedgmh.report.labels import format_number
from fedgmh.report.runs import read_curves
from fedgmh.report.figures import setting_title
from fedgmh.report.parsing import order_key

NOT_REACHED = "not reached"


def _first_round(rounds: np.ndarray, accuracy: np.ndarray, target: float) -> float:
    hits = np.nonzero(accuracy >= target)[0]
    return float(rounds[hits[0]]) if len(hits) else math.inf


def first_round_bounds(rounds: np.ndarray, accuracy: np.ndarray, target: float, horizon: float = math.inf) -> tuple[float, float]:
    """Where the first round at or above `target` lies, from a curve evaluated at `rounds` (increasing;
    round 0 is the initial model), as (low, high).

    Reached at round h: (h, h) when every round before h was evaluated, else (the first round not
    evaluated, h), since the target may have been reached there. Not reached: (inf, inf), never,
    when every round up to the last was evaluated and the last is at least `horizon` (the paper's
    number of rounds: the run covers the paper's protocol); else (the first round not evaluated, or
    the last + 1, inf).
    """
    if not len(rounds):
        return 0.0, math.inf
    hit = _first_round(rounds, accuracy, target)
    end = hit if not math.isinf(hit) else float(rounds[-1]) + 1
    unevaluated = np.setdiff1d(np.arange(int(end)), rounds)
    if len(unevaluated):
        return float(unevaluated[0]), hit
    if not math.isinf(hit) or end > horizon:
        return hit, hit
    return end, math.inf


def accuracy_by_seed(data: pd.DataFrame) -> pd.DataFrame:
    """Curves rows of one algorithm (one experiment and setting) as accuracy in percent: round x seed."""
    return data.assign(acc=100.0 * data["test_acc"]).pivot_table(index="round", columns="seed", values="acc")


def first_rounds(acc: pd.DataFrame, target: float) -> tuple[float, dict[int, float]]:
    """The first round at which the mean-over-seeds curve of `acc` (`accuracy_by_seed`; only rounds
    every seed evaluated) reaches `target` percent, and each seed's own first round (inf: never)."""
    mean = acc.dropna().mean(axis=1)
    per_seed = {int(s): _first_round(acc.index.to_numpy(), acc[s].to_numpy(), target) for s in acc.columns}
    return _first_round(mean.index.to_numpy(), mean.to_numpy(), target), per_seed


def _text(value: float) -> str:
    return NOT_REACHED if math.isinf(value) else format_number(value)


def rounds_to_target(curves: pd.DataFrame, experiment: str, setting: str, targets: Sequence[float],
                     paper: Mapping[str, Sequence[float | None]] | None = None) -> pd.DataFrame:
    """One row per (algorithm, target): mean_curve, median_seed, seeds_reached, n_seeds, paper."""
    if not targets:
        raise UserError("no target accuracy given")
    frame = curves[(curves["experiment"] == experiment) & (curves["setting"] == setting)]
    if frame.empty:
        present = sorted(set(curves.loc[curves["experiment"] == experiment, "setting"]))
        raise UserError(f"no curves of experiment {experiment!r}, setting {setting!r}; its settings: {', '.join(present) or 'none'}")
    paper = paper or {}
    setting_name = setting_title(frame, setting)
    for algorithm, values in paper.items():
        if len(values) != len(targets):
            raise UserError(f"paper rounds of {algorithm}: {len(values)} values for {len(targets)} targets")
    rows = []
    for algorithm in sorted(set(frame["algorithm"]), key=order_key(algorithm_order())):
        acc = accuracy_by_seed(frame[frame["algorithm"] == algorithm])
        for i, target in enumerate(targets):
            mean_round, by_seed = first_rounds(acc, target)
            per_seed = list(by_seed.values())
            median = float(np.median(per_seed))
            value = (paper.get(algorithm) or [None] * len(targets))[i]
            rows.append({
                "experiment": experiment, "setting": setting, "setting_name": setting_name, "rounds": int(acc.index.max()),
                "algorithm": algorithm, "algorithm_name": algorithm_name(algorithm),
                "target": float(target),
                "mean_curve": _text(mean_round),
                "median_seed": _text(median),
                "seeds_reached": int(sum(not math.isinf(r) for r in per_seed)),
                "n_seeds": len(per_seed),
                "paper": "" if value is None else format_number(value),
            })
    return pd.DataFrame(rows)


def _wide(table: pd.DataFrame, short: bool) -> pd.DataFrame:
    """Methods x (target, what): 'mean curve', 'median seed', 'seeds', 'paper' (short: 'mean', 'median')."""
    out = pd.DataFrame(index=pd.Index(list(dict.fromkeys(table["algorithm_name"])), name="Method"))
    for target, group in table.groupby("target", sort=False):
        t = format_number(target) + "%"
        group = group.set_index("algorithm_name")
        missing = "—" if short else NOT_REACHED
        out[(t, "mean" if short else "mean curve")] = group["mean_curve"].replace(NOT_REACHED, missing)
        out[(t, "median" if short else "median seed")] = group["median_seed"].replace(NOT_REACHED, missing)
        out[(t, "seeds")] = [f"{a}/{n}" for a, n in zip(group["seeds_reached"], group["n_seeds"])]
        out[(t, "paper")] = group["paper"].replace("", "—" if short else "")
    return out


def rounds_latex(table: pd.DataFrame, title: str = "Rounds to target") -> str:
    """The rounds-to-target table in LaTeX (booktabs), through the reports' one writer."""
    wide = _wide(table, short=True)
    wide.columns = pd.MultiIndex.from_tuples(wide.columns)
    first = table.iloc[0]
    n_seeds = int(table["n_seeds"].max())
    caption = (f"{title}: first round at which the test accuracy on {first['setting_name']} ({first['experiment']}) "
               f"reaches each target. Mean: the curve of the mean over {n_seeds} seed{'s' if n_seeds != 1 else ''}; "
               "median: the median of the seeds' first rounds; seeds: how many seeds reach it; paper: the paper's text; "
               f"—: not reached in {first['rounds']} rounds (paper: no round given).")
    return latex_table(wide, caption, "tab:rounds_to_target", corner="Method", comment="Generated by `fedgmh rounds`.")


def write_rounds_to_target(curves_path: Path | str, experiment: str, setting: str, targets: Sequence[float], out_tex: Path | str,
                           out_csv: Path | str | None = None, paper: Mapping[str, Sequence[float | None]] | None = None,
                           title: str = "Rounds to target") -> pd.DataFrame:
    table = rounds_to_target(read_curves(curves_path), experiment, setting, targets, paper=paper)
    write_text(rounds_latex(table, title), out_tex)
    if out_csv:
        wide = _wide(table, short=False)
        wide.columns = [f"{t} {what}" for t, what in wide.columns]
        write_csv(wide.reset_index(), out_csv)
    return table
