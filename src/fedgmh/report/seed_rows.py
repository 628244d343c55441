"""A few methods compared seed by seed: per setting one panel with a shared accuracy axis, one row
per method and reading (one dot per seed, a bar at the mean) under the paper's mean ± std, so that
a difference of tenths of a point (FedGMH vs FedPer on MNIST) is seen against the seeds' spread."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from fedgmh.cards import algorithm_name
from fedgmh.errors import UserError
from fedgmh.report.compare import attach_reference
from fedgmh.report.figures import save_figure
from fedgmh.report.labels import STD_DDOF
from fedgmh.report.style import method_style, use_agg
from fedgmh.report.summary import ACCURACIES, DEFAULT_ACCURACY, accuracy_column, summarize
from fedgmh.report.titles import setting_title

Source = tuple[str, pd.DataFrame]  # (the reading's name, its results)


def seed_rows(sources: Sequence[Source], reference: pd.DataFrame, experiment: str, setting: str, algorithms: Sequence[str],
              accuracy: str) -> list[dict]:
    """The rows of one panel, top to bottom: per algorithm the paper's (kind 'paper', where the
    reference has it) and then each source's runs (kind 'ours', values: accuracy (%) per seed)."""
    rows = []
    for algorithm in algorithms:
        paper, ours = None, []
        for name, results in sources:
            runs = results[(results["experiment"] == experiment) & (results["setting"] == setting)
                           & (results["algorithm"] == algorithm)].drop_duplicates("seed")
            if runs.empty:
                continue
            values = list(100.0 * runs[accuracy_column(results, accuracy)].astype(float))
            ours.append({"kind": "ours", "algorithm": algorithm, "reading": name, "values": values})
            cell = attach_reference(summarize(runs, experiment, accuracy)[0], reference).iloc[0]
            if paper is None and cell["paper_row"] >= 0:
                paper = {"kind": "paper", "algorithm": algorithm, "mean": float(cell["paper_mean"]), "std": float(cell["paper_std"])}
        rows += ([paper] if paper else []) + ours
    return rows


def plot_seed_rows(sources: Sequence[Source], reference: pd.DataFrame, experiment: str, settings: Sequence[str],
                   algorithms: Sequence[str], out: Path | str, png: Path | str | None = None,
                   accuracy: str = DEFAULT_ACCURACY, title: str | None = None) -> int:
    """Draw the panels; returns how many seeds are drawn (a UserError when none is)."""
    panels = [(s, seed_rows(sources, reference, experiment, s, algorithms, accuracy)) for s in settings]
    panels = [(s, rows) for s, rows in panels if any(r["kind"] == "ours" for r in rows)]
    if not panels:
        raise UserError(f"no runs of {', '.join(algorithms)} in {experiment} on {', '.join(settings)}")
    plt = use_agg()
    height = max(len(rows) for _, rows in panels)
    fig, axes = plt.subplots(1, len(panels), figsize=(5.6 * len(panels), 0.5 * height + 1.6), squeeze=False)
    several, every = len(sources) > 1, pd.concat([results for _, results in sources])
    for ax, (setting, rows) in zip(axes[0], panels):
        for y, row in enumerate(reversed(rows)):
            colour = method_style(row["algorithm"])["color"]
            if row["kind"] == "paper":
                ax.errorbar([row["mean"]], [y], xerr=[row["std"]], fmt="D", color="0.35", markersize=5, capsize=3, linewidth=1.2)
                text = f"{row['mean']:.2f} ± {row['std']:.2f}"
            else:
                values = pd.Series(row["values"])
                ax.plot(values, [y] * len(values), "o", color=colour, markersize=6, alpha=0.75, markeredgecolor="white",
                        markeredgewidth=0.6)
                ax.plot([values.mean()], [y], "|", color="0.1", markersize=16, markeredgewidth=2)
                text = f"{values.mean():.2f} ± {values.std(ddof=STD_DDOF):.2f} ({len(values)})"
            ax.annotate(text, (1.0, y), xycoords=("axes fraction", "data"), xytext=(4, 0), textcoords="offset points",
                        va="center", fontsize=8)
        labels = [f"{algorithm_name(r['algorithm'])}, paper" if r["kind"] == "paper"
                  else algorithm_name(r["algorithm"]) + (f", {r['reading']}" if several else "") for r in reversed(rows)]
        ax.set_yticks(range(len(rows)), labels, fontsize=8)
        ax.set_ylim(-0.6, len(rows) - 0.4)
        ax.grid(axis="x", alpha=0.3)
        ax.set_title(setting_title(every[every["setting"] == setting], setting), fontsize=10)
        ax.set_xlabel(f"{ACCURACIES[accuracy][1].split(' (%)')[0]} (%)", fontsize=9)
    fig.suptitle(title or f"{experiment}: each seed (dot), our mean (bar), the paper's mean ± std (diamond); "
                 "right: mean ± std (seeds)", fontsize=10, parse_math=False)
    fig.tight_layout()
    save_figure(fig, out, png)
    plt.close(fig)
    return sum(len(r["values"]) for _, rows in panels for r in rows if r["kind"] == "ours")
