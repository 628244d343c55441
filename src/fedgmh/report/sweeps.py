"""A table that sweeps one parameter (Table 4's participation rho, Table 6's beta, Table 7's eta_h) as
one line per method over the parameter: our mean with each seed as a dot and ±1 std shaded where a
point has several seeds, the paper's mean ± std as hollow markers on a dashed line. One panel per
partition."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from fedgmh.cards import algorithm_name
from fedgmh.filing import base_id
from fedgmh.report.compare import attach_reference
from fedgmh.report.dots import seed_values
from fedgmh.report.figures import save_figure
from fedgmh.report.labels import SWEEP_DIMS, STD_DDOF, format_number
from fedgmh.report.style import method_style, use_agg
from fedgmh.report.summary import ACCURACIES, DEFAULT_ACCURACY, summarize
from fedgmh.report.titles import SUFFIX_WORDS, setting_title

LOG_RATIO = 20  # a parameter whose largest value is this many times its smallest gets a log axis


def swept_parameter(dims: list[str], cells: pd.DataFrame) -> str | None:
    """The one numeric parameter `dims` sweeps (None: none, several, or not a number)."""
    if len(dims) != 1:
        return None
    values = pd.to_numeric(cells[dims[0]], errors="coerce")
    return dims[0] if values.notna().all() and values.nunique() > 1 else None


def parameter_word(dim: str) -> str:
    """'join_ratio' -> 'rho', 'opt_eta_h' (a cells column) -> 'eta_h'."""
    return dim[4:] if dim.startswith(("opt:", "opt_")) else SUFFIX_WORDS[SWEEP_DIMS[dim][0]]


def spread_words(seeds: int) -> str:
    return "dots: each seed; shaded: ±1 std over seeds" if seeds > 1 else "one seed per point: no spread to draw"


def plot_sweep(results: pd.DataFrame, reference: pd.DataFrame, experiment: str, out: Path | str, png: Path | str | None = None,
               accuracy: str = DEFAULT_ACCURACY, title: str | None = None) -> int:
    """Draw the sweep of `experiment` (its cells must sweep one numeric parameter: `swept_parameter`);
    returns how many points have the paper's value."""
    cells, dims = summarize(results, experiment, accuracy)
    cells = attach_reference(cells, reference)
    dim = swept_parameter(dims, cells)
    if dim is None:
        raise ValueError(f"{experiment} sweeps {dims or 'nothing'}, not one numeric parameter")
    word = parameter_word(dim)
    cells = cells.assign(x=pd.to_numeric(cells[dim]), panel=[base_id(c) for c in cells.to_dict("records")])
    panels = list(dict.fromkeys(cells["panel"]))
    plt = use_agg()
    fig, axes = plt.subplots(1, len(panels), figsize=(6.2 * len(panels), 4.2), squeeze=False)
    most = int(cells["n_seeds"].max())
    handles, labels = [], []
    for ax, panel in zip(axes[0], panels):
        for algorithm, group in cells[cells["panel"] == panel].groupby("algorithm", sort=False):
            group = group.sort_values("x")
            style = method_style(algorithm)
            seeds = [seed_values(results, c, accuracy) for c in group.to_dict("records")]
            means = np.array([np.mean(s) for s in seeds])
            (line,) = ax.plot(group["x"], means, color=style["color"], marker=style["marker"], linewidth=style["linewidth"],
                              markersize=6, zorder=style["zorder"])
            for x, values in zip(group["x"], seeds):
                ax.plot([x] * len(values), values, ".", color=style["color"], alpha=0.6, markersize=5, zorder=style["zorder"])
            if most > 1:
                std = np.array([np.std(s, ddof=STD_DDOF) for s in seeds])
                ax.fill_between(group["x"], means - std, means + std, color=style["color"], alpha=0.15, linewidth=0)
            paper = group[group["paper_row"] >= 0]
            if len(paper):
                ax.errorbar(paper["x"], paper["paper_mean"], yerr=paper["paper_std"], color=style["color"], linestyle="--",
                            linewidth=1, marker=style["marker"], markerfacecolor="white", markersize=6, capsize=3, alpha=0.8)
            if panel == panels[0]:
                counts = sorted(set(group["n_seeds"].astype(int)))
                handles.append(line)
                labels.append(f"{algorithm_name(algorithm)} ({'–'.join(map(str, (counts[0], counts[-1]) if len(counts) > 1 else counts))}"
                              f" seed{'s' if counts[-1] > 1 else ''} per point)")
        values = sorted(set(cells.loc[cells["panel"] == panel, "x"]))
        if values[-1] >= LOG_RATIO * values[0] > 0:
            ax.set_xscale("log")
        ax.set_xticks(values, [format_number(v) for v in values])
        ax.minorticks_off()
        ax.set_xlabel(word)
        ax.set_ylabel(f"{ACCURACIES[accuracy][1].split(' (%)')[0]} (%)")
        ax.set_title(setting_title(cells[cells["panel"] == panel].iloc[:1], panel), fontsize=10)
        ax.grid(alpha=0.3)
    handles.append(plt.Line2D([], [], color="0.4", linestyle="--", marker="o", markerfacecolor="white"))
    labels.append("the paper's mean ± std (hollow, dashed)")
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False, fontsize=9)
    fig.suptitle(f"{title or experiment}: one line per method over {word}; {spread_words(most)}", fontsize=10, parse_math=False)
    fig.tight_layout()
    save_figure(fig, out, png)
    plt.close(fig)
    return int((cells["paper_row"] >= 0).sum())
