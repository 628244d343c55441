"""What an accuracy-per-round figure draws besides our curves: target accuracies as horizontal
lines, the paper's round to each target as a star on that line, the paper's table value of each
method (mean ± std) as a diamond at the last round, another reading's curves of some methods
(PFLlib's, `preset=official`) as wide translucent lines, and legend names given by the caller."""

from __future__ import annotations

import math

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

import pandas as pd

from fedgmh.cards import algorithm_name
from fedgmh.report.parsing import norm_name
from fedgmh.report.style import method_style

TARGET_STYLE = {"color": "0.35", "linestyle": (0, (6, 3)), "linewidth": 0.9, "zorder": 2}
FINAL_STYLE = {"marker": "D", "markersize": 6.5, "markeredgecolor": "black", "markeredgewidth": 0.8, "linestyle": "none",
               "elinewidth": 1.2, "capsize": 3, "zorder": 12}
PAPER_STYLE = {"marker": "*", "markersize": 13, "markeredgecolor": "black", "markeredgewidth": 0.8, "linestyle": "none", "zorder": 12}
LABEL_BOX = {"boxstyle": "square,pad=0.1", "facecolor": "white", "edgecolor": "none", "alpha": 0.8}  # readable over the curves
OVERLAY_STYLE = {"linestyle": "-", "linewidth": 4.5, "alpha": 0.35, "zorder": 1}


@dataclass(frozen=True)
class Marks:
    """targets (%); paper_rounds: algorithm -> the paper's round per target (None: not given);
    overlay: curves of `overlay_name`'s reading (rows of `fedgmh aggregate --curves`), drawn per method;
    labels: algorithm -> legend name instead of the card's; reference: the paper's tables (the reference CSV),
    whose value of each method drawn is marked where one row of the curves' experiment and setting gives it."""

    targets: Sequence[float] = ()
    paper_rounds: Mapping[str, Sequence[float | None]] = field(default_factory=dict)
    overlay: pd.DataFrame | None = None
    overlay_name: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    reference: pd.DataFrame | None = None

    def name(self, algorithm: str) -> str:
        return self.labels.get(algorithm, algorithm_name(algorithm))


def overlay_stats(marks: Marks, experiment_rows: pd.DataFrame, setting: str) -> dict[str, pd.DataFrame]:
    """algorithm -> accuracy (%) mean/std/count per round of the overlay's runs of `setting`."""
    if marks.overlay is None:
        return {}
    rows = marks.overlay[marks.overlay["setting"] == setting]
    if "experiment" in rows and len(experiment_rows):
        rows = rows[rows["experiment"].isin(set(experiment_rows["experiment"]))]
    acc = rows.assign(acc=100.0 * rows["test_acc"])
    return {a: acc[acc["algorithm"] == a].groupby("round")["acc"].agg(["mean", "std", "count"]) for a in dict.fromkeys(acc["algorithm"])}


def draw_overlay(ax, stats: Mapping[str, pd.DataFrame]) -> dict:
    """The overlay's mean curves: algorithm -> line."""
    return {a: ax.plot(s.index, s["mean"], color=method_style(a)["color"], **OVERLAY_STYLE)[0] for a, s in stats.items()}


def draw_targets(ax, marks: Marks, named: bool) -> None:
    """A horizontal line per target, with '70 %' at its right end when `named`."""
    for target in marks.targets:
        ax.axhline(target, **TARGET_STYLE)
        if named:
            ax.annotate(f"{target:g} %", (1.0, target), xycoords=("axes fraction", "data"), xytext=(3, 0),
                        textcoords="offset points", va="center", fontsize=8, color="0.25")


def draw_paper_rounds(ax, marks: Marks, drawn: Collection[str], numbered: bool = False,
                      last_round: float = math.inf) -> object | None:
    """A star on each target line at the paper's round of each method `drawn`, in its colour, with the round
    written above it when `numbered` (a line higher when it would touch the previous number: never over a
    star), up to `last_round` (the curves' end: a later star would be outside the axes); the last star drawn
    (None: none)."""
    star, written = None, {}
    stars = sorted((target, round_, algorithm) for algorithm, rounds in marks.paper_rounds.items()
                   for target, round_ in zip(marks.targets, rounds)
                   if round_ is not None and round_ <= last_round and algorithm in drawn)
    span = max((r for _, r, _ in stars), default=1)
    for target, round_, algorithm in stars:
        (star,) = ax.plot([round_], [target], color=method_style(algorithm)["color"], label=f"paper:{algorithm}", **PAPER_STYLE)
        if numbered:
            previous, level = written.get(target, (-span, 1))
            level = 1 - level if abs(round_ - previous) < 0.06 * span else 0
            ax.annotate(f"{round_:g}", (round_, target), xytext=(0, 8 + 11 * level), textcoords="offset points", ha="center",
                        va="bottom", fontsize=8, color="0.1", zorder=13, bbox=LABEL_BOX)
            written[target] = (round_, level)
    return star


def paper_finals(marks: Marks, rows: pd.DataFrame, drawn: Collection[str]) -> dict[str, tuple[float, float]]:
    """algorithm -> the paper's (mean, std) for the methods `drawn` of `rows` (one setting's curves): the one
    reference row of the rows' experiment (the paper's table), dataset, C and alpha, and the method's name."""
    if marks.reference is None or rows.empty:
        return {}
    first = rows.iloc[0]
    reference = marks.reference
    here = reference[(reference["table"].astype(str) == str(first["experiment"]))
                     & (reference["dataset"].map(norm_name) == norm_name(first["dataset"]))
                     & (pd.to_numeric(reference["C"], errors="coerce") == float(first["classes_per_client"]))
                     & (pd.to_numeric(reference["alpha"], errors="coerce") == float(first["alpha"]))]
    finals = {}
    for algorithm in drawn:
        match = here[here["algorithm"].map(norm_name) == norm_name(algorithm_name(algorithm))]
        if len(match) == 1 and not pd.isna(match["mean"].iloc[0]):  # a swept table has several: no single value
            finals[algorithm] = (float(match["mean"].iloc[0]), float(match["std"].fillna(0).iloc[0]))
    return finals


def draw_paper_finals(ax, finals: Mapping[str, tuple[float, float]], at_round: float) -> object | None:
    """Each method's paper value as a diamond in its colour with a ±std bar at `at_round`; the last drawn (None: none)."""
    mark = None
    for algorithm, (mean, std) in finals.items():
        mark = ax.errorbar([at_round], [mean], yerr=[std], color=method_style(algorithm)["color"], **FINAL_STYLE)
    return mark
