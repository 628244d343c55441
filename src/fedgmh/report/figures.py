"""Accuracy-per-round figures: the mean over seeds, one line per method, with a panel zooming on
the last rounds (where the methods' final accuracies sit within a point of each other) and a ±1
std band only for the methods the figure is about (12 bands merge into a smear)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from fedgmh.errors import UserError
from fedgmh.io import FIGURE_NO_DATE, atomic_path
from fedgmh.cards import algorithm_order
from fedgmh.report.labels import DATASET_ORDER
from fedgmh.report.marks import (FINAL_STYLE, PAPER_STYLE, Marks, draw_overlay, draw_paper_finals, draw_paper_rounds, draw_targets,
                                 overlay_stats, paper_finals)
from fedgmh.report.outputs import check_figure_outputs, figure_format
from fedgmh.report.style import HIGHLIGHT, method_style, use_agg
from fedgmh.report.parsing import check_targets, order_key
from fedgmh.report.titles import setting_title


def save_figure(fig, out: Path | str, png: Path | str | None = None) -> None:
    """Write the figure (format from the suffix) and the PNG, each atomically, legend included; both are
    checked before either is written."""
    check_figure_outputs(out, png)
    for path in [Path(out)] + ([Path(png)] if png else []):
        kind = figure_format(path)
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=kind, dpi=150, bbox_inches="tight", metadata=FIGURE_NO_DATE.get(kind))


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


ZOOM_SHARE = 0.25  # the zoom panel shows the last quarter of the rounds...
ZOOM_POINTS = 5.0  # ...and the methods within this many points of the best one there
TARGET_MARGIN = 4.0  # with targets, the zoom starts this many points below the lowest one
STAR_ROOM = 0.03  # with the paper's rounds starred, the zoom runs this share of its width past the last round
LEGEND_COLUMNS = 4  # the legend sits below the panels in at most this many columns, never wider than they are


def seed_counts(frame: pd.DataFrame) -> dict[str, str]:
    """algorithm -> '4 seeds', '1 seed' or '1–4 seeds' (the counts differ between settings)."""
    counts = frame.groupby(["algorithm", "setting"])["seed"].nunique().groupby("algorithm").agg(["min", "max"])
    return {a: (f"{lo}" if lo == hi else f"{lo}–{hi}") + (" seed" if hi == 1 else " seeds")
            for a, (lo, hi) in counts.iterrows()}


def banded_methods(finals: pd.Series) -> list[str]:
    """The methods whose spread is drawn: FedGMH and the best other method by final mean accuracy,
    of those in `finals` (the caller leaves out the methods with one seed: no spread to draw)."""
    others = finals.drop(HIGHLIGHT, errors="ignore")
    return [a for a in finals.index if a == HIGHLIGHT] + ([str(others.idxmax())] if len(others) else [])


def zoom_window(stats: dict[str, pd.DataFrame], banded: Sequence[str] = ()) -> tuple[int, float, float]:
    """(first round, y low, y high) of the zoom panel: the last ZOOM_SHARE of the evaluated rounds;
    the methods whose mean over them is within ZOOM_POINTS of the best one, from the lowest 10th
    percentile of their curves there (a noisy curve's worst dips are cut off) to the highest point,
    widened to hold the ±1 std band of each of those in `banded` whole."""
    rounds = sorted({r for s in stats.values() for r in s.index})
    first = rounds[max(0, min(len(rounds) - 2, len(rounds) - math.ceil(len(rounds) * ZOOM_SHARE) - 1))]
    window = {a: s.loc[s.index >= first] for a, s in stats.items()}
    level = pd.Series({a: w["mean"].mean() for a, w in window.items()})
    near = level[level >= level.max() - ZOOM_POINTS]
    low = min(float(window[a]["mean"].quantile(0.1)) for a in near.index)
    high = max(float(window[a]["mean"].max()) for a in near.index)
    for a in (a for a in banded if a in near.index):
        std = window[a]["std"].fillna(0)
        low, high = min(low, float((window[a]["mean"] - std).min())), max(high, float((window[a]["mean"] + std).max()))
    pad = max(0.08 * (high - low), 0.05)
    return first, low - pad, high + pad


HIDDEN_POINTS = 0.25  # a mean curve this close to FedGMH's (mean gap over the rounds) is hidden under its line


def hidden_gaps(stats: dict[str, pd.DataFrame]) -> dict[str, float]:
    """algorithm -> its mean curve's mean gap (points) to FedGMH's, for those hidden under FedGMH's line."""
    if HIGHLIGHT not in stats:
        return {}
    ours = stats[HIGHLIGHT]["mean"]
    gaps = {a: float((s["mean"] - ours).abs().mean()) for a, s in stats.items() if a != HIGHLIGHT}
    return {a: gap for a, gap in gaps.items() if gap < HIDDEN_POINTS}


FEW_SEEDS, FADED = 3, 0.4  # a mean over fewer seeds than a verdict needs is drawn at this opacity


def _draw(ax, stats: dict[str, pd.DataFrame], banded: Sequence[str], markevery: int) -> tuple[dict, bool]:
    """The mean curves on `ax` (faded below FEW_SEEDS seeds), bands for `banded`: (algorithm -> line,
    whether a band was drawn)."""
    handles, any_band = {}, False
    for algorithm, data in stats.items():
        style = method_style(algorithm)
        alpha = FADED if data["count"].max() < FEW_SEEDS else 1.0
        (handles[algorithm],) = ax.plot(data.index, data["mean"], markevery=markevery, alpha=alpha, **style)
        if algorithm in banded and (data["count"] > 1).any():
            std = data["std"].fillna(0)
            ax.fill_between(data.index, data["mean"] - std, data["mean"] + std, color=style["color"], alpha=0.18,
                            linewidth=0, zorder=style["zorder"] - 1)
            any_band = True
    ax.grid(alpha=0.3)
    return handles, any_band


def _legend_below(fig, handles: list, labels: list[str], title: str | None) -> None:
    """The legend centred below the panels, in the most columns (up to LEGEND_COLUMNS) that keep it within the
    figure's width."""
    renderer = fig.canvas.get_renderer()
    for columns in range(LEGEND_COLUMNS, 0, -1):
        legend = fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=columns, frameon=False,
                            fontsize=8.5, title=title, title_fontsize=8.5)
        if columns == 1 or legend.get_window_extent(renderer).width <= fig.bbox.width:
            return
        legend.remove()


def plot_curves(curves: pd.DataFrame, out: Path | str, png: Path | str | None = None, settings: Sequence[str] | None = None,
                experiment: str | None = None, algorithms: Sequence[str] | None = None, title: str | None = None,
                marks: Marks | None = None) -> list[str]:
    """Accuracy (%) per round, mean over seeds: per setting one panel of every round and one zooming
    on the last rounds; ±1 std bands for `banded_methods`; `marks` (targets, the paper's rounds,
    another reading's curves); the seed count of each method in the one legend. Returns the settings
    drawn; a UserError when the selection is empty."""
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    plt = use_agg()
    marks = marks or Marks()
    check_targets(marks.targets)
    frame = _select(curves, settings, experiment, algorithms).assign(acc=lambda f: 100.0 * f["test_acc"])
    order = sorted(set(frame["algorithm"]), key=order_key(algorithm_order()))
    ds_key = order_key(DATASET_ORDER)
    panels = sorted(set(frame["setting"]), key=lambda s: (ds_key(frame.loc[frame["setting"] == s, "dataset"].iloc[0]), s))
    fig, axes = plt.subplots(len(panels), 2, figsize=(10.5, 3.8 * len(panels)), squeeze=False,
                             gridspec_kw={"width_ratios": [1.5, 1]})
    handles, overlays, banded_names, star, final, hidden = {}, {}, [], None, None, {}
    for (full, zoom), setting in zip(axes, panels):
        data = frame[frame["setting"] == setting]
        stats = {a: data[data["algorithm"] == a].groupby("round")["acc"].agg(["mean", "std", "count"])
                 for a in order if a in set(data["algorithm"])}
        other = overlay_stats(marks, data, setting)
        hidden |= {a: max(gap, hidden.get(a, 0.0)) for a, gap in hidden_gaps(stats).items()}
        banded = banded_methods(pd.Series({a: s["mean"].iloc[-1] for a, s in stats.items() if (s["count"] > 1).any()},
                                          dtype=float))
        last = int(data["round"].max())
        lines, band = _draw(full, stats, banded, max(1, last // 12))
        handles |= lines
        overlays |= draw_overlay(full, other)
        if band:
            banded_names += [marks.name(a) for a in banded if marks.name(a) not in banded_names]
        first, low, high = zoom_window(stats | {f"{a}@overlay": s for a, s in other.items()}, banded)
        near = min(marks.targets) - TARGET_MARGIN if marks.targets else None
        at_targets = near is not None and any((s["mean"] >= near).any() for s in stats.values())
        if at_targets:  # the zoom shows where the curves cross the targets instead of the last rounds
            low, high = near, max(high, max(marks.targets) + 1)
            first = int(min(s.index[s["mean"] >= low].min() for s in stats.values() if (s["mean"] >= low).any()))
        _draw(zoom, {a: s[s.index >= first] for a, s in stats.items()}, banded, max(1, (last - first) // 8))
        draw_overlay(zoom, {a: s[s.index >= first] for a, s in other.items()})
        for ax in (full, zoom):
            draw_targets(ax, marks, named=ax is full)
        starred = draw_paper_rounds(zoom, marks, set(stats) | set(other), numbered=True, last_round=last)
        star = starred or star
        finals = paper_finals(marks, data, stats)
        for ax in (full, zoom):
            final = draw_paper_finals(ax, finals, last) or final
        zoom.set_xlim(first, last + (STAR_ROOM * (last - first) if starred or finals else 0))  # a mark at the last round stays whole
        zoom.set_ylim(low, high)
        full.indicate_inset_zoom(zoom, edgecolor="0.4")
        full.set_title(setting_title(data, setting), fontsize=10)
        zoom.set_title(f"{low + 0.5:.0f}–{high:.0f} %: where the curves reach the targets" if at_targets
                       else f"rounds {first}–{last}, methods within {ZOOM_POINTS:g} points of the best", fontsize=9)
        full.set_ylabel("test accuracy (%)")
        for ax in (full, zoom):
            ax.set_xlabel("round")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    seeds = seed_counts(frame)
    legend = [handles[a] for a in order if a in handles]
    labels = [f"{marks.name(a)} ({seeds[a]})" + (f"\nunder {marks.name(HIGHLIGHT)}'s line (mean gap {hidden[a]:.2f} points)" if a in hidden else "")
              for a in order if a in handles]
    if overlays:
        other_seeds = seed_counts(marks.overlay[marks.overlay["setting"].isin(panels)])
        legend += list(overlays.values())
        labels += [f"{marks.name(a)}, {marks.overlay_name} ({other_seeds[a]})" for a in overlays]
    if banded_names:
        legend.append(Patch(color="0.6", alpha=0.4, linewidth=0))
        labels.append(f"±1 std over seeds\n({', '.join(banded_names)})")
    if star is not None:
        legend.append(plt.Line2D([], [], color="white", **PAPER_STYLE))
        labels.append(f"the paper's round to {' / '.join(f'{t:g}' for t in marks.targets)} %\n(star in the method's colour)")
    if final is not None:
        legend.append(plt.Line2D([], [], color="white", **{k: v for k, v in FINAL_STYLE.items() if k not in ("elinewidth", "capsize")}))
        labels.append(f"the paper's {frame['experiment'].iloc[0].replace('table', 'Table ')} mean ± std\n(diamond in the method's colour)")
    few = frame.groupby(["algorithm", "setting"])["seed"].nunique().groupby("algorithm").max() < FEW_SEEDS
    if title:
        fig.suptitle(title, parse_math=False)  # the user's text as given, `$` included
    fig.tight_layout()
    _legend_below(fig, legend, labels, f"faded: fewer than {FEW_SEEDS} seeds" if any(few.get(a, False) for a in handles) else None)
    save_figure(fig, out, png)
    plt.close(fig)
    return panels
