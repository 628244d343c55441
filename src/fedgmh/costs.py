"""Storage and communication costs (paper section 2.3): analytic, from the actual model, and measured.

Sizes come from a real `FedAvgCNN`, never typed in: bytes are numel x element size (float32
parameters, the uploaded labels' dtype, a bool mask psi of 1 byte per head entry); 1 KB = 1024
bytes. Each algorithm's class says (`exchange`), with OUR implementation's semantics, what one
client uploads and downloads in one training round, i.e. what it passes through `fed.channel` (see
docs/costs.md); `round_traffic` sums it over a round, as the engine's `bytes_up` / `bytes_down`
columns do. `measured_costs` reads finished runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import pandas as pd
import torch

from fedgmh.algorithms import Exchange, get_algorithm
from fedgmh.cards import algorithm_names, card, resolve_options
from fedgmh.datasets import COST_DATASETS as DEFAULT_DATASETS
from fedgmh.datasets import get_info
from fedgmh.errors import UserError
from fedgmh.record import load_record

KB = 1024
PSI_DTYPE = torch.bool  # the mask psi over the head, one byte per entry (NumPy / torch bool)

__all__ = ["Exchange", "Flops", "Sizes", "algorithm_costs", "cost_table", "exchange", "measured_costs", "paper_figures", "round_traffic"]


def _element_size(dtype: torch.dtype) -> int:
    return torch.empty(0, dtype=dtype).element_size()


@dataclass(frozen=True)
class Sizes:
    """Byte sizes of the pieces the algorithms store and exchange, read off an actual model."""

    model: int
    body: int  # the feature extractor phi
    head: int  # one head h (weight + bias)
    fc1: int  # the body's last layer (PFLlib's fc1), shared with the head by LG-FedAvg's global_part=fc1+head
    head_entries: int  # L, the number of head parameters (entries of psi)
    feature_dim: int  # d_f
    num_classes: int
    prototype: int  # one mean feature vector: d_f floats
    label: int  # one uploaded label
    psi: int  # the boolean mask over the head
    parameters: tuple[tuple[str, int], ...] = ()  # (name, bytes) of every parameter tensor, in model order

    @classmethod
    def of(cls, model: torch.nn.Module) -> Sizes:
        from fedgmh.algorithms.fedgmh import LABEL_DTYPE
        from fedgmh.engine import Channel
        from fedgmh.model import is_body, is_fc1, is_head

        params = dict(model.named_parameters())
        nbytes = lambda keep: sum(Channel.size(p) for k, p in params.items() if keep(k))  # noqa: E731
        head = params["head.weight"]
        entries = sum(p.numel() for k, p in params.items() if is_head(k))
        return cls(
            model=nbytes(lambda k: True),
            body=nbytes(is_body),
            head=nbytes(is_head),
            fc1=nbytes(is_fc1),
            head_entries=entries,
            feature_dim=head.shape[1],
            num_classes=head.shape[0],
            prototype=head.shape[1] * head.element_size(),  # the body output has the parameters' dtype
            label=_element_size(LABEL_DTYPE),
            psi=entries * _element_size(PSI_DTYPE),
            parameters=tuple((k, Channel.size(p)) for k, p in params.items()),
        )

    @classmethod
    def for_dataset(cls, name: str) -> Sizes:
        """Sizes of the model a run on dataset `name` trains."""
        return cls.of(meta_model(name)[0])


def meta_model(name: str) -> tuple[torch.nn.Module, Any]:
    """(the model a run on dataset `name` trains, the dataset's `data.get_info`), the model built on
    the meta device: shapes only, no weights drawn."""
    from fedgmh import data
    from fedgmh.model import FedAvgCNN

    info = data.get_info(name)
    with torch.device("meta"):
        return FedAvgCNN(info.channels, info.num_classes, info.height), info


def exchange(algorithm: str, options: Any, sizes: Sizes, labels: int, models: int | None = None) -> Exchange:
    """What one client with `labels` = |S_m| local labels exchanges per training round.

    `options` are the algorithm's resolved options; `models` bounds how many uploaded models a
    client can download (FedFomo downloads min(M, models): fewer while fewer clients have uploaded,
    none in round 0; None = M). Bytes of server state aliased to client 0 (FedGMH's official
    `head_alias=client0`) are in `round_traffic` only.
    """
    return get_algorithm(algorithm).exchange(options, sizes, labels, models)


def round_traffic(
    algorithm: str,
    options: Any,
    sizes: Sizes,
    labels: Sequence[int],
    selected: Iterable[int],
    models: Mapping[int, int] | None = None,
) -> tuple[int, int]:
    """Analytic (bytes_up, bytes_down) of one training round, all clients together.

    `labels[c]` = |S_c| of every client c; `models[c]` = models client c can download (`exchange`).
    """
    selected = set(selected)
    up = down = 0
    for client, count in enumerate(labels):
        ex = exchange(algorithm, options, sizes, count, (models or {}).get(client))
        if client in selected:
            up, down = up + ex.up, down + ex.down
        else:
            down += ex.down_other
    aliased = get_algorithm(algorithm).aliased_bytes(options, sizes)  # up when client 0 trains, down to it every round
    return up + (aliased if 0 in selected else 0), down + aliased


def resolved_options(algorithm: str, preset: str = "paper") -> Any:
    return resolve_options(algorithm, {"preset": preset})[0]


# --------------------------------------------------------------------------------- the tables

#: Section 2.3's figures as printed (their precision sets the tolerance of `matches_paper`).
PAPER_FIGURES = (
    ("model", "3431.79", "KB", "the whole model omega (FedAvg's transfer)"),
    ("feature_extractor", "3411.75", "KB", "the feature extractor phi (FedPer's / FedRep's transfer)"),
    ("head", "", "KB", "one head h"),
    ("psi", "5.01", "KB", "the boolean mask psi over the head, 1 byte per entry"),
    ("prototype", "2", "KB", "one prototype: d_f float32"),
    ("upload_100_labels", "200.39", "KB", "FedGMH upload with |S_m| = 100: 100 prototypes + 100 int32 labels"),
    ("download_100_heads", "2004", "KB", "FedGMH download with |S_m| = 100: 100 heads of THIS model"),
    ("storage_100_heads_pct", "58.54", "%", "extra storage of 100 heads (+ psi) relative to the model"),
    ("second_extractor_pct", "99.42", "%", "extra storage of a second feature extractor relative to the model"),
    ("prototype_forward_per_epoch", "0.5", "local epochs",
     "FedGMH's extra computation a round, one forward of phi over an epoch's samples (its prototypes), per local epoch "
     "(forward + backward of the model); FLOPs of convolutions and matrix products"),
)


@dataclass(frozen=True)
class Flops:
    """FLOPs per sample of the model a run on a dataset trains (convolutions and matrix products, as
    torch.utils.flop_counter counts them; the rest is a few percent at most)."""

    body_forward: int  # C_phi: the feature extractor's forward pass (a prototype's feature)
    train_step: int  # C_omega: forward and backward of the whole model with the cross-entropy loss

    @classmethod
    def for_dataset(cls, name: str, batch: int = 4) -> Flops:
        """Counted on the meta device (shapes only, no weights drawn)."""
        from torch.utils.flop_counter import FlopCounterMode

        model, info = meta_model(name)
        with torch.device("meta"):
            images = torch.empty(batch, info.channels, info.height, info.height)
            labels = torch.zeros(batch, dtype=torch.long)
        with FlopCounterMode(display=False) as forward:
            model.body(images)
        with FlopCounterMode(display=False) as step:
            torch.nn.functional.cross_entropy(model(images), labels).backward()
        return cls(forward.get_total_flops() // batch, step.get_total_flops() // batch)



def _figures(sizes: Sizes, flops: Flops) -> dict[str, float]:
    return {
        "prototype_forward_per_epoch": flops.body_forward / flops.train_step,
        "model": sizes.model / KB,
        "feature_extractor": sizes.body / KB,
        "head": sizes.head / KB,
        "psi": sizes.psi / KB,
        "prototype": sizes.prototype / KB,
        "upload_100_labels": 100 * (sizes.prototype + sizes.label) / KB,
        "download_100_heads": 100 * sizes.head / KB,
        "storage_100_heads_pct": 100 * (100 * sizes.head + sizes.psi) / sizes.model,
        "second_extractor_pct": 100 * sizes.body / sizes.model,
    }


def _matches(paper: str, value: float) -> bool | None:
    from fedgmh.report.claims import at_printed_precision

    return at_printed_precision(paper, value) if paper else None


def paper_figures(datasets: Sequence[str] = DEFAULT_DATASETS) -> pd.DataFrame:
    """Section 2.3's quantities computed for each dataset's model, next to the paper's figure."""
    rows = []
    for dataset in datasets:
        values = _figures(Sizes.for_dataset(dataset), Flops.for_dataset(dataset))
        for quantity, paper, unit, note in PAPER_FIGURES:
            rows.append({"kind": "model", "dataset": dataset, "algorithm": "", "preset": "", "quantity": quantity, "unit": unit,
                         "paper": float(paper) if paper else math.nan, "analytic": values[quantity], "measured": math.nan,
                         "matches_paper": _matches(paper, values[quantity]), "note": note})
    return pd.DataFrame(rows)


def check_labels(datasets: Sequence[str], labels: int | None) -> None:
    """A client holds 1 to all of each dataset's classes (|S_m| = `labels`; None: all of them)."""
    if labels is None:
        return
    for dataset in datasets:
        classes = get_info(dataset).num_classes
        if not 1 <= labels <= classes:
            raise UserError(f"--labels {labels}: a client of {dataset} holds 1 to {classes} labels (|S_m|)")


def algorithm_costs(datasets: Sequence[str] = DEFAULT_DATASETS, labels: int | None = None) -> pd.DataFrame:
    """Per algorithm (paper preset; official preset where it moves other bytes): KB per round that a
    participating client uploads / downloads and that a non-participating client downloads.

    Rows of algorithms whose traffic grows with |S_m| (FedGMH family) use |S_m| = `labels`
    (default: all the dataset's classes, the worst case); FedFomo rows assume M models downloaded
    (steady state).
    """
    check_labels(datasets, labels)
    rows = []
    for dataset in datasets:
        sizes = Sizes.for_dataset(dataset)
        count = sizes.num_classes if labels is None else labels
        for name in algorithm_names():
            seen = None
            for preset in ("paper", "official"):
                ex = exchange(name, resolved_options(name, preset), sizes, count)
                if ex == seen:
                    continue
                seen = ex
                for quantity, value in (("up_per_participant", ex.up), ("down_per_participant", ex.down), ("down_per_other_client", ex.down_other)):
                    rows.append({"kind": "algorithm", "dataset": dataset, "algorithm": name, "preset": preset, "quantity": quantity, "unit": "KB",
                                 "paper": math.nan, "analytic": value / KB, "measured": math.nan, "matches_paper": None,
                                 "note": f"|S_m| = {count}" if get_algorithm(name).traffic_per_label else ""})
    return pd.DataFrame(rows)


def _run_preset(run: dict) -> str:
    return (run.get("config", {}).get("overrides") or {}).get("preset", "paper")


def measured_costs(run_dirs: Sequence[Path | str]) -> pd.DataFrame:
    """Per finished run: mean bytes per training round (rounds of the metrics rows that trained),
    upload per participating client and download of the whole round, next to the analytic value.

    The analytic value uses the run's own options; FedGMH-family clients are taken to hold the
    partition's classes_per_client labels (nominal |S_m|; the note gives the measured mean number
    of labels per upload), FedFomo clients to download min(M, clients per round) models.
    """
    from fedgmh.config import build_options

    rows = []
    for run_dir in map(Path, run_dirs):
        try:
            run, metrics = load_record(run_dir)
        except UserError as err:
            raise UserError(f"{run_dir}: not a valid finished run ({err})") from None
        if not {"bytes_up", "bytes_down"} <= set(metrics.columns):
            raise UserError(f"{run_dir}: metrics.csv has no bytes_up / bytes_down (a run from before traffic was counted)")
        trained = metrics[metrics["train_loss"].notna()]
        if trained.empty:
            raise UserError(f"{run_dir}: no evaluated round with training (only the final evaluation round was recorded)")
        algorithm, dataset = run["algorithm"], run["dataset"]
        num_clients = int(run["num_clients"])
        per_round = max(1, int(num_clients * float(run["config"]["join_ratio"])))
        cls = get_algorithm(algorithm)
        options = build_options(card(algorithm).options, run.get("algorithm_options") or {})
        sizes = Sizes.for_dataset(dataset)
        labels = int((run.get("partition") or {}).get("classes_per_client") or sizes.num_classes)
        ex = exchange(algorithm, options, sizes, labels, per_round)  # at most the last round's uploads
        aliased = cls.aliased_bytes(options, sizes)
        up_round = per_round * ex.up + aliased * per_round / num_clients  # client 0 takes part in per_round / N rounds
        down_round = per_round * ex.down + (num_clients - per_round) * ex.down_other + aliased
        measured_up = float(trained["bytes_up"].mean()) / per_round
        note = f"{len(trained)} training rounds, {per_round} of {num_clients} clients per round"
        if cls.traffic_per_label:
            note += f"; nominal |S_m| = {labels}, measured mean {measured_up / (sizes.prototype + sizes.label):.2f} labels per upload"
        base = {"kind": "run", "dataset": dataset, "algorithm": algorithm, "preset": _run_preset(run), "unit": "KB",
                "paper": math.nan, "matches_paper": None, "run": str(run_dir), "note": note}
        rows.append({**base, "quantity": "up_per_participant", "analytic": ex.up / KB, "measured": measured_up / KB})
        rows.append({**base, "quantity": "down_per_round", "analytic": down_round / KB, "measured": float(trained["bytes_down"].mean()) / KB})
        rows.append({**base, "quantity": "up_per_round", "analytic": up_round / KB, "measured": float(trained["bytes_up"].mean()) / KB})
    return pd.DataFrame(rows)


def cost_table(datasets: Sequence[str] = DEFAULT_DATASETS, labels: int | None = None, runs: Sequence[Path | str] = ()) -> pd.DataFrame:
    """One long table: the model figures, the per-algorithm analytic costs (with the mean measured
    upload per participant of matching runs), and one block per run (analytic vs measured)."""
    algos = algorithm_costs(datasets, labels)  # first: it checks `labels`
    figures = paper_figures(datasets)
    measured = measured_costs(runs) if runs else pd.DataFrame()
    if not measured.empty:
        ups = measured[measured["quantity"] == "up_per_participant"].groupby(["dataset", "algorithm", "preset"])["measured"].mean()
        keys = list(zip(algos["dataset"], algos["algorithm"], algos["preset"]))
        is_up = algos["quantity"] == "up_per_participant"
        algos.loc[is_up, "measured"] = [ups.get(k, math.nan) for k, up in zip(keys, is_up) if up]
    table = pd.concat([figures, algos, measured], ignore_index=True)
    columns = ["kind", "dataset", "algorithm", "preset", "quantity", "unit", "paper", "analytic", "measured", "matches_paper", "note"]
    return table[columns + [c for c in table.columns if c not in columns]]
