"""Per-client accuracy: each run's `clients.csv` (written by `fedgmh train`: every client's test
accuracy in the best and in the last evaluated round), collected per experiment, and a figure of
its distribution per method (one box per method and setting, the clients as dots).

Records made before `clients.csv` existed have none; they are listed, never guessed.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from fedgmh.errors import UserError
from fedgmh.report.figures import save_figure
from fedgmh.report.outputs import check_figure_outputs
from fedgmh.report.titles import setting_title
from fedgmh.cards import algorithm_name, algorithm_order
from fedgmh.report.labels import DATASET_ORDER
from fedgmh.report.style import HIGHLIGHT, method_style, use_agg
from fedgmh.report.parsing import order_key

#: the dots' vertical spread about their method's row, and the seed of its draw (the same figure every time)
JITTER, JITTER_SEED = 0.2, 0


def _jitter(count: int) -> np.ndarray:
    """Vertical offsets of `count` dots, drawn from a fixed seed: the figure's bytes depend on the data alone."""
    return np.random.default_rng(JITTER_SEED).uniform(-JITTER, JITTER, count)


CLIENT_COLUMNS = ("client", "test_samples", "test_acc_best", "test_acc_last")
ROUNDS = {"best": "test_acc_best", "last": "test_acc_last"}
ID_COLUMNS = ("experiment", "setting", "dataset", "classes_per_client", "alpha", "algorithm", "variant", "seed")


def client_results(results: pd.DataFrame, experiment: str | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(one row per run and client, the runs without clients.csv) of the results' runs (`run_dir`)."""
    if experiment is not None:
        results = results[results["experiment"] == experiment]
        if results.empty:
            raise UserError(f"no runs of experiment {experiment!r} in the results")
    frames, missing = [], []
    for rec in results.to_dict("records"):
        path = Path(rec["run_dir"]) / "clients.csv"
        if not path.is_file():
            missing.append(rec)
            continue
        frame = pd.read_csv(path)
        absent = [c for c in CLIENT_COLUMNS if c not in frame.columns]
        if absent:
            raise UserError(f"{path} lacks column(s) {', '.join(absent)}; was it written by `fedgmh train`?")
        for column in reversed(ID_COLUMNS):
            frame.insert(0, column, rec.get(column, ""))
        frames.append(frame)
    columns = [*ID_COLUMNS, *CLIENT_COLUMNS]
    clients = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)
    return clients[columns], pd.DataFrame(missing, columns=results.columns)


def _missing_text(missing: pd.DataFrame, left_out: list[str]) -> str:
    names = sorted(set(missing["algorithm"]), key=order_key(algorithm_order()))
    text = "no clients.csv (records made before it existed): " + ", ".join(
        f"{algorithm_name(a)} ({(missing['algorithm'] == a).sum()} run{'s' if (missing['algorithm'] == a).sum() != 1 else ''})"
        for a in names)
    if left_out:
        text += "; not drawn, none of their runs has one: " + ", ".join(left_out)
    return text


def plot_client_accuracy(results: pd.DataFrame, out: Path | str, png: Path | str | None = None, csv: Path | str | None = None,
                         experiment: str | None = None, round_: str = "best", title: str | None = None) -> tuple[int, int]:
    """Box plots of the per-client test accuracy (%) per method, one panel per setting, for the
    runs with clients.csv; the runs without it are named in the figure, and a setting none of whose
    runs has one gets no panel. Returns (runs drawn, runs without clients.csv)."""
    import seaborn as sns

    if round_ not in ROUNDS:
        raise UserError(f"round {round_!r} is not one of {', '.join(ROUNDS)}")
    check_figure_outputs(out, png, csv)
    clients, missing = client_results(results, experiment)
    if csv:
        from fedgmh.io import write_csv

        write_csv(clients, csv)
    frame = results if experiment is None else results[results["experiment"] == experiment]
    ds_key = order_key(DATASET_ORDER)
    settings = sorted(set(frame["setting"]), key=lambda s: (ds_key(frame.loc[frame["setting"] == s, "dataset"].iloc[0]), s))
    panels = [s for s in settings if s in set(clients["setting"])] or settings[:1]  # one panel says that there is nothing
    left_out = [setting_title(frame[frame["setting"] == s], s) for s in settings if s not in panels]
    order = sorted(set(frame["algorithm"]), key=order_key(algorithm_order()))
    plt = use_agg()
    ncols = min(len(panels), 2)
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.4 * ncols, 0.3 * len(order) * nrows + 1.2 * nrows), squeeze=False)
    data = clients.assign(accuracy=100.0 * clients[ROUNDS[round_]], method=clients["algorithm"].map(algorithm_name))
    names = [algorithm_name(a) for a in order]
    palette = {algorithm_name(a): method_style(a)["color"] for a in order}
    for ax, setting in zip(axes.flat, panels):
        here = data[data["setting"] == setting]
        ax.set_title(setting_title(frame[frame["setting"] == setting], setting), fontsize=10)
        ax.set_xlabel(f"test accuracy of a client (%), {round_} round")
        ax.set_xlim(-2, 102)
        ax.grid(axis="x", alpha=0.3)
        if here.empty:
            ax.set_yticks(range(len(names)), names)
            ax.set_ylim(len(names) - 0.5, -0.5)
            ax.text(0.5, 0.5, "no per-client results\n(records made before clients.csv)", transform=ax.transAxes,
                    ha="center", va="center", fontsize=9, color="0.35")
        else:
            with warnings.catch_warnings():  # seaborn 0.13 passes matplotlib 3.11's deprecated `vert`
                warnings.simplefilter("ignore", DeprecationWarning)
                sns.boxplot(data=here, x="accuracy", y="method", hue="method", order=names, hue_order=names, palette=palette, ax=ax,
                            width=0.6, fliersize=0, linewidth=1.0, legend=False, boxprops={"alpha": 0.55})
            rows = here["method"].map(names.index).to_numpy()
            ax.scatter(here["accuracy"], rows + _jitter(len(rows)), s=1.8**2, color="0.15", alpha=0.45, linewidths=0, zorder=3)
            absent = set(missing.loc[missing["setting"] == setting, "algorithm"].map(algorithm_name)) - set(here["method"])
            for name in absent:
                ax.text(50, names.index(name), "no clients.csv", ha="center", va="center", fontsize=7, color="0.4")
        ax.set_ylabel("")
        if algorithm_name(HIGHLIGHT) in names:
            ax.get_yticklabels()[names.index(algorithm_name(HIGHLIGHT))].set_fontweight("bold")
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    if title:
        fig.suptitle(title, parse_math=False)  # the user's text as given, `$` included
    if len(missing):
        fig.text(0.01, 0.0, _missing_text(missing, left_out), fontsize=8, color="0.35", ha="left", va="top", wrap=True)
    fig.tight_layout()
    save_figure(fig, out, png)
    plt.close(fig)
    return int(clients.groupby(["setting", "algorithm", "variant", "seed"]).ngroups), len(missing)
