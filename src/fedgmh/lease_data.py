"""The lease's dataset files as they travel: each image array as its residuals from a planar prediction.

A prepared dataset file (`fedgmh.data`: uint8 images [N, C, H, W], labels, meta) is mostly image bytes,
which xz compresses poorly; what travels instead is, per pixel, its difference from the prediction
left + above - above-left (and, for colour images, each of red and blue also less green's), all
modulo 256. xz compresses these residuals far better (docs/running.md, "A GPU lease", gives the sizes),
and they turn back into the very same arrays with two cumulative sums, checked there against each
array's sha256. Other arrays travel as they are. numpy only: the device runs this before training.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

#: the name a file takes while it travels (`encode_file`), and the key of its table of contents
SUFFIX = ".residuals.npz"
_CONTENTS = "lease_contents"


def encode(images: np.ndarray) -> np.ndarray:
    """uint8 images [N, C, H, W] -> their residuals, uint8 of the same shape (`decode` inverts it)."""
    x = np.ascontiguousarray(images, dtype=np.uint8)
    down = x.copy()
    down[..., 1:, :] -= x[..., :-1, :]  # uint8 arithmetic: modulo 256
    residuals = down.copy()
    residuals[..., :, 1:] -= down[..., :, :-1]
    if x.ndim == 4 and x.shape[1] == 3:
        residuals[:, 0] -= residuals[:, 1]
        residuals[:, 2] -= residuals[:, 1]
    return residuals


def decode(residuals: np.ndarray) -> np.ndarray:
    """The images whose residuals (`encode`) these are."""
    x = np.array(residuals, dtype=np.uint8)
    if x.ndim == 4 and x.shape[1] == 3:
        x[:, 0] += x[:, 1]
        x[:, 2] += x[:, 1]
    np.cumsum(x, axis=-1, dtype=np.uint8, out=x)
    np.cumsum(x, axis=-2, dtype=np.uint8, out=x)
    return x


def _is_images(array: np.ndarray) -> bool:
    return array.dtype == np.uint8 and array.ndim == 4


def _digest(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).data).hexdigest()


def encode_file(source: Path, target: Path) -> None:
    """Write `target`: the npz `source` with its image arrays as residuals and a table of contents
    (each array's name, whether it is encoded, its sha256)."""
    with np.load(source) as stored:
        arrays = {key: stored[key] for key in stored.files}
    if _CONTENTS in arrays:
        raise ValueError(f"{source} already holds a key {_CONTENTS!r}")
    contents = {key: {"encoded": _is_images(a), "sha256": _digest(a)} for key, a in arrays.items()}
    travelling = {key: encode(a) if contents[key]["encoded"] else a for key, a in arrays.items()}
    with open(target, "wb") as out:
        np.savez(out, **travelling, **{_CONTENTS: np.array(json.dumps(contents))})


def decode_file(source: Path, target: Path) -> None:
    """Write `target`: the npz that `encode_file` turned into `source`, its arrays checked against their
    sha256 (a ValueError names the first that differs; nothing is written then)."""
    with np.load(source) as stored:
        contents = json.loads(str(stored[_CONTENTS]))
        arrays = {key: decode(stored[key]) if entry["encoded"] else stored[key] for key, entry in contents.items()}
    for key, entry in contents.items():
        if _digest(arrays[key]) != entry["sha256"]:
            raise ValueError(f"{source}: array {key!r} does not decode to what was sent")
    partial = target.with_name(target.name + ".part")
    with open(partial, "wb") as out:
        np.savez(out, **arrays)
    partial.replace(target)
