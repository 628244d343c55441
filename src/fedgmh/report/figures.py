"""Accuracy-per-round figures: mean over seeds with a ±1 std band, one line per algorithm."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from fedgmh.errors import UserError
from fedgmh.io import atomic_path
from fedgmh.cards import algorithm_name, algorithm_order
from fedgmh.report.labels import DATASET_ORDER
from fedgmh.report.settings import setting_extra, setting_label
from fedgmh.report.style import method_style, use_agg
from fedgmh.report.parsing import order_key


def setting_title(data: pd.DataFrame, setting: str) -> str:
    """'CIFAR-100 ExDir(5, 0.5)' (+ swept values) of a setting's rows (display names, not ids);
    'Fashion-MNIST chain(4, 1000000), 8 clients' for a chain setting with its own number of clients."""
    first = data.iloc[0].to_dict()
    dataset, partition = setting_label(first, setting)
    extra = setting_extra(first, setting).strip("_").replace("_", " ")
    return f"{dataset} {partition} {extra}" if extra else f"{dataset} {partition}"


def save_figure(fig, out: Path | str, png: Path | str | None = None) -> None:
    """Write the figure (format from the suffix) and the PNG, each atomically, legend included."""
    for path in [Path(out)] + ([Path(png)] if png else []):
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=path.suffix.lstrip(".") or "pdf", dpi=150, bbox_inches="tight")


def _select(curves: pd.DataFrame, settings: Sequence[str] | None, experiment: str | None,
            algorithms: Sequence[str] | None) -> pd.DataFrame:
    frame = curves
    if experiment is not None:
        frame = frame[frame["experiment"] == experiment]
        if frame.empty:
            raise UserError(f"no curves of experiment {experiment!r}; present: {', '.join(sorted(set(curves['experiment']))) or 'none'}")
    if settings:
        unknown = [s for s in settings if s not in set(frame["setting"])]
        if unknown:
            raise UserError(f"setting(s) {', '.join(unknown)} not in the curves; present: {', '.join(sorted(set(frame['setting'])))}")
        frame = frame[frame["setting"].isin(settings)]
    if algorithms:
        frame = frame[frame["algorithm"].isin(algorithms)]
    if frame.empty:
        raise UserError("nothing to plot: the selection of curves is empty")
    return frame


def plot_curves(curves: pd.DataFrame, out: Path | str, png: Path | str | None = None, settings: Sequence[str] | None = None,
                experiment: str | None = None, algorithms: Sequence[str] | None = None, title: str | None = None) -> list[str]:
    """Accuracy (%) per round: mean over seeds with a ±1 std band; one panel per setting, one
    legend outside the panels. Returns the settings drawn; a UserError when the selection is empty."""
    from matplotlib.ticker import MaxNLocator

    plt = use_agg()
    frame = _select(curves, settings, experiment, algorithms).assign(acc=lambda f: 100.0 * f["test_acc"])
    order = sorted(set(frame["algorithm"]), key=order_key(algorithm_order()))
    ds_key = order_key(DATASET_ORDER)
    panels = sorted(set(frame["setting"]), key=lambda s: (ds_key(frame.loc[frame["setting"] == s, "dataset"].iloc[0]), s))
    ncols = min(len(panels), 2)
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.4 * ncols, 3.6 * nrows), squeeze=False)
    handles = {}
    for ax, setting in zip(axes.flat, panels):
        data = frame[frame["setting"] == setting]
        n_seeds = int(data.groupby("algorithm")["seed"].nunique().max())
        rounds = int(data["round"].max())
        for algorithm in [a for a in order if a in set(data["algorithm"])]:
            stats = data[data["algorithm"] == algorithm].groupby("round")["acc"].agg(["mean", "std", "count"])
            style = method_style(algorithm)
            (line,) = ax.plot(stats.index, stats["mean"], label=algorithm_name(algorithm), markevery=max(1, rounds // 12), **style)
            if (stats["count"] > 1).any():
                ax.fill_between(stats.index, stats["mean"] - stats["std"].fillna(0), stats["mean"] + stats["std"].fillna(0),
                                color=style["color"], alpha=0.12, linewidth=0, zorder=style["zorder"] - 1)
            handles.setdefault(algorithm, line)
        ax.set_title(f"{setting_title(data, setting)} ({n_seeds} seed{'s' if n_seeds != 1 else ''})", fontsize=10)
        ax.set_xlabel("round")
        ax.set_ylabel("test accuracy (%)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    legend = [handles[a] for a in order if a in handles]
    fig.legend(legend, [h.get_label() for h in legend], loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False, fontsize=9)
    if title:
        fig.suptitle(title, parse_math=False)  # the user's text as given, `$` included
    fig.tight_layout()
    save_figure(fig, out, png)
    plt.close(fig)
    return panels
