"""The extended Dirichlet partition ExDir(C, alpha) and the partition file format.

`exdir` reproduces, sample for sample, the PFLlib generator that the FedGMH authors used
(`dataset/utils/dataset_utils.py`, seeded with `np.random.seed(1)`): one `RandomState(seed)`
makes every draw in the same order as the reference's global-RNG calls (see
../shared/spec/exdir.md). Unlike the reference, impossible parameters fail fast with a message and
every retry loop is bounded. Where the reference would divide by zero (every holder of a class
already full) we discard the draw and redraw; the reference's output is undefined there.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.model_selection import train_test_split

from fedgmh.errors import UserError
from fedgmh.io import atomic_path

MIN_CLIENT_SIZE = 10  # the reference's `min_require_size`
PARTITION_KEYS = ("train_indices", "train_offsets", "test_indices", "test_offsets")


class PartitionError(UserError):
    """The requested partition is impossible (or could not be drawn) for these parameters."""


@dataclass
class Partition:
    """Per-client index arrays into the pooled dataset (train split first, then test split)."""

    train: list[np.ndarray]
    test: list[np.ndarray]

    @property
    def num_clients(self) -> int:
        return len(self.train)

    def client_sizes(self) -> np.ndarray:
        return np.array([len(a) + len(b) for a, b in zip(self.train, self.test)])

    def digest(self) -> str:
        """sha256 of the client index arrays (train lists, then test lists, each with its lengths):
        two partitions have the same digest exactly when every client holds the same samples."""
        h = hashlib.sha256()
        for parts in (self.train, self.test):
            h.update(np.array([len(p) for p in parts], dtype="<i8").tobytes())
            for part in parts:
                h.update(np.ascontiguousarray(part, dtype="<i8").tobytes())
        return h.hexdigest()


def _check_parameters(labels: np.ndarray, num_clients: int, classes_per_client: int, alpha: float, train_ratio: float) -> int:
    if labels.ndim != 1 or len(labels) == 0:
        raise PartitionError("labels must be a non-empty 1-d array")
    classes = np.unique(labels)
    num_classes = len(classes)
    if not np.array_equal(classes, np.arange(num_classes)):
        raise PartitionError(f"labels must be 0..K-1 with every class present; got classes {classes.tolist()[:20]}")
    described = f"ExDir(C={classes_per_client}, alpha={alpha}) with N={num_clients} clients on {len(labels)} samples of {num_classes} classes"
    if num_clients < 2:
        raise PartitionError(f"{described}: need at least 2 clients")
    if not 1 <= classes_per_client <= num_classes:
        raise PartitionError(f"{described}: classes per client C must be between 1 and K={num_classes}")
    if not alpha > 0 or not np.isfinite(alpha):
        raise PartitionError(f"{described}: alpha must be a positive finite number")
    if not 0 < train_ratio < 1:
        raise PartitionError(f"{described}: train ratio must be strictly between 0 and 1")
    if num_clients * classes_per_client < num_classes:
        raise PartitionError(f"{described}: N*C < K, so some class could never be held by any client")
    if num_clients * MIN_CLIENT_SIZE > len(labels):
        raise PartitionError(f"{described}: every client needs at least {MIN_CLIENT_SIZE} samples; use fewer clients")
    return num_classes


def _assign_classes(rng: np.random.RandomState, num_clients: int, num_classes: int, c: int, max_attempts: int) -> list[list[int]]:
    """Level 1: each client draws C distinct classes until every class has enough holders."""
    need = max(c * num_clients // num_classes // 2, 1)
    for _ in range(max_attempts):
        holders: list[list[int]] = [[] for _ in range(num_classes)]
        for client in range(num_clients):
            for k in rng.choice(num_classes, c, replace=False):
                holders[k].append(client)
        if min(len(h) for h in holders) >= need:
            return holders
    raise PartitionError(
        f"could not give every class {need} holders in {max_attempts} draws "
        f"(N={num_clients}, C={c}, K={num_classes}); use more clients or a larger C"
    )


def _split_samples(
    rng: np.random.RandomState,
    labels: np.ndarray,
    holders: list[list[int]],
    alpha: float,
    num_clients: int,
    max_attempts: int,
) -> list[np.ndarray]:
    """Level 2: Dirichlet shares of every class over its (not yet full) holders."""
    cap = len(labels) / num_clients
    class_indices = [np.where(labels == k)[0] for k in range(len(holders))]
    for _ in range(max_attempts):
        pieces: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
        sizes = np.zeros(num_clients, dtype=np.int64)
        for k, holders_k in enumerate(holders):
            idx_k = class_indices[k].copy()
            rng.shuffle(idx_k)
            shares = rng.dirichlet(np.repeat(alpha, num_clients))
            receives = np.zeros(num_clients, dtype=bool)
            receives[holders_k] = True
            receives &= sizes < cap
            shares = shares * receives
            if shares.sum() == 0:
                # Every holder of class k is full: the reference divides by zero here and goes on with
                # garbage cut points. We discard this draw and redraw (deterministic, documented).
                sizes[:] = -1
                break
            shares = shares / shares.sum()
            cuts = (np.cumsum(shares) * len(idx_k)).astype(int)[:-1]
            if cuts[-1] != len(idx_k):
                cuts[holders_k[-1] : num_clients - 1] = len(idx_k)
            for client, piece in enumerate(np.split(idx_k, cuts)):
                if len(piece):
                    pieces[client].append(piece)
                    sizes[client] += len(piece)
        if sizes.min() >= MIN_CLIENT_SIZE:  # the reference reads its minimum after the last class
            return [np.concatenate(p) if p else np.zeros(0, dtype=np.int64) for p in pieces]
    raise PartitionError(
        f"no draw in {max_attempts} gave every client at least {MIN_CLIENT_SIZE} samples without overfilling "
        f"(N={num_clients}, alpha={alpha}); use fewer clients or a larger alpha"
    )


def exdir(
    labels: np.ndarray,
    num_clients: int,
    classes_per_client: int,
    alpha: float,
    train_ratio: float = 0.75,
    seed: int = 1,
    max_attempts: int = 1000,
) -> Partition:
    """Partition pooled `labels` over `num_clients` clients exactly like the PFLlib ExDir generator."""
    labels = np.asarray(labels).astype(np.int64, copy=False)
    num_classes = _check_parameters(labels, num_clients, classes_per_client, alpha, train_ratio)
    rng = np.random.RandomState(seed)
    holders = _assign_classes(rng, num_clients, num_classes, classes_per_client, max_attempts)
    samples = _split_samples(rng, labels, holders, alpha, num_clients, max_attempts)
    train, test = [], []
    for client_samples in samples:
        rng.shuffle(client_samples)
    for client_samples in samples:
        tr, te = train_test_split(client_samples, train_size=train_ratio, shuffle=True, random_state=rng)
        train.append(np.asarray(tr, dtype=np.int64))
        test.append(np.asarray(te, dtype=np.int64))
    return Partition(train=train, test=test)


def save_partition(path: Path, partition: Partition, meta: dict) -> None:
    """Write the partition file (format of ../shared/spec/exdir.md) atomically."""
    def flat(parts: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        offsets = np.concatenate([[0], np.cumsum([len(p) for p in parts])]).astype(np.int64)
        values = np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)
        return values, offsets

    train_indices, train_offsets = flat(partition.train)
    test_indices, test_offsets = flat(partition.test)
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as handle:
            np.savez(
                handle,
                train_indices=train_indices,
                train_offsets=train_offsets,
                test_indices=test_indices,
                test_offsets=test_offsets,
                meta=np.array(json.dumps(meta, sort_keys=True)),
            )


def load_partition(path: Path) -> tuple[Partition, dict]:
    """Read a partition file; a missing, corrupt or inconsistent file raises a UserError."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"partition file {path} not found; create it with `fedgmh partition ... --out {path}`")
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {key: npz[key] for key in PARTITION_KEYS}
            meta = json.loads(str(npz["meta"])) if "meta" in npz.files else {}
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as err:
        raise UserError(f"partition file {path} is unreadable or incomplete ({err}); delete it and run `fedgmh partition` again") from err

    def unflat(values: np.ndarray, offsets: np.ndarray) -> list[np.ndarray]:
        if offsets.ndim != 1 or offsets[0] != 0 or offsets[-1] != len(values) or np.any(np.diff(offsets) < 0):
            raise UserError(f"partition file {path} has inconsistent offsets; delete it and run `fedgmh partition` again")
        return [values[offsets[i] : offsets[i + 1]] for i in range(len(offsets) - 1)]

    train = unflat(arrays["train_indices"], arrays["train_offsets"])
    test = unflat(arrays["test_indices"], arrays["test_offsets"])
    if len(train) != len(test):
        raise UserError(f"partition file {path}: train and test describe different numbers of clients")
    return Partition(train=train, test=test), meta


def client_statistics(partition: Partition, labels: np.ndarray, num_classes: int) -> pd.DataFrame:
    """One row per client: split sizes, number of classes, and samples per class (train + test)."""
    labels = np.asarray(labels)
    rows = []
    for client, (tr, te) in enumerate(zip(partition.train, partition.test)):
        counts = np.bincount(labels[np.concatenate([tr, te])], minlength=num_classes)
        row = {"client": client, "num_train": len(tr), "num_test": len(te), "num_samples": len(tr) + len(te)}
        row["num_classes"] = int((counts > 0).sum())
        row.update({f"class_{k}": int(c) for k, c in enumerate(counts)})
        rows.append(row)
    return pd.DataFrame(rows)


def plot_heatmap(stats: pd.DataFrame, path: Path, title: str = "") -> None:
    """Clients x classes heat-map of sample counts (log colour scale), written atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns
    from matplotlib.colors import LogNorm

    counts = stats[[c for c in stats.columns if c.startswith("class_")]].to_numpy()
    counts = np.where(counts > 0, counts, np.nan)
    num_clients, num_classes = counts.shape
    fig, ax = plt.subplots(figsize=(min(3 + 0.12 * num_classes, 16), min(2 + 0.08 * num_clients, 14)))
    sns.heatmap(counts, ax=ax, norm=LogNorm(), cmap="viridis", cbar_kws={"label": "samples (log scale)"},
                xticklabels=max(1, num_classes // 20), yticklabels=max(1, num_clients // 20))
    ax.set_xlabel("class")
    ax.set_ylabel("client")
    ax.set_title(title)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format=Path(path).suffix.lstrip(".") or "pdf")
    plt.close(fig)
