"""How soon each method reaches target accuracies: in rounds (the paper's text on Figure 3: FedGMH
reaches 70 % at round 68, ...) and in client uploads (CE-pFL's Table 1).

Both tables have one row per algorithm of one (experiment, setting) and target accuracy (percent),
and both start from the same fact, the first metrics row at or above the target (`first_reach`).

Rounds (`rounds_to_target`): where the first round reaching the target lies, by the one rule the
claims use too (`first_round_bounds`): a round where every earlier round was evaluated, else the
range it is known to lie in (`a-b`; e.g. a run evaluated only in its last rounds, engine option
eval_last). `mean_curve`: for the mean-over-seeds curve (the rounds every seed evaluated);
`median_seed`: the median over seeds of each seed's (not reached counts as infinitely late, so the
median is 'not reached' when half or more never do); `seeds_reached`: how many seeds are known to
reach it; `paper`: the paper's round, where it gives one.

Uploads (`uploads_to_target`): a run's value is the number of client uploads made before its model
first reaches the target: the sum of `clients_up` (metrics.csv: clients that uploaded in that
round) over the training rounds that produced the first evaluated accuracy >= the target.
metrics.csv row `r` holds the accuracy evaluated at the start of round r (after r training rounds,
PFLlib's order) and the uploads of round r's training, so the value is the sum of `clients_up` over
the rows before that row. Every round must be evaluated (eval_every 1, no eval_last), else uploads
of unevaluated rounds would be missing: such runs are refused. The accuracy is `test_acc_mean` by
default (the unweighted mean of the clients' accuracies, CE-pFL's eq. 12), or the pooled
`test_acc`. A cell is the median over seeds (never reached: '–' when half or more never do), with
how many seeds reach it and the paper's value where given.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from fedgmh.errors import UserError
from fedgmh.io import write_csv, write_text
from fedgmh.report.titles import setting_title
from fedgmh.report.latex import latex_table
from fedgmh.cards import algorithm_name, algorithm_order
from fedgmh.report.labels import format_number
from fedgmh.report.runs import read_curves
from fedgmh.report.outputs import check_outputs
from fedgmh.report.parsing import check_targets, order_key

NOT_REACHED = "not reached"
NEVER = "–"
METRICS = {"test_acc_mean": "mean client test accuracy (unweighted, CE-pFL's eq. 12)", "test_acc": "pooled test accuracy"}
DEFAULT_METRIC = "test_acc_mean"
Paper = Mapping[str, Sequence[float | None]]


def first_reach(accuracy: np.ndarray, target: float) -> int | None:
    """The index of the first value of `accuracy` at or above `target`; None when none is."""
    hits = np.nonzero(accuracy >= target)[0]
    return int(hits[0]) if len(hits) else None


def target_cell(curves: pd.DataFrame, experiment: str, setting: str, targets: Sequence[float], paper: Paper | None,
                what: str) -> pd.DataFrame:
    """The curves of one (experiment, setting), after checking the targets and the paper's `what`
    (one value per target, per algorithm): UserError naming what is wrong."""
    if not targets:
        raise UserError("no target accuracy given")
    check_targets(targets)
    frame = curves[(curves["experiment"] == experiment) & (curves["setting"] == setting)]
    if frame.empty:
        present = sorted(set(curves.loc[curves["experiment"] == experiment, "setting"]))
        raise UserError(f"no curves of experiment {experiment!r}, setting {setting!r}; its settings: {', '.join(present) or 'none'}")
    for algorithm, values in (paper or {}).items():
        if len(values) != len(targets):
            raise UserError(f"paper {what} of {algorithm}: {len(values)} values for {len(targets)} targets")
    return frame


def _paper_value(paper: Paper, algorithm: str, index: int, targets: Sequence[float]) -> float | None:
    return (paper.get(algorithm) or [None] * len(targets))[index]


def _write(table: pd.DataFrame, wide: pd.DataFrame, latex: str, out_tex: Path | str, out_csv: Path | str | None) -> pd.DataFrame:
    """Write a table's LaTeX and, given `out_csv`, its wide form (columns '<target> <what>')."""
    write_text(latex, out_tex)
    if out_csv:
        wide = wide.copy()
        wide.columns = [f"{t} {what}" for t, what in wide.columns]
        write_csv(wide.reset_index(), out_csv)
    return table


def _methods(table: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame(index=pd.Index(list(dict.fromkeys(table["algorithm_name"])), name="Method"))


# ----------------------------------------------------------------------------- rounds


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
    index = first_reach(accuracy, target)
    hit = math.inf if index is None else float(rounds[index])
    end = hit if not math.isinf(hit) else float(rounds[-1]) + 1
    unevaluated = np.setdiff1d(np.arange(int(end)), rounds)
    if len(unevaluated):
        return float(unevaluated[0]), hit
    if not math.isinf(hit) or end > horizon:
        return hit, hit
    return end, math.inf


def accuracy_by_seed(data: pd.DataFrame, column: str = "test_acc") -> pd.DataFrame:
    """Curves rows of one algorithm (one experiment and setting) as accuracy (`column`) in percent: round x seed."""
    return data.assign(acc=100.0 * data[column]).pivot_table(index="round", columns="seed", values="acc")


def _has_ranges(table: pd.DataFrame) -> bool:
    return bool(table[["mean_curve", "median_seed"]].apply(lambda column: column.str.contains("-")).any().any())


def _round_text(low: float, high: float) -> str:
    def one(value: float) -> str:
        return NOT_REACHED if math.isinf(value) else format_number(value)

    return one(low) if low == high else f"{one(low)}-{one(high)}"


def rounds_to_target(curves: pd.DataFrame, experiment: str, setting: str, targets: Sequence[float],
                     paper: Paper | None = None) -> pd.DataFrame:
    """One row per (algorithm, target): mean_curve, median_seed, seeds_reached, n_seeds, paper (the
    rounds as text: a round, a range 'a-b', or 'not reached' in the curves' rounds)."""
    frame = target_cell(curves, experiment, setting, targets, paper, "rounds")
    paper = paper or {}
    setting_name = setting_title(frame, setting)
    rows = []
    for algorithm in sorted(set(frame["algorithm"]), key=order_key(algorithm_order())):
        acc = accuracy_by_seed(frame[frame["algorithm"] == algorithm])
        horizon, mean = float(acc.index.max()), acc.dropna().mean(axis=1)
        for i, target in enumerate(targets):
            mean_round = first_round_bounds(mean.index.to_numpy(), mean.to_numpy(), target, horizon)
            per_seed = [first_round_bounds(acc[s].dropna().index.to_numpy(), acc[s].dropna().to_numpy(), target, horizon)
                        for s in acc.columns]
            median = (float(np.median([low for low, _ in per_seed])), float(np.median([high for _, high in per_seed])))
            value = _paper_value(paper, algorithm, i, targets)
            rows.append({
                "experiment": experiment, "setting": setting, "setting_name": setting_name, "rounds": int(acc.index.max()),
                "algorithm": algorithm, "algorithm_name": algorithm_name(algorithm),
                "target": float(target),
                "mean_curve": _round_text(*mean_round),
                "median_seed": _round_text(*median),
                "seeds_reached": int(sum(not math.isinf(high) for _, high in per_seed)),
                "n_seeds": len(per_seed),
                "paper": "" if value is None else format_number(value),
            })
    return pd.DataFrame(rows)


def _rounds_wide(table: pd.DataFrame, short: bool) -> pd.DataFrame:
    """Methods x (target, what): 'mean curve', 'median seed', 'seeds', 'paper' (short: 'mean', 'median')."""
    out = _methods(table)
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
    wide = _rounds_wide(table, short=True)
    wide.columns = pd.MultiIndex.from_tuples(wide.columns)
    first = table.iloc[0]
    n_seeds = int(table["n_seeds"].max())
    caption = (f"{title}: first round at which the test accuracy on {first['setting_name']} ({first['experiment']}) "
               f"reaches each target. Mean: the curve of the mean over {n_seeds} seed{'s' if n_seeds != 1 else ''}; "
               "median: the median of the seeds' first rounds; seeds: how many seeds reach it; paper: the paper's text; "
               + ("a-b: somewhere from round a to b (rounds not evaluated); " if _has_ranges(table) else "")
               + f"—: not reached in {first['rounds']} rounds (paper: no round given).")
    return latex_table(wide, caption, "tab:rounds_to_target", corner="Method", comment="Generated by `fedgmh rounds`.")


def write_rounds_to_target(curves_path: Path | str, experiment: str, setting: str, targets: Sequence[float], out_tex: Path | str,
                           out_csv: Path | str | None = None, paper: Paper | None = None,
                           title: str = "Rounds to target") -> pd.DataFrame:
    check_outputs(out_tex, out_csv)
    table = rounds_to_target(read_curves(curves_path), experiment, setting, targets, paper=paper)
    return _write(table, _rounds_wide(table, short=False), rounds_latex(table, title), out_tex, out_csv)


# ----------------------------------------------------------------------------- uploads


def run_uploads(rounds: np.ndarray, accuracy: np.ndarray, uploads: np.ndarray, target: float) -> float:
    """Client uploads of one run before its accuracy (percent) first reaches `target`; inf when never.

    `rounds`, `accuracy`, `uploads`: the run's metrics rows in round order (round r: the accuracy after
    r training rounds, the uploads of round r's training)."""
    index = first_reach(accuracy, target)
    return math.inf if index is None else float(np.sum(uploads[:index]))


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
                      metric: str = DEFAULT_METRIC, paper: Paper | None = None) -> pd.DataFrame:
    """One row per (algorithm, target): median_seed, seeds_reached, n_seeds, per_seed, paper (both as text)."""
    if metric not in METRICS:
        raise UserError(f"accuracy {metric!r} is not one of {', '.join(METRICS)}")
    frame = target_cell(curves, experiment, setting, targets, paper, "uploads")
    paper = paper or {}
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
            value = _paper_value(paper, algorithm, i, targets)
            rows.append({
                "experiment": experiment, "setting": setting, "setting_name": name, "metric": metric,
                "algorithm": algorithm, "algorithm_name": algorithm_name(algorithm), "target": float(target),
                "uploads": "not run" if not values else (NEVER if math.isinf(median) else format_number(median)),
                "seeds_reached": sum(not math.isinf(v) for v in values), "n_seeds": len(values),
                "per_seed": " ".join(NEVER if math.isinf(v) else format_number(v) for v in values),
                "paper": NEVER if algorithm in paper and value is None else ("" if value is None else format_number(value)),
            })
    return pd.DataFrame(rows)


def _uploads_wide(table: pd.DataFrame) -> pd.DataFrame:
    """Methods x (target, ours / seeds / paper)."""
    out = _methods(table)
    for target, group in table.groupby("target", sort=False):
        t = format_number(target) + "%"
        group = group.set_index("algorithm_name")
        out[(t, "ours")] = group["uploads"]
        out[(t, "seeds")] = [f"{a}/{n}" if n else "" for a, n in zip(group["seeds_reached"], group["n_seeds"])]
        out[(t, "paper")] = group["paper"]
    return out


def uploads_latex(table: pd.DataFrame, title: str = "Client uploads to target") -> str:
    wide = _uploads_wide(table)
    wide.columns = pd.MultiIndex.from_tuples(wide.columns)
    first = table.iloc[0]
    caption = (f"{title}: cumulative client uploads until the {METRICS[first['metric']]} on {first['setting_name']} "
               f"({first['experiment']}) first reaches each target. Ours: median over seeds; seeds: how many reach it; "
               f"paper: the paper's value; {NEVER}: never reached; blank: no value.")
    return latex_table(wide, caption, "tab:uploads_to_target", corner="Method", comment="Generated by `fedgmh uploads`.")


def write_uploads_to_target(curves_path: Path | str, experiment: str, setting: str, targets: Sequence[float], out_tex: Path | str,
                            out_csv: Path | str | None = None, metric: str = DEFAULT_METRIC, paper: Paper | None = None,
                            title: str = "Client uploads to target") -> pd.DataFrame:
    check_outputs(out_tex, out_csv)
    table = uploads_to_target(read_curves(curves_path), experiment, setting, targets, metric=metric, paper=paper)
    return _write(table, _uploads_wide(table), uploads_latex(table, title), out_tex, out_csv)
