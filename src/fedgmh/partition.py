"""The extended Dirichlet partition ExDir(C, alpha) and the partition file format.

`exdir` reproduces, sample for sample, the PFLlib generator that the FedGMH authors used
(`dataset/utils/dataset_utils.py`, seeded with `np.random.seed(1)`): one `RandomState(seed)`
makes every draw in the same order as the reference's global-RNG calls. Unlike the reference, impossible parameters fail fast with a message and
every retry loop is bounded. Where the reference would divide by zero (every holder of a class
already full) we discard the draw and redraw; the reference's output is undefined there. Where
alpha is so small that a Dirichlet draw underflows (every gamma variate is 0, so the shares are
0/0 = NaN; measured: with 10 clients half of all draws at alpha = 1e-4 and 1 in 200 at 1e-3, with
100 clients half at 1e-5) the reference's output is undefined too, and we stop with a
PartitionError that asks for a larger alpha (nothing is written).

Every partition file is validated on load (`load_partition`, `validate_partition`): integer
index arrays, consistent offsets, no sample twice (so no test sample in any client's training
data), every index within the dataset, every client with training and test samples, and a JSON
meta when there is one.
"""

from __future__ import annotations

import hashlib
import json
import math
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from fedgmh.errors import UserError
from fedgmh.io import FIGURE_NO_DATE, atomic_path

if TYPE_CHECKING:  # pandas is imported where used: the workflow's plan imports this module without it
    import pandas as pd

MIN_CLIENT_SIZE = 10  # the reference's `min_require_size`
#: the largest alpha: far beyond where the shares are equal to double precision (1e6 is near-equal already), and
#: far below where the Dirichlet draw overflows (N gamma variates of mean alpha summing past 1.8e308: 0/inf shares)
MAX_ALPHA = 1e100
MAX_ATTEMPTS = 1000  # draws of each level before the parameters are declared undrawable
PARTITION_KEYS = ("train_indices", "train_offsets", "test_indices", "test_offsets")
#: level 1 of ExDir, which clients hold which classes: `random` (each client draws C classes, the
#: reference's) or `chain` (client i holds classes i, i+1, ..., i+C-1 mod K: neighbours share C-1)
ASSIGNMENTS = ("random", "chain")
DATASET_KEYS = ("x_train", "y_train", "x_test", "y_test")  # the arrays of a prepared dataset (data.py)
MAX_SEED = 2**32 - 1  # numpy's RandomState takes seeds 0..2**32-1


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


def _check_parameters(labels: np.ndarray, num_clients: int, classes_per_client: int, alpha: float, train_ratio: float,
                      assignment: str) -> int:
    if labels.ndim != 1 or len(labels) == 0:
        raise PartitionError("labels must be a non-empty 1-d array")
    classes = np.unique(labels)
    num_classes = len(classes)
    if not np.array_equal(classes, np.arange(num_classes)):
        raise PartitionError(f"labels must be 0..K-1 with every class present; got classes {classes.tolist()[:20]}")
    check_parameters(len(labels), num_classes, num_clients, classes_per_client, alpha, train_ratio, assignment)
    return num_classes


def check_parameters(num_samples: int, num_classes: int, num_clients: int, classes_per_client: int, alpha: float,
                     train_ratio: float, assignment: str = "random", *, named: dict[str, str] | None = None,
                     dataset: str = "") -> None:
    """Raise PartitionError for ExDir parameters no draw can satisfy, whatever the labels: the one rule of
    `exdir`, `fedgmh partition`'s argument check and the workflow's plan (which knows the datasets' sizes,
    not their labels). `named` says how the message names each parameter with its value (the caller's
    option or config key; keys: clients, classes_per_client, alpha, train_ratio, assignment); `dataset`
    names the data."""
    n, c, k = num_clients, classes_per_client, num_classes
    named = {"clients": f"N={n}", "classes_per_client": f"C={c}", "alpha": f"alpha={alpha:g}", "train_ratio": f"train ratio {train_ratio}",
             "assignment": f"assignment {assignment}", **(named or {})}
    of = f" of {dataset}" if dataset else ""
    if n < 2:
        raise PartitionError(f"{named['clients']}: a federation needs at least 2 clients")
    if not 1 <= c <= k:
        raise PartitionError(f"{named['classes_per_client']}: must be between 1 and K={k}, the number of classes{of}")
    if not 0 < alpha <= MAX_ALPHA:
        raise PartitionError(f"{named['alpha']}: must be in (0, {MAX_ALPHA:g}] (1e6 already gives near-equal shares)")
    if not 0 < train_ratio < 1:
        raise PartitionError(f"{named['train_ratio']}: must be strictly between 0 and 1")
    if assignment not in ASSIGNMENTS:
        raise PartitionError(f"assignment {assignment!r} is not one of {', '.join(ASSIGNMENTS)}")
    if assignment == "chain" and n + c - 1 < k:
        raise PartitionError(
            f"{named['assignment']} with {named['clients']} and {named['classes_per_client']} covers only {n + c - 1} of the "
            f"{k} classes{of} (clients + C - 1 must reach the number of classes); use more clients or a larger C"
        )
    if n * c < k:
        raise PartitionError(
            f"{named['clients']} and {named['classes_per_client']} give N x C = {n * c} < the {k} classes{of}: some class "
            "would belong to no client; use more clients or a larger C"
        )
    if n > max_clients(num_samples):
        raise PartitionError(
            f"{named['clients']}: the {num_samples} samples{of} give every client at least {MIN_CLIENT_SIZE}, so at most "
            f"{max_clients(num_samples)} clients; use fewer clients"
        )


def max_clients(num_samples: int) -> int:
    """The most clients `num_samples` samples can make: every client gets at least MIN_CLIENT_SIZE."""
    return num_samples // MIN_CLIENT_SIZE


def check_seed(seed: int) -> None:
    """Partition seeds are integers 0..2**32-1 (what numpy's RandomState accepts)."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed <= MAX_SEED:
        raise PartitionError(f"partition seed {seed!r} is out of range: use an integer from 0 to {MAX_SEED} (2**32 - 1)")


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


def class_holders(rng: np.random.RandomState, num_clients: int, num_classes: int, classes_per_client: int,
                  assignment: str = "random", max_attempts: int = MAX_ATTEMPTS) -> list[list[int]]:
    """Level 1 of ExDir, the clients holding each class: `_assign_classes` draws them with `rng` (the first
    draws of a partition's generator, so the workflow's plan replays them from the seed alone) or
    `chain_holders` deals them out (parameters checked by `check_parameters`); PartitionError when no draw gives
    every class its holders."""
    if assignment == "chain":
        return chain_holders(num_clients, num_classes, classes_per_client)
    return _assign_classes(rng, num_clients, num_classes, classes_per_client, max_attempts)


def chain_holders(num_clients: int, num_classes: int, c: int) -> list[list[int]]:
    """Level 1 of the chain assignment (pFedLA's Fig. 6): client i holds classes (i, i+1, ..., i+C-1)
    mod K, so neighbouring clients share C-1 classes. Holder lists in increasing client order;
    no randomness. `check_parameters` makes sure every class has a holder (N + C - 1 >= K)."""
    holders: list[list[int]] = [[] for _ in range(num_classes)]
    for client in range(num_clients):
        for k in sorted({(client + j) % num_classes for j in range(c)}):
            holders[k].append(client)
    return holders


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
            if not np.all(np.isfinite(shares)):
                raise PartitionError(
                    f"ExDir alpha={alpha} is too small to draw (N={num_clients}): the Dirichlet shares of class {k} "
                    "underflowed to 0/0 (NaN) in double precision; use a larger alpha (0.01 or more)"
                )
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
    max_attempts: int = MAX_ATTEMPTS,
    assignment: str = "random",
) -> Partition:
    """Partition pooled `labels` over `num_clients` clients exactly like the PFLlib ExDir generator.

    `assignment` chooses level 1 (which clients hold which classes): `random` is the generator's
    (each client draws C classes); `chain` gives client i the classes i..i+C-1 mod K (`chain_holders`)
    and draws nothing there. Level 2 (Dirichlet(alpha) shares of each class over its holders, the
    balance cap) and the train/test split are the same for both: alpha = 1e6 gives near-equal shares."""
    from sklearn.model_selection import train_test_split  # here: the workflow's plan imports this module to check configs

    labels = np.asarray(labels).astype(np.int64, copy=False)
    num_classes = _check_parameters(labels, num_clients, classes_per_client, alpha, train_ratio, assignment)
    check_seed(seed)
    rng = np.random.RandomState(seed)
    holders = class_holders(rng, num_clients, num_classes, classes_per_client, assignment, max_attempts)
    samples = _split_samples(rng, labels, holders, alpha, num_clients, max_attempts)
    train, test = [], []
    for client_samples in samples:
        rng.shuffle(client_samples)
    for client, client_samples in enumerate(samples):
        try:
            tr, te = train_test_split(client_samples, train_size=train_ratio, shuffle=True, random_state=rng)
        except ValueError as err:  # sklearn: floor(train_ratio * n) == 0, an empty train part
            raise PartitionError(
                f"train ratio {train_ratio} leaves client {client} ({len(client_samples)} samples) with an empty "
                f"train set; use a train ratio of at least {1 / MIN_CLIENT_SIZE} (every client has {MIN_CLIENT_SIZE} samples or more)"
            ) from err
        train.append(np.asarray(tr, dtype=np.int64))
        test.append(np.asarray(te, dtype=np.int64))
    return Partition(train=train, test=test)


def save_partition(path: Path, partition: Partition, meta: dict) -> None:
    """Write the partition file atomically: an .npz of int64 `train_indices` / `train_offsets`,
    `test_indices` / `test_offsets` (client c's samples: indices[offsets[c]:offsets[c + 1]]) and a
    JSON `meta` string."""
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


def _redo(path: Path) -> str:
    return f"re-create it with `fedgmh partition ... --out {path}`"


def partition_file_kind(path: Path) -> str:
    """What `path` holds, from its zip directory only (cheap): "missing", "folder", "other" (not a
    regular file), "not-npz" (not a zip archive, e.g. a text file), "unreadable" (a zip whose
    directory cannot be read), "dataset" (a prepared dataset of `fedgmh download`), "partition"
    (has the four partition arrays), or "npz" (another .npz)."""
    path = Path(path)
    if path.is_dir():
        return "folder"
    if not path.exists():
        return "missing"
    if not path.is_file():
        return "other"
    try:
        with open(path, "rb") as handle:
            magic = handle.read(4)
        if magic[:2] != b"PK":
            return "not-npz"
        with zipfile.ZipFile(path) as archive:
            names = {name[: -len(".npy")] for name in archive.namelist() if name.endswith(".npy")}
    except (OSError, zipfile.BadZipFile, ValueError, EOFError):
        return "unreadable"
    if set(DATASET_KEYS) <= names:
        return "dataset"
    if set(PARTITION_KEYS) <= names:
        return "partition"
    return "npz"


def check_partition_target(path: Path) -> None:
    """Refuse to write a partition over anything but a partition file: an existing file at `path`
    may be replaced only when it is a partition file (the four arrays of `save_partition`)."""
    path = Path(path)
    kind = partition_file_kind(path)
    if kind in ("missing", "partition"):
        return
    if kind == "folder":
        raise UserError(f"--out {path} is a folder; give the partition file's name (e.g. {path / 'partition.npz'})")
    if kind == "dataset":
        raise UserError(f"--out {path} is a prepared dataset (made by `fedgmh download`); refusing to overwrite it: choose another --out")
    raise UserError(f"--out {path} exists and is not a partition file; refusing to overwrite it: choose another --out or move that file away")


def load_partition(path: Path, num_samples: int | None = None) -> tuple[Partition, dict]:
    """Read and validate a partition file; anything missing, unreadable or invalid raises a one-line UserError.

    `num_samples` (the dataset's size), when given, bounds the indices and must equal the meta's
    `num_samples`; without it the meta's `num_samples` (when present) bounds them. See
    `validate_partition` for what else is checked.
    """
    path = Path(path)
    kind = partition_file_kind(path)
    create = f"create it with `fedgmh partition ... --out {path}`"
    if kind == "missing":
        raise UserError(f"partition file {path} not found; {create}")
    if kind == "folder":
        raise UserError(f"partition file {path} is a folder, not a file; pass the .npz file written by `fedgmh partition --out`")
    if kind == "dataset":
        raise UserError(
            f"{path} is a prepared dataset (made by `fedgmh download`), not a partition file; "
            "pass the .npz file written by `fedgmh partition --out` (keep the dataset)"
        )
    if kind in ("other", "not-npz"):
        raise UserError(f"{path} is not a partition file (not an .npz archive); pass the .npz file written by `fedgmh partition --out`")
    if kind == "npz":
        raise UserError(
            f"{path} is not a partition file (it lacks the arrays {', '.join(PARTITION_KEYS)}); "
            "pass the .npz file written by `fedgmh partition --out`"
        )
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {key: npz[key] for key in PARTITION_KEYS}
            raw_meta = npz["meta"] if "meta" in npz.files else None
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, zlib.error) as err:
        reason = "it holds an object array" if "allow_pickle" in str(err) else f"{type(err).__name__}: {err}"
        if kind == "partition":  # our arrays are listed: `fedgmh partition --out` may replace it
            advice = _redo(path)
        else:
            advice = f"if it is a damaged partition file, delete it and run `fedgmh partition ... --out {path}` again"
        raise UserError(f"partition file {path} is unreadable or damaged ({reason}); {advice}") from err

    meta = _parse_meta(path, raw_meta)
    parts = {}
    for split in ("train", "test"):
        values = _index_array(path, f"{split}_indices", arrays[f"{split}_indices"])
        offsets = _index_array(path, f"{split}_offsets", arrays[f"{split}_offsets"])
        if len(offsets) == 0 or offsets[0] != 0 or offsets[-1] != len(values) or np.any(np.diff(offsets) < 0):
            raise UserError(
                f"partition file {path} has inconsistent {split}_offsets (they must rise from 0 to {len(values)}, "
                f"the length of {split}_indices); {_redo(path)}"
            )
        parts[split] = [values[offsets[i] : offsets[i + 1]] for i in range(len(offsets) - 1)]
    if len(parts["train"]) != len(parts["test"]):
        raise UserError(f"partition file {path}: train and test describe different numbers of clients; {_redo(path)}")
    if "num_clients" in meta and meta["num_clients"] != len(parts["train"]):
        raise UserError(
            f"partition file {path} has {len(parts['train'])} clients but its meta says {meta['num_clients']}; {_redo(path)}"
        )
    if num_samples is not None and "num_samples" in meta and meta["num_samples"] != num_samples:
        raise UserError(
            f"partition file {path} was made for a dataset of {meta['num_samples']} samples, not {num_samples}; "
            "re-run `fedgmh partition` on this dataset"
        )
    partition = Partition(train=parts["train"], test=parts["test"])
    validate_partition(partition, num_samples if num_samples is not None else meta.get("num_samples"), name=f"partition file {path}")
    return partition, meta


def _parse_meta(path: Path, raw: np.ndarray | None) -> dict:
    """The meta: optional (exdir.md makes it free-form), but when present a JSON object whose known
    fields have the types `fedgmh partition` writes."""
    if raw is None:
        return {}
    try:
        if raw.dtype.kind not in "US" or raw.ndim != 0:
            raise ValueError(f"a {raw.dtype} array of shape {raw.shape}, not a JSON string")
        meta = json.loads(str(raw.astype(str)), parse_constant=_not_finite, parse_float=_finite)
        if not isinstance(meta, dict):
            raise ValueError(f"a JSON {type(meta).__name__}, not an object")
    except ValueError as err:
        raise UserError(f"partition file {path} has an invalid meta ({err}); {_redo(path)}") from None
    for key in ("num_samples", "num_clients"):
        value = meta.get(key)
        if key in meta and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise UserError(f"partition file {path} has an invalid meta ({key}={value!r} is not a positive integer); {_redo(path)}")
    for key in ("dataset", "dataset_fingerprint", "scheme"):
        if key in meta and not isinstance(meta[key], str):
            raise UserError(f"partition file {path} has an invalid meta ({key}={meta[key]!r} is not a string); {_redo(path)}")
    return meta


def _not_finite(constant: str) -> None:
    """json's NaN and Infinity: a meta's numbers go into every run record, whose numbers are finite."""
    raise ValueError(f"it holds {constant}, not a finite number")


def _finite(text: str) -> float:
    """A JSON number as a float; one too large for a float (1e999) is refused as Infinity is."""
    value = float(text)
    if not math.isfinite(value):
        _not_finite(text)
    return value


def _index_array(path: Path, key: str, values: np.ndarray) -> np.ndarray:
    """A 1-d integer array as int64: float (never truncated), bool or out-of-int64 values are rejected."""
    if values.ndim != 1 or not np.issubdtype(values.dtype, np.integer):
        raise UserError(
            f"partition file {path}: {key} is a {values.dtype} array of shape {values.shape}, "
            f"expected 1-d integers; {_redo(path)}"
        )
    if values.dtype == np.uint64 and len(values) and values.max() > np.iinfo(np.int64).max:
        raise UserError(f"partition file {path}: {key} holds values beyond the int64 range; {_redo(path)}")
    return values.astype(np.int64)


def validate_partition(partition: Partition, num_samples: int | None = None, *, name: str = "partition") -> None:
    """Raise a one-line UserError unless `partition` is one ExDir could have drawn (`name` starts the message):

    at least 2 clients, the same number in train and test; every index array 1-d integer; every
    client with at least one training and one test sample; indices >= 0 and, when `num_samples`
    (the dataset's size) is given, < num_samples; no sample twice anywhere (so no duplicates and no
    test sample in any client's training data, a contaminated test set).
    """
    redo = "re-create it with `fedgmh partition`"
    if len(partition.train) != len(partition.test):
        raise UserError(f"{name}: train and test describe different numbers of clients; {redo}")
    if len(partition.train) < 2:
        raise UserError(f"{name} has {len(partition.train)} client(s), at least 2 are needed; {redo}")
    for split, parts in (("train", partition.train), ("test", partition.test)):
        for client, part in enumerate(parts):
            part = np.asarray(part)
            if part.ndim != 1 or not np.issubdtype(part.dtype, np.integer):
                raise UserError(f"{name}: client {client}'s {split} indices are {part.dtype} of shape {part.shape}, not 1-d integers; {redo}")
            if len(part) == 0:
                raise UserError(f"{name}: client {client} has no {split} samples; {redo}")
    every = np.concatenate([np.asarray(p, dtype=np.int64) for p in partition.train + partition.test])
    low, high = int(every.min()), int(every.max())
    if low < 0:
        raise UserError(f"{name} has a negative sample index ({low}); {redo}")
    if num_samples is not None and high >= num_samples:
        raise UserError(f"{name} indexes sample {high}, beyond the dataset's {num_samples} samples (0..{num_samples - 1}); {redo}")
    order = np.argsort(every, kind="stable")
    ordered = every[order]
    repeated = np.flatnonzero(ordered[1:] == ordered[:-1])
    if len(repeated) == 0:
        return
    sizes = [len(p) for p in partition.train + partition.test]
    owner_client = np.concatenate([np.full(n, c % len(partition.train)) for c, n in enumerate(sizes)])
    is_test = np.concatenate([np.full(n, c >= len(partition.train)) for c, n in enumerate(sizes)])
    first, second = order[repeated], order[repeated + 1]
    crossing = np.flatnonzero(is_test[first] != is_test[second])
    count = len(np.unique(ordered[repeated]))
    if len(crossing):  # report a test sample that is also training data first: the worst case
        a, b = first[crossing[0]], second[crossing[0]]
        train_at, test_at = (a, b) if is_test[b] else (b, a)
        raise UserError(
            f"{name}: sample {every[a]} is in client {owner_client[test_at]}'s test set and in client "
            f"{owner_client[train_at]}'s training data (a contaminated test set; {count} sample(s) appear twice); {redo}"
        )
    a, b = first[0], second[0]
    split = "test sets" if is_test[a] else "training data"
    raise UserError(
        f"{name}: sample {every[a]} appears twice in the {split} (clients {owner_client[a]} and {owner_client[b]}; "
        f"{count} sample(s) appear twice); {redo}"
    )


def client_statistics(partition: Partition, labels: np.ndarray, num_classes: int) -> pd.DataFrame:
    """One row per client: split sizes, number of classes, samples per class (train + test), and the
    label-prior facts of its test split (`priors.prior_only`): `prior_only_correct` = test samples of
    its most frequent train label, `unreachable_test` = test samples of labels it never trains on."""
    from fedgmh.priors import prior_only

    labels = np.asarray(labels)
    rows = []
    for client, (tr, te) in enumerate(zip(partition.train, partition.test)):
        counts = np.bincount(labels[np.concatenate([tr, te])], minlength=num_classes)
        row = {"client": client, "num_train": len(tr), "num_test": len(te), "num_samples": len(tr) + len(te)}
        row["prior_only_correct"], row["unreachable_test"] = prior_only(labels[tr], labels[te], num_classes)
        row["num_classes"] = int((counts > 0).sum())
        row.update({f"class_{k}": int(c) for k, c in enumerate(counts)})
        rows.append(row)
    import pandas as pd

    return pd.DataFrame(rows)


LOG_SPAN = 10  # a heat-map's colour scale is logarithmic where the counts span more than this factor


def plot_heatmap(stats: pd.DataFrame, path: Path, title: str = "") -> None:
    """Classes x clients heat-map of sample counts, written atomically as PDF or PNG. The colour scale
    starts at 0, linear, unless the counts span more than LOG_SPAN times (then log): a log scale over
    43-46 samples would paint a 7 % difference as the whole palette.

    Clients run along the x axis (there are usually more clients than classes), so the figure is
    wide rather than tall: about 10 x 3 inches for 100 clients and 10 classes, 10 x 7 for 100 classes."""
    figure_format = Path(path).suffix.lower().lstrip(".")
    if figure_format not in ("pdf", "png"):
        raise UserError(f"heat-map {path}: unsupported figure type; give a name ending in .pdf or .png")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns
    from matplotlib.colors import LogNorm

    counts = stats[[c for c in stats.columns if c.startswith("class_")]].to_numpy().T
    counts = np.where(counts > 0, counts, np.nan)
    num_classes, num_clients = counts.shape
    width = min(max(4 + 0.06 * num_clients, 6), 14)
    height = min(max(1.2 + 0.06 * num_classes, 2.6), 9)
    fig, ax = plt.subplots(figsize=(width, height))
    low, high = np.nanmin(counts), np.nanmax(counts)
    log = high > LOG_SPAN * low
    scale = {"norm": LogNorm()} if log else {"vmin": 0, "vmax": high}
    sns.heatmap(counts, ax=ax, cmap="viridis", cbar_kws={"label": "samples (log scale)" if log else "samples", "pad": 0.01}, **scale,
                xticklabels=max(1, num_clients // 20), yticklabels=max(1, num_classes // 10))
    ax.set_xlabel("client")
    ax.set_ylabel("class")
    ax.tick_params(axis="y", rotation=0)
    ax.set_title(title)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format=figure_format, dpi=150, metadata=FIGURE_NO_DATE.get(figure_format))
    plt.close(fig)
