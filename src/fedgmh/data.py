"""Datasets: fetch once into one prepared file `ROOT/NAME.npz`, then load it as tensors.

Sources: torchvision (network), a local mirror laid out like shared/data (torchvision's own
archives, or a `cifar10.npz` / `cifar100.npz` in HWC layout), or the embedded `digits`
(scikit-learn's bundled 8x8 digits upscaled to 28x28, no network at all).

The prepared file holds uint8 `x_train`/`x_test` (N x C x H x W), int64 `y_train`/`y_test` and a
JSON string `meta` (source, archive names + md5, and a fingerprint of the pooled data).
Raw archives and torchvision's extraction live in the staging folder `ROOT/raw/NAME/`.

Every load (`load_dataset`, `load_labels`) and `download`'s "already prepared" check read every
array of the prepared file (zip CRC-32 checked), check dtypes, shapes and labels, and recompute the
fingerprint (sha256 of the arrays; measured for MNIST on 2 busy cores: 0.1 s, the whole verified
read 0.2 s): a damaged or edited file is an error on load, and `download` prepares it again. The
mirror's archives are checked against torchvision's md5 before use. torch is imported only where
tensors are made (`load_dataset`, the digits' resize), so `fedgmh partition` starts without it.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import os
import shutil
import tarfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from fedgmh.datasets import DATASETS, DatasetInfo, get_info  # noqa: F401  (DATASETS: re-exported)
from fedgmh.errors import UserError
from fedgmh.io import atomic_path

if TYPE_CHECKING:
    import torch


# torchvision class, where it expects the archives under its root (= the mirror's layout), split sizes
_TORCHVISION = {
    "mnist": ("MNIST", "MNIST/raw", 60000, 10000),
    "fashion_mnist": ("FashionMNIST", "FashionMNIST/raw", 60000, 10000),
    "cifar10": ("CIFAR10", "", 50000, 10000),
    "cifar100": ("CIFAR100", "", 50000, 10000),
}
_KEYS = ("x_train", "y_train", "x_test", "y_test")
_READ_ERRORS = (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error)
_log = logging.getLogger(__name__)


@dataclass
class LoadedDataset:
    name: str
    images: torch.Tensor  # float32 N x C x H x W, train split then test split, in [-1, 1]
    labels: torch.Tensor  # int64 N
    num_classes: int
    num_train: int
    fingerprint: str


@dataclass
class LabelsInfo:
    labels: np.ndarray  # int64, pooled order (train then test)
    num_classes: int
    fingerprint: str


def prepared_path(name: str, root: Path) -> Path:
    return Path(root) / f"{name}.npz"


def fingerprint(x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray) -> str:
    """sha256 hex of the pooled labels (int64 little-endian) then the pooled uint8 images (NCHW)."""
    h = hashlib.sha256()
    for labels in (y_train, y_test):
        h.update(np.ascontiguousarray(labels, dtype="<i8").data)
    for images in (x_train, x_test):
        h.update(np.ascontiguousarray(images, dtype=np.uint8).data)
    return h.hexdigest()


def download(name: str, root: Path, mirror: Path | None = None) -> Path:
    """Write `root/<name>.npz` (unless a verified one exists) and return its path; `digits` ignores `mirror`.

    An existing file that fails verification (unreadable, a damaged zip member, arrays that do not
    match the stored fingerprint) is prepared again. Errors of the operating system (a read-only or
    non-folder root, an unreadable mirror) are raised as one-line UserErrors.
    """
    info = get_info(name)
    root = Path(root)
    out = prepared_path(name, root)
    if root.exists() and not root.is_dir():
        raise UserError(f"--root {root} is a file, not a folder; choose a folder for the prepared datasets")
    if mirror is not None and name != "digits" and Path(mirror).exists() and not Path(mirror).is_dir():
        raise UserError(f"mirror {mirror} is a file, not a folder; pass a folder laid out like shared/data")
    problem = prepared_problem(name, root)
    if problem is None:
        return out
    if out.exists() or out.is_symlink():
        _log.warning("%s failed verification (%s); preparing it again", out, problem)
    staging = root / "raw" / name
    try:
        if name == "digits":
            arrays, meta = _digits()
        elif mirror is not None:
            arrays, meta = _from_mirror(info, Path(mirror), staging)
        else:
            arrays = _load_torchvision(info, staging, origin=None)
            archives = _archives(_torchvision_class(name))
            meta = {"source": "torchvision", "archives": [{"file": f, "md5": m} for f, m in archives]}
        _check_arrays(info, arrays, meta.get("mirror", meta["source"]), f"delete {staging} and run again")
        meta = {"dataset": name, **meta, "fingerprint": fingerprint(*arrays)}
        _save_atomic(out, arrays, meta)
    except OSError as err:
        if err.errno is None:  # not an error of the operating system: let it through
            raise
        raise UserError(_os_error_message(err, root, mirror)) from err
    return out


def _os_error_message(err: OSError, root: Path, mirror: Path | None) -> str:
    """One line for an operating-system error during `download`: which file, why, what to do."""
    what = err.filename if err.filename is not None else "a file"
    why = err.strerror or type(err).__name__
    if mirror is not None and err.filename is not None and _is_within(Path(err.filename), Path(mirror)):
        return f"cannot read {what} ({why}); make the mirror's files readable or pass another --mirror"
    return f"cannot write {what} ({why}); --root {root} must be a writable folder: choose another --root"


def _is_within(path: Path, folder: Path) -> bool:
    try:
        path.absolute().relative_to(folder.absolute())
    except ValueError:
        return False
    return True


def prepared_problem(name: str, root: Path) -> str | None:
    """Why `root/<name>.npz` is not a verified prepared dataset (absent, unreadable, damaged, edited), or None."""
    path = prepared_path(name, root)
    if not path.is_file():
        return "absent" if not path.exists() else "not a file"
    try:
        _read_verified(name, root, _KEYS)
    except UserError as err:
        return str(err)
    return None


def _save_atomic(out: Path, arrays: tuple[np.ndarray, ...], meta: dict) -> None:
    """Write the prepared file through `atomic_path`: `out` is complete or absent."""
    try:
        with atomic_path(out) as tmp, open(tmp, "wb") as f:
            np.savez(f, **dict(zip(_KEYS, arrays)), meta=np.array(json.dumps(meta, sort_keys=True)))
    except PermissionError as err:
        raise UserError(f"cannot write into {out.parent} ({err.strerror or err}); choose another --root") from err


def _check_arrays(info: DatasetInfo, arrays: tuple[np.ndarray, ...], origin: str, hint: str) -> None:
    """uint8 N x C x H x W images and int64 labels in 0..num_classes-1, for both splits."""
    shape = (info.channels, info.height, info.width)
    for split, x, y in (("train", arrays[0], arrays[1]), ("test", arrays[2], arrays[3])):
        if x.dtype != np.uint8 or x.ndim != 4 or x.shape[1:] != shape:
            expected = f"uint8 (N, {', '.join(map(str, shape))})"
            raise UserError(f"{origin}: x_{split} is {x.dtype} {x.shape}, expected {expected}; {hint}")
        if y.dtype != np.int64 or y.shape != (len(x),):
            raise UserError(f"{origin}: y_{split} is {y.dtype} {y.shape}, expected {len(x)} int64 labels; {hint}")
        if len(y) and (y.min() < 0 or y.max() >= info.num_classes):
            found, expected = f"[{y.min()}, {y.max()}]", f"0..{info.num_classes - 1}"
            raise UserError(f"{origin}: y_{split} has labels in {found}, expected {expected}; {hint}")


def _digits() -> tuple[tuple[np.ndarray, ...], dict]:
    import torch
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = torch.from_numpy(digits.images.astype(np.float64) * (255.0 / 16.0)).unsqueeze(1)
    x = torch.nn.functional.interpolate(x, size=(28, 28), mode="bilinear", align_corners=False)
    x = x.round().clamp(0, 255).to(torch.uint8).numpy()
    y = digits.target.astype(np.int64)
    empty = (np.zeros((0, 1, 28, 28), np.uint8), np.zeros(0, np.int64))
    meta = {"source": "embedded", "archives": [], "recipe": "sklearn load_digits x255/16, bilinear resize to 28x28"}
    return (np.ascontiguousarray(x), y, *empty), meta


def _torchvision_class(name: str) -> type:
    import torchvision.datasets

    return getattr(torchvision.datasets, _TORCHVISION[name][0])


def _archives(cls: type) -> list[tuple[str, str]]:
    """(file name, md5) of the archives torchvision checks: MNIST-like classes list several."""
    if hasattr(cls, "resources"):
        return [(os.path.basename(url), md5) for url, md5 in cls.resources]
    return [(cls.filename, cls.tgz_md5)]


def _load_torchvision(info: DatasetInfo, staging: Path, origin: Path | None) -> tuple[np.ndarray, ...]:
    """Both splits through torchvision (download=True), in torchvision's order, as uint8 NCHW."""
    cls = _torchvision_class(info.name)
    arrays: list[np.ndarray] = []
    for train in (True, False):
        try:
            ds = cls(root=str(staging), train=train, download=True)
        except (RuntimeError, OSError, EOFError, zlib.error, tarfile.TarError) as err:
            detail = " ".join(str(err).split())[:300] or type(err).__name__
            if origin is None:
                raise UserError(
                    f"downloading {info.name} with torchvision into {staging} failed. Without internet, give an offline "
                    f"copy: `fedgmh download {info.name} --root {staging.parent.parent} --mirror DIR`, DIR a folder laid "
                    f"out like shared/data{_mirror_found()} (in the workflow: --config mirror=DIR), or use the embedded "
                    f"dataset `digits`. torchvision said: {detail}"
                ) from err
            raise UserError(
                f"torchvision could not extract the archives copied from {origin} ({detail}); delete {staging} and run again"
            ) from err
        x = np.asarray(ds.data)
        x = x[:, None] if x.ndim == 3 else x.transpose(0, 3, 1, 2)  # MNIST: N x H x W; CIFAR: N x H x W x C
        arrays += [np.ascontiguousarray(x, dtype=np.uint8), np.asarray(ds.targets, dtype=np.int64)]
    sizes = (len(arrays[0]), len(arrays[2]))
    if sizes != _TORCHVISION[info.name][2:]:
        found = f"{sizes[0]} train / {sizes[1]} test"
        raise UserError(f"{staging} holds an incomplete copy of {info.name} ({found}); delete it and run again")
    return tuple(arrays)


#: where a checkout finds the offline copy of the datasets, if it has one (relative to the working folder)
MIRROR_PLACES = ("../shared/data", "shared/data")


def _mirror_found() -> str:
    """', here PATH' for an offline copy at one of MIRROR_PLACES, else ''."""
    found = next((place for place in MIRROR_PLACES if (Path(place) / "README.md").is_file() or (Path(place) / "MNIST").is_dir()), None)
    return f", here {found}" if found else ""


def _from_mirror(info: DatasetInfo, mirror: Path, staging: Path) -> tuple[tuple[np.ndarray, ...], dict]:
    if mirror.exists() and not mirror.is_dir():
        raise UserError(f"mirror {mirror} is a file, not a folder; pass a folder laid out like shared/data")
    if not mirror.is_dir():
        raise UserError(f"mirror folder {mirror} does not exist; pass a folder laid out like shared/data")
    if info.name in ("mnist", "fashion_mnist"):
        return _from_mirror_archives(info, mirror, staging)
    tarball, npz = mirror / _torchvision_class(info.name).filename, mirror / f"{info.name}.npz"
    if tarball.is_file():
        return _from_mirror_archives(info, mirror, staging)
    if npz.is_file():
        return _from_npz(info, npz)
    raise UserError(f"mirror {mirror} has neither {tarball} (torchvision's archive) nor {npz}; copy one of them there")


def _md5(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "md5").hexdigest()


def _gzip_problem(path: Path) -> str | None:
    """Why `path` is not a complete gzip stream (truncated, corrupt), or None."""
    try:
        with gzip.open(path) as f:
            while f.read(1 << 20):
                pass
    except (OSError, EOFError, zlib.error) as err:
        return str(err) or type(err).__name__
    return None


def _from_mirror_archives(info: DatasetInfo, mirror: Path, staging: Path) -> tuple[tuple[np.ndarray, ...], dict]:
    """Verify torchvision's archives in the mirror ourselves, copy them to staging, let torchvision extract."""
    rel = Path(_TORCHVISION[info.name][1])
    checked = []
    for fname, expected in _archives(_torchvision_class(info.name)):
        src = mirror / rel / fname
        if not src.is_file():
            raise UserError(f"mirror file {src} is missing; copy torchvision's {fname} (md5 {expected}) there")
        actual = _md5(src)
        if actual != expected:
            problem = _gzip_problem(src) if fname.endswith(".gz") else None
            why = f"it is truncated or corrupt ({problem})" if problem else "it is not torchvision's file"
            raise UserError(
                f"mirror file {src} has md5 {actual} but torchvision expects {expected}: {why}. "
                f"Re-copy {fname} from a good source (torchvision's download or the original mirror) and run again"
            )
        checked.append((src, fname, actual))
    shutil.rmtree(staging, ignore_errors=True)  # never trust a partial extraction left by an earlier run
    (staging / rel).mkdir(parents=True)
    for src, fname, _ in checked:
        shutil.copyfile(src, staging / rel / fname)
    arrays = _load_torchvision(info, staging, origin=mirror)
    meta = {"source": "mirror", "mirror": str(mirror), "archives": [{"file": str(rel / f), "md5": m} for _, f, m in checked]}
    return arrays, meta


def _read_npz(path: Path, keys: tuple[str, ...], hint: str) -> dict[str, np.ndarray]:
    try:
        with np.load(path) as z:
            missing = [k for k in keys if k not in z.files]
            if missing:
                raise UserError(f"{path} lacks the arrays {', '.join(missing)}; {hint}")
            return {k: z[k] for k in keys}
    except _READ_ERRORS as err:
        raise UserError(f"{path} cannot be read ({type(err).__name__}: {err}); {hint}") from err


def _from_npz(info: DatasetInfo, path: Path) -> tuple[tuple[np.ndarray, ...], dict]:
    """A CIFAR-style npz (x HWC uint8, integer labels); the order of the file is kept."""
    hint = "re-copy it from a good source (x_* uint8 (N, 32, 32, 3), y_* integer labels)"
    a = _read_npz(path, _KEYS, hint)
    arrays = []
    for split in ("train", "test"):
        x, y = a[f"x_{split}"], a[f"y_{split}"]
        if x.dtype != np.uint8 or x.ndim != 4 or x.shape[1:] != (info.height, info.width, info.channels):
            raise UserError(f"{path}: x_{split} is {x.dtype} {x.shape}, expected uint8 (N, 32, 32, 3); {hint}")
        if not np.issubdtype(y.dtype, np.integer) or y.shape != (len(x),):
            raise UserError(f"{path}: y_{split} is {y.dtype} {y.shape}, expected {len(x)} integer labels; {hint}")
        arrays += [np.ascontiguousarray(x.transpose(0, 3, 1, 2)), y.astype(np.int64)]
    _check_arrays(info, tuple(arrays), str(path), hint)
    return tuple(arrays), {"source": "mirror", "mirror": str(path.parent), "archives": [{"file": path.name, "md5": _md5(path)}]}


def _read_verified(name: str, root: Path, keys: tuple[str, ...]) -> tuple[dict[str, np.ndarray], str]:
    """`keys` of the prepared file, after verifying all of it: every array read (zip CRC-32), dtypes,
    shapes and labels checked, meta naming this dataset, and the arrays matching the stored fingerprint."""
    info = get_info(name)
    path = prepared_path(name, root)
    download_cmd = f"`fedgmh download {name} --root {root}`"
    if Path(root).exists() and not Path(root).is_dir():
        raise UserError(f"--root {root} is a file, not a folder; pass the folder given to `fedgmh download --root`")
    if path.is_dir():
        raise UserError(f"{path} is a folder, not a prepared dataset; move it away and run {download_cmd}")
    if not path.is_file():
        raise UserError(f"{path} not found: run {download_cmd} first")
    hint = f"delete it and run {download_cmd} again"
    a = _read_npz(path, _KEYS + ("meta",), hint)
    try:
        meta = json.loads(str(a["meta"]))
        stored = meta["fingerprint"]
    except (ValueError, KeyError, TypeError) as err:
        raise UserError(f"{path} has no valid meta ({type(err).__name__}: {err}); {hint}") from err
    if not isinstance(stored, str):
        raise UserError(f"{path} has no valid meta (fingerprint {stored!r} is not a string); {hint}")
    if meta.get("dataset", name) != name:
        raise UserError(f"{path} holds the dataset {meta['dataset']!r}, not {name!r}; {hint}")
    arrays = tuple(a[k] for k in _KEYS)
    _check_arrays(info, arrays, str(path), hint)
    if fingerprint(*arrays) != stored:
        raise UserError(
            f"{path} does not match its stored fingerprint (its arrays were changed or damaged after download); {hint}"
        )
    return {k: a[k] for k in keys}, stored


def load_dataset(name: str, root: Path, device: str | torch.device = "cpu") -> LoadedDataset:
    """Pooled images normalised like ToTensor + Normalize(0.5, 0.5): (x / 255 - 0.5) / 0.5 in float32.

    The file is verified first (see `_read_verified`): a damaged or edited file raises a UserError."""
    import torch

    info = get_info(name)
    a, fp = _read_verified(name, root, _KEYS)
    images = torch.from_numpy(np.concatenate([a["x_train"], a["x_test"]])).to(torch.float32)
    images.div_(255).sub_(0.5).div_(0.5)
    labels = torch.from_numpy(np.concatenate([a["y_train"], a["y_test"]]))
    num_train = len(a["y_train"])
    return LoadedDataset(name, images.to(device).contiguous(), labels.to(device), info.num_classes, num_train, fp)


def load_labels(name: str, root: Path) -> LabelsInfo:
    """The pooled labels; the whole file is read and verified like `load_dataset` (the images are not kept)."""
    info = get_info(name)
    a, fp = _read_verified(name, root, ("y_train", "y_test"))
    labels = np.concatenate([a["y_train"], a["y_test"]]).astype(np.int64)
    return LabelsInfo(labels=labels, num_classes=info.num_classes, fingerprint=fp)
