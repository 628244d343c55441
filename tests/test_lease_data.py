"""The lease's dataset files as they travel (`fedgmh.lease_data`): residuals that decode to the very
same arrays, compress better than the images, and refuse to decode to anything else."""

from __future__ import annotations

import lzma
from pathlib import Path

import numpy as np
import pytest

from fedgmh.lease_data import SUFFIX, decode, decode_file, encode, encode_file


@pytest.mark.parametrize("shape", [(5, 3, 7, 9), (4, 1, 8, 8), (2, 2, 5, 5), (3, 3, 1, 1), (0, 3, 4, 4)])
def test_residuals_decode_to_the_very_same_images(shape):
    images = np.random.default_rng(0).integers(0, 256, shape, dtype=np.uint8)
    residuals = encode(images)
    assert residuals.dtype == np.uint8 and residuals.shape == images.shape
    assert np.array_equal(decode(residuals), images)


def _smooth_images(n: int = 200) -> np.ndarray:
    """Colour images like photographs: smooth shapes, channels alike, a little noise."""
    rng = np.random.default_rng(1)
    rows, cols = np.mgrid[0:32, 0:32]
    waves = [rng.uniform(0, 0.4, (n, 1, 1, 1)) for _ in range(4)]
    base = 100 + 60 * np.sin(waves[0] * rows + waves[1] * cols) + 40 * np.cos(waves[2] * rows - waves[3] * cols)
    light = base + rng.normal(0, 2, (n, 1, 32, 32))  # [n, 1, 32, 32]: the channels share most of it
    tint = rng.uniform(0.6, 1.0, (n, 3, 1, 1))
    return np.clip(light * tint + rng.normal(0, 0.5, (n, 3, 32, 32)), 0, 255).astype(np.uint8)


def test_the_residuals_of_smooth_colour_images_compress_to_less_than_the_images():
    images = _smooth_images()
    as_they_are, as_residuals = (len(lzma.compress(a.tobytes(), preset=6)) for a in (images, encode(images)))
    assert as_residuals < 0.8 * as_they_are


def test_a_prepared_file_travels_and_comes_back_array_for_array(tmp_path: Path):
    arrays = {"x_train": _smooth_images(20), "y_train": np.arange(20, dtype=np.int64), "x_test": _smooth_images(5),
              "y_test": np.arange(5, dtype=np.int64), "meta": np.array('{"fingerprint": "f"}')}
    np.savez(tmp_path / "set.npz", **arrays)
    encode_file(tmp_path / "set.npz", tmp_path / f"set.npz{SUFFIX}")
    with np.load(tmp_path / f"set.npz{SUFFIX}") as travelling:
        assert not np.array_equal(travelling["x_train"], arrays["x_train"])  # the images travel as residuals
        assert np.array_equal(travelling["y_train"], arrays["y_train"])  # labels as they are
    decode_file(tmp_path / f"set.npz{SUFFIX}", tmp_path / "back.npz")
    with np.load(tmp_path / "back.npz") as back:
        assert back.files == list(arrays)
        assert all(np.array_equal(back[key], value) for key, value in arrays.items())


def test_a_damaged_file_is_refused_and_nothing_is_written(tmp_path: Path):
    np.savez(tmp_path / "set.npz", x_train=_smooth_images(4), y_train=np.arange(4))
    encode_file(tmp_path / "set.npz", tmp_path / "sent.npz")
    with np.load(tmp_path / "sent.npz") as sent:
        damaged = {key: sent[key].copy() for key in sent.files}
    damaged["x_train"][2, 1, 3, 4] += 1
    np.savez(tmp_path / "damaged.npz", **damaged)
    with pytest.raises(ValueError, match="'x_train' does not decode to what was sent"):
        decode_file(tmp_path / "damaged.npz", tmp_path / "back.npz")
    assert list(tmp_path.glob("back.npz*")) == []
