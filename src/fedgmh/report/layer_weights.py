"""Per-layer aggregation weights as heat-maps (pFedLA's Fig. 6, seed 003).

A pFedLA-like run writes `layer_weights.csv` next to its metrics: long format, columns `layer`,
`client`, `peer`, `weight` = the weight that client `client`'s personalised model gives peer `peer`'s
parameters in `layer`, at the run's last round. The figure draws one clients x clients map per
(algorithm, layer): rows = the client whose model is built, columns = the peer, the diagonal outlined.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from fedgmh.errors import UserError
from fedgmh.io import write_csv
from fedgmh.report.figures import save_figure
from fedgmh.report.outputs import check_figure_outputs
from fedgmh.report.titles import setting_title
from fedgmh.cards import algorithm_name, algorithm_order
from fedgmh.report.style import use_agg
from fedgmh.report.parsing import order_key

LAYER_WEIGHTS_FILE = "layer_weights.csv"
COLUMNS = ("layer", "client", "peer", "weight")
#: the paper's CNN's layers (fedgmh.model.FedAvgCNN: `body` is an nn.Sequential) by PFLlib's names
LAYER_NAMES = {"body.0": "conv1", "body.3": "conv2", "body.7": "fc1", "head": "head (fc)"}


def layer_name(layer: str) -> str:
    """A layer's readable name ('body.3' -> 'conv2'); other models' layers as they are named."""
    return LAYER_NAMES.get(layer, layer)


def read_layer_weights(run_dir: Path | str) -> pd.DataFrame:
    """A run's layer_weights.csv, checked (a UserError naming the run when it is missing or malformed)."""
    path = Path(run_dir) / LAYER_WEIGHTS_FILE
    if not path.is_file():
        raise UserError(f"run {run_dir}: no {LAYER_WEIGHTS_FILE} (only pFedLA-like algorithms write one, at their last round)")
    try:
        frame = pd.read_csv(path)
    except (pd.errors.EmptyDataError, pd.errors.ParserError) as err:
        raise UserError(f"{path} is unreadable ({err})") from None
    absent = [c for c in COLUMNS if c not in frame.columns]
    if absent:
        raise UserError(f"{path} lacks column(s) {', '.join(absent)}; expected {', '.join(COLUMNS)}")
    if frame.empty:
        raise UserError(f"{path} has no rows")
    if frame.duplicated(["layer", "client", "peer"]).any():
        raise UserError(f"{path} gives some (layer, client, peer) twice")
    frame["layer"] = frame["layer"].astype(str)
    return frame


def weight_matrix(frame: pd.DataFrame, layer: str) -> np.ndarray:
    """clients x peers matrix of one layer (NaN where a pair is not given)."""
    data = frame[frame["layer"] == layer]
    n = int(max(data["client"].max(), data["peer"].max())) + 1
    matrix = np.full((n, n), np.nan)
    matrix[data["client"].to_numpy(int), data["peer"].to_numpy(int)] = data["weight"].to_numpy(float)
    return matrix


def select_runs(results: pd.DataFrame, experiment: str, setting: str, algorithms: Sequence[str],
                seed: int | None = None) -> dict[str, str]:
    """algorithm -> run directory (its `seed`, default the lowest seed it has) of one experiment and setting."""
    frame = results[(results["experiment"] == experiment) & (results["setting"] == setting)]
    if frame.empty:
        present = sorted(set(results.loc[results["experiment"] == experiment, "setting"]))
        raise UserError(f"no runs of experiment {experiment!r}, setting {setting!r}; its settings: {', '.join(present) or 'none'}")
    runs = {}
    for algorithm in sorted(dict.fromkeys(algorithms), key=order_key(algorithm_order())):
        data = frame[frame["algorithm"] == algorithm]
        if seed is not None:
            data = data[data["seed"] == seed]
        if data.empty:
            raise UserError(f"no run of {algorithm} in experiment {experiment!r}, setting {setting!r}"
                            + (f", seed {seed}" if seed is not None else ""))
        runs[algorithm] = str(data.sort_values("seed").iloc[0]["run_dir"])
    return runs


def plot_layer_weights(results: pd.DataFrame, experiment: str, setting: str, algorithms: Sequence[str], out: Path | str,
                       png: Path | str | None = None, csv: Path | str | None = None, layer: str | None = None,
                       seed: int | None = None, title: str | None = None) -> list[tuple[str, str]]:
    """One heat-map per (algorithm, layer): rows = algorithms, columns = layers (or only `layer`),
    all on one colour scale from 0 (one colour bar), so that panels compare. Returns the
    (algorithm, layer) panels drawn."""
    check_figure_outputs(out, png, csv)
    runs = select_runs(results, experiment, setting, algorithms, seed)
    weights = {algorithm: read_layer_weights(run_dir) for algorithm, run_dir in runs.items()}
    if layer is not None:
        for algorithm, frame in weights.items():
            if layer not in set(frame["layer"]):
                raise UserError(f"layer {layer!r} is not in {runs[algorithm]}/{LAYER_WEIGHTS_FILE}; its layers: "
                                f"{', '.join(dict.fromkeys(frame['layer']))}")
    layers = [layer] if layer is not None else list(dict.fromkeys(lay for frame in weights.values() for lay in frame["layer"]))
    plt = use_agg()
    nrows, ncols = len(weights), len(layers)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.3 * ncols + 0.8, 3.0 * nrows + 0.4), squeeze=False)
    panels, drawn, image = [], [], None
    top = max(float(frame.loc[frame["layer"].isin(layers), "weight"].max()) for frame in weights.values())
    head = setting_title(results[(results["experiment"] == experiment) & (results["setting"] == setting)], setting)
    for row, (algorithm, frame) in enumerate(weights.items()):
        run_seed = int(results.loc[results["run_dir"] == runs[algorithm], "seed"].iloc[0])
        for col, name in enumerate(layers):
            ax = axes[row][col]
            if name not in set(frame["layer"]):
                ax.set_visible(False)
                continue
            matrix = weight_matrix(frame, name)
            image = ax.imshow(matrix, cmap="viridis", vmin=0.0, vmax=max(top, 1e-12), interpolation="nearest")
            n = matrix.shape[0]
            for i in range(n):  # the diagonal: each client's weight on its own parameters
                ax.add_patch(plt.Rectangle((i - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="white", linewidth=1.2))
            step = max(1, n // 10)
            ax.set_xticks(range(0, n, step))
            ax.set_yticks(range(0, n, step))
            ax.set_xlabel("peer")
            ax.set_ylabel("client")
            ax.set_title(f"{algorithm_name(algorithm)} (seed {run_seed}): {layer_name(name)}", fontsize=9)
            panels.append((algorithm, name))
            drawn.append(frame[frame["layer"] == name].assign(algorithm=algorithm, seed=run_seed, run_dir=runs[algorithm]))
    fig.suptitle(title or f"Per-layer aggregation weights at the last round: {head}", fontsize=10, parse_math=False)
    fig.tight_layout()
    if image is not None:
        fig.colorbar(image, ax=axes.ravel().tolist(), fraction=0.02, pad=0.02, label="weight")
    save_figure(fig, out, png)
    plt.close(fig)
    if csv:
        write_csv(pd.concat(drawn, ignore_index=True)[["algorithm", "seed", "layer", "client", "peer", "weight", "run_dir"]], csv)
    return panels
