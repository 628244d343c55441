"""Accuracy-per-round figures: mean over seeds with a ±1 std band, one line per algorithm."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from fedgmh.errors import UserError
from fedgmh.io import atomic_path
from fedgmh.report.names import ALGORITHM_ORDER, DATASET_ORDER, algorithm_name, dataset_name, format_number
from fedgmh.report.settings import setting_id
from fedgmh.report.values import order_key

def plot_curves(curves: pd.DataFrame, out: Path | str, png: Path | str | None = None, settings: Sequence[str] | None = None,
                experiment: str | None = None, algorithms: Sequence[str] | None = None, title: str | None = None) -> list[str]:
    """Accuracy (%) per round: mean over seeds with a ±1 std band; one panel per setting.

    Returns the settings drawn. Raises a UserError when the selection is empty.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns
    from matplotlib.ticker import MaxNLocator

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
    frame = frame.copy()
    frame["accuracy (%)"] = 100.0 * frame["test_acc"]
    alg_key = order_key(ALGORITHM_ORDER)
    order = [algorithm_name(a) for a in sorted(set(frame["algorithm"]), key=alg_key)]
    frame["method"] = frame["algorithm"].map(algorithm_name)
    ds_key = order_key(DATASET_ORDER)
    panels = sorted(set(frame["setting"]), key=lambda s: (ds_key(frame.loc[frame["setting"] == s, "dataset"].iloc[0]), s))

    palette = dict(zip(order, sns.color_palette("tab20" if len(order) > 10 else "tab10", n_colors=len(order))))
    ncols = min(len(panels), 3)
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, 3.8 * nrows), squeeze=False, sharey=False)
    for ax, setting in zip(axes.flat, panels):
        data = frame[frame["setting"] == setting]
        n_seeds = data.groupby("method")["seed"].nunique().max()
        sns.lineplot(data=data, x="round", y="accuracy (%)", hue="method", hue_order=[m for m in order if m in set(data["method"])],
                     palette=palette, errorbar="sd", ax=ax, linewidth=1.2)
        first = data.iloc[0]
        label = f"{dataset_name(first['dataset'])} ExDir({int(first['classes_per_client'])}, {format_number(first['alpha'])})"
        extra = setting[len(setting_id(first.to_dict())):]
        ax.set_title(f"{label}{' ' + extra.strip('_') if extra else ''} ({n_seeds} seed{'s' if n_seeds != 1 else ''})", fontsize=10)
        ax.set_xlabel("round")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, title=None)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    outputs = [Path(out)] + ([Path(png)] if png else [])
    for path in outputs:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=path.suffix.lstrip(".") or "pdf", dpi=150)
    plt.close(fig)
    return panels

