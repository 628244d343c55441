"""Final accuracy per cell as a dot plot: each seed of ours next to the paper's mean ± std.

One small panel per cell (rows: methods or variants, columns: settings), each with its own x range,
so that a difference of half a point (98.4 vs 98.9) shows where a shared 0-100 axis would hide it.
The paper's values are matched as the comparison matches them (`attach_reference`).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from fedgmh.report.compare import attach_reference
from fedgmh.report.figures import save_figure
from fedgmh.report.titles import setting_title
from fedgmh.report.style import method_style, use_agg
from fedgmh.report.summary import ACCURACIES, DEFAULT_ACCURACY, accuracy_column, summarize

MIN_SPAN = 1.0  # points: a panel's x range is at least this wide, so that noise is not blown up


def seed_values(results: pd.DataFrame, cell: dict, accuracy: str) -> list[float]:
    """The cell's accuracy (%) of each of its seeds (each seed once)."""
    runs = results[(results["experiment"] == cell["experiment"]) & (results["setting"] == cell["setting"])
                   & (results["algorithm"] == cell["algorithm"])]
    return list(100.0 * runs.drop_duplicates("seed")[accuracy_column(results, accuracy)].astype(float))


def _x_range(values: list[float]) -> tuple[float, float]:
    low, high = min(values), max(values)
    centre, span = (low + high) / 2, max(high - low, MIN_SPAN) * 1.25
    return centre - span / 2, centre + span / 2


def plot_final_accuracy(results: pd.DataFrame, reference: pd.DataFrame, experiment: str, out: Path | str,
                        png: Path | str | None = None, accuracy: str = DEFAULT_ACCURACY, title: str | None = None) -> int:
    """Draw the dot plot of `experiment`'s cells; returns how many cells have the paper's value."""
    cells = attach_reference(summarize(results, experiment, accuracy)[0], reference)
    rows, columns = list(dict.fromkeys(cells["row"])), list(dict.fromkeys(cells["column"]))
    plt = use_agg()
    fig, axes = plt.subplots(len(rows), len(columns), figsize=(2.6 * len(columns) + 1.2, 0.62 * len(rows) + 1.3),
                             squeeze=False)
    for ax in axes.flat:
        ax.set_visible(False)
    for cell in cells.to_dict("records"):
        r, c = rows.index(cell["row"]), columns.index(cell["column"])
        ax, style = axes[r][c], method_style(cell["algorithm"])
        seeds = seed_values(results, cell, accuracy)
        ax.set_visible(True)
        ax.plot(seeds, [0] * len(seeds), "o", color=style["color"], markersize=4, alpha=0.8, markeredgewidth=0)
        ax.plot([cell["mean"]], [0], "|", color="0.1", markersize=11, markeredgewidth=1.6)
        shown = list(seeds)
        if cell["paper_row"] >= 0:
            ax.errorbar([cell["paper_mean"]], [1], xerr=[cell["paper_std"]], fmt="D", color="0.35", markersize=4, capsize=2,
                        linewidth=1)
            shown += [cell["paper_mean"] - cell["paper_std"], cell["paper_mean"] + cell["paper_std"]]
        ax.set_xlim(*_x_range(shown))
        ax.set_ylim(-0.7, 1.7)
        ax.set_yticks([0, 1], ["ours", "paper"], fontsize=7)
        ax.tick_params(axis="x", labelsize=7)
        ax.grid(axis="x", alpha=0.3)
        if not any(axes[r][k].get_visible() for k in range(c)):  # the row's first panel names the method
            ax.set_ylabel(cell["row_name"], rotation=0, ha="right", va="center", fontsize=9)
        if r == 0 or not axes[r - 1][c].get_visible():
            ax.set_title(setting_title(pd.DataFrame([cell]), cell["setting"]), fontsize=9)
    for c in range(len(columns)):  # the unit under each column's lowest panel
        drawn = [axes[r][c] for r in range(len(rows)) if axes[r][c].get_visible()]
        drawn[-1].set_xlabel(f"{ACCURACIES[accuracy][1].split(' (%)')[0]} (%)", fontsize=8)
    fig.suptitle(f"{title or experiment}: each seed (dots, bar: our mean) and the paper's mean ± std (diamond)",
                 fontsize=10, parse_math=False)
    fig.tight_layout()
    save_figure(fig, out, png)
    plt.close(fig)
    return int((cells["paper_row"] >= 0).sum())
