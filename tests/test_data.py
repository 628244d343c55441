"""Dataset layer: embedded digits, the offline mirror (torchvision archives and CIFAR-style npz), errors."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from fedgmh import data
from fedgmh.errors import UserError

def leftovers(root: Path) -> list[str]:
    """Everything in `root` except the staging folder: a failed download must leave nothing."""
    return sorted(p.name for p in root.iterdir() if p.name != "raw") if root.exists() else []


def idx_labels(path: Path) -> np.ndarray:
    """Parse an MNIST idx1 label archive by hand (8-byte header: magic, count)."""
    raw = gzip.decompress(path.read_bytes())
    assert int.from_bytes(raw[:4], "big") == 2049
    count = int.from_bytes(raw[4:8], "big")
    return np.frombuffer(raw[8:], dtype=np.uint8).astype(np.int64)[:count]


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*"))}


# -------------------------------------------------------------------------------------- digits


def test_digits_download_and_load(tmp_path: Path) -> None:
    from sklearn.datasets import load_digits

    path = data.download("digits", tmp_path)
    assert path == tmp_path / "digits.npz"
    ds = data.load_dataset("digits", tmp_path)
    assert ds.images.shape == (1797, 1, 28, 28) and ds.images.dtype == torch.float32
    assert ds.images.is_contiguous()
    assert ds.images.min().item() >= -1.0 and ds.images.max().item() <= 1.0
    assert ds.images.min().item() < -0.99 and ds.images.max().item() > 0.99  # 0 and 16 map to -1 and ~1
    assert ds.num_classes == 10 and ds.num_train == 1797
    np.testing.assert_array_equal(ds.labels.numpy(), load_digits().target)
    assert ds.labels.dtype == torch.int64

    with np.load(path) as z:
        assert z["x_train"].dtype == np.uint8 and z["x_test"].shape == (0, 1, 28, 28)
        meta = json.loads(str(z["meta"]))
    assert meta["source"] == "embedded" and meta["fingerprint"] == ds.fingerprint
    assert len(ds.fingerprint) == 64

    labels = data.load_labels("digits", tmp_path)
    assert labels.labels.dtype == np.int64 and labels.num_classes == 10
    np.testing.assert_array_equal(labels.labels, ds.labels.numpy())
    assert labels.fingerprint == ds.fingerprint


def test_digits_idempotent_and_deterministic(tmp_path: Path) -> None:
    first = data.download("digits", tmp_path / "a")
    mtime = first.stat().st_mtime_ns
    assert data.download("digits", tmp_path / "a") == first
    assert first.stat().st_mtime_ns == mtime  # no-op: the file was not rewritten
    second = data.download("digits", tmp_path / "b")
    assert data.load_labels("digits", tmp_path / "a").fingerprint == data.load_labels("digits", tmp_path / "b").fingerprint
    assert first.read_bytes() == second.read_bytes()


def test_corrupt_prepared_file_is_reported_and_replaced(tmp_path: Path) -> None:
    bad = tmp_path / "digits.npz"
    bad.write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(UserError, match="delete it") as err:
        data.load_dataset("digits", tmp_path)
    assert str(bad) in str(err.value)
    with pytest.raises(UserError, match="digits.npz"):
        data.load_labels("digits", tmp_path)
    data.download("digits", tmp_path)  # an unreadable file is not taken as done
    assert data.load_dataset("digits", tmp_path).images.shape[0] == 1797


def test_prepared_file_missing_keys(tmp_path: Path) -> None:
    np.savez(tmp_path / "digits.npz", x_train=np.zeros((1, 1, 28, 28), np.uint8))
    with pytest.raises(UserError, match="lacks the arrays"):
        data.load_dataset("digits", tmp_path)


def test_failed_write_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken_savez(file, **arrays):
        file.write(b"PK\x03\x04 half a file")
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez", broken_savez)
    with pytest.raises(OSError, match="disk full"):
        data.download("digits", tmp_path)
    assert leftovers(tmp_path) == []


# -------------------------------------------------------------------------------- errors, names


def test_load_before_download(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="fedgmh download mnist") as err:
        data.load_dataset("mnist", tmp_path)
    assert str(tmp_path / "mnist.npz") in str(err.value)
    with pytest.raises(UserError, match="fedgmh download"):
        data.load_labels("mnist", tmp_path)


@pytest.mark.parametrize("call", [data.download, data.load_dataset, data.load_labels, data.get_info])
def test_unknown_name(tmp_path: Path, call) -> None:
    args = ("imagenet",) if call is data.get_info else ("imagenet", tmp_path)
    with pytest.raises(UserError, match="unknown dataset 'imagenet'.*mnist, fashion_mnist, cifar10, cifar100, digits"):
        call(*args)


def test_dataset_table() -> None:
    assert data.DATASETS["cifar100"] == data.DatasetInfo("cifar100", 3, 32, 32, 100, 60_000)
    assert data.DATASETS["fashion_mnist"].channels == 1
    assert set(data.DATASETS) == {"mnist", "fashion_mnist", "cifar10", "cifar100", "digits"}


def test_dataset_sizes_are_the_data_s(digits_root: Path) -> None:
    """The sizes the workflow's plan checks `clients` against: the embedded set's, and every committed record's."""
    assert len(data.load_labels("digits", digits_root).labels) == data.DATASETS["digits"].num_samples
    records = [json.loads(path.read_text()) for path in (Path(__file__).resolve().parents[1] / "paper_artifacts").rglob("run.json")]
    sizes = {(record["partition"]["dataset"], record["partition"]["num_samples"]) for record in records}
    assert sizes and all(data.DATASETS[name].num_samples == size for name, size in sizes), sizes


def test_network_failure_suggests_mirror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torchvision.datasets

    class Offline:
        def __init__(self, **kwargs):
            raise RuntimeError("Error downloading train-images-idx3-ubyte.gz:\nTried https://example, got: <urlopen error>")

    monkeypatch.setattr(torchvision.datasets, "MNIST", Offline)
    with pytest.raises(UserError, match="download.*failed") as err:
        data.download("mnist", tmp_path)
    assert "--mirror" in str(err.value) and "digits" in str(err.value)
    assert leftovers(tmp_path) == []


def test_missing_mirror(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="does not exist"):
        data.download("mnist", tmp_path / "root", mirror=tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError) as err:
        data.download("cifar10", tmp_path / "root", mirror=tmp_path / "empty")
    assert "cifar-10-python.tar.gz" in str(err.value) and str(tmp_path / "empty" / "cifar10.npz") in str(err.value)


# --------------------------------------------------------------------------------- MNIST mirror


@pytest.fixture(scope="module")
def mnist_root(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    before = snapshot(shared_data)
    root = tmp_path_factory.mktemp("mnist")
    data.download("mnist", root, mirror=shared_data)
    return root, before


def test_mirror_mnist_order_and_size(mnist_root, shared_data: Path) -> None:
    root, _ = mnist_root
    labels = data.load_labels("mnist", root)
    assert labels.labels.shape == (70000,) and labels.num_classes == 10
    raw = shared_data / "MNIST" / "raw"
    np.testing.assert_array_equal(labels.labels[:60000], idx_labels(raw / "train-labels-idx1-ubyte.gz"))
    np.testing.assert_array_equal(labels.labels[60000:], idx_labels(raw / "t10k-labels-idx1-ubyte.gz"))
    meta = json.loads(str(np.load(root / "mnist.npz")["meta"]))
    assert meta["source"] == "mirror" and meta["fingerprint"] == labels.fingerprint
    assert {a["md5"] for a in meta["archives"]} == {  # torchvision's published md5s (shared/data/README.md)
        "f68b3c2dcbeaaa9fbdd348bbdeb94873",
        "d53e105ee54ea40749a09fcbcd1e9432",
        "9fb629c4189551a2d022fa330f9573f3",
        "ec29112dd5afa0611ce80d1b7f02629c",
    }


def test_mirror_mnist_normalisation_matches_torchvision(mnist_root) -> None:
    import torchvision
    from torchvision import transforms

    root, _ = mnist_root
    ds = data.load_dataset("mnist", root)
    assert ds.images.shape == (70000, 1, 28, 28) and ds.num_train == 60000
    assert ds.images.is_contiguous() and ds.labels.dtype == torch.int64
    tf = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.5,), (0.5,))])
    staging = root / "raw" / "mnist"
    train = torchvision.datasets.MNIST(root=str(staging), train=True, download=False, transform=tf)
    test = torchvision.datasets.MNIST(root=str(staging), train=False, download=False, transform=tf)
    for i in (0, 1, 12345, 59999):
        image, label = train[i]
        assert torch.equal(ds.images[i], image) and ds.labels[i].item() == label
    for i in (0, 9999):
        image, label = test[i]
        assert torch.equal(ds.images[60000 + i], image) and ds.labels[60000 + i].item() == label


def test_mirror_not_modified(mnist_root, shared_data: Path) -> None:
    _, before = mnist_root
    assert snapshot(shared_data) == before


@pytest.fixture
def mnist_copy(shared_data: Path, tmp_path: Path) -> Path:
    mirror = tmp_path / "mirror"
    shutil.copytree(shared_data / "MNIST", mirror / "MNIST")
    for p in (mirror / "MNIST" / "raw").iterdir():
        p.chmod(0o644)
    return mirror


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_corrupt_mirror_archive(mnist_copy: Path, tmp_path: Path, damage: str) -> None:
    victim = mnist_copy / "MNIST" / "raw" / "train-labels-idx1-ubyte.gz"
    content = bytearray(victim.read_bytes())
    if damage == "truncate":
        victim.write_bytes(content[: len(content) // 2])
    else:
        content[1000:1010] = bytes(b ^ 0xFF for b in content[1000:1010])
        victim.write_bytes(content)
    root = tmp_path / "root"
    with pytest.raises(UserError) as err:
        data.download("mnist", root, mirror=mnist_copy)
    message = str(err.value)
    assert "train-labels-idx1-ubyte.gz" in message and "d53e105ee54ea40749a09fcbcd1e9432" in message
    assert "Re-copy" in message
    if damage == "truncate":
        assert "truncated or corrupt" in message
    assert not (root / "mnist.npz").exists() and leftovers(root) == []


def test_missing_mirror_archive(mnist_copy: Path, tmp_path: Path) -> None:
    missing = mnist_copy / "MNIST" / "raw" / "t10k-images-idx3-ubyte.gz"
    missing.unlink()
    with pytest.raises(UserError, match="is missing") as err:
        data.download("mnist", tmp_path / "root", mirror=mnist_copy)
    assert str(missing) in str(err.value)


# ------------------------------------------------------------------------------ CIFAR-style npz


def make_cifar_npz(path: Path, num_classes: int, n_train: int = 200, n_test: int = 50, **override) -> dict:
    rng = np.random.default_rng(0)
    arrays = {
        "x_train": rng.integers(0, 256, (n_train, 32, 32, 3), dtype=np.uint8),
        "y_train": rng.permutation(np.arange(n_train) % num_classes).astype(np.uint8),
        "x_test": rng.integers(0, 256, (n_test, 32, 32, 3), dtype=np.uint8),
        "y_test": (np.arange(n_test) % num_classes).astype(np.uint8),
    }
    arrays.update(override)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, **arrays)
    return arrays


@pytest.mark.parametrize("name,num_classes", [("cifar100", 100), ("cifar10", 10)])
def test_cifar_npz_mirror(tmp_path: Path, name: str, num_classes: int) -> None:
    src = make_cifar_npz(tmp_path / "mirror" / f"{name}.npz", num_classes)
    root = tmp_path / "root"
    data.download(name, root, mirror=tmp_path / "mirror")
    with np.load(root / f"{name}.npz") as z:
        np.testing.assert_array_equal(z["x_train"], src["x_train"].transpose(0, 3, 1, 2))
        np.testing.assert_array_equal(z["x_test"], src["x_test"].transpose(0, 3, 1, 2))
        assert z["y_train"].dtype == np.int64 and z["x_train"].flags.c_contiguous
        np.testing.assert_array_equal(z["y_train"], src["y_train"])  # the file's order is kept
    ds = data.load_dataset(name, root)
    assert ds.images.shape == (250, 3, 32, 32) and ds.num_train == 200 and ds.num_classes == num_classes
    np.testing.assert_array_equal(ds.labels.numpy(), np.concatenate([src["y_train"], src["y_test"]]))
    expected = (torch.from_numpy(src["x_test"][7].transpose(2, 0, 1).copy()).float() / 255 - 0.5) / 0.5
    assert torch.equal(ds.images[207], expected)
    assert (tmp_path / "mirror" / f"{name}.npz").exists()


@pytest.mark.parametrize(
    "override,match",
    [
        ({"x_train": np.zeros((200, 3, 32, 32), np.uint8)}, r"x_train is uint8 \(200, 3, 32, 32\)"),
        ({"x_test": np.zeros((50, 32, 32, 3), np.float32)}, "x_test is float32"),
        ({"y_train": np.zeros(199, np.uint8)}, "y_train"),
        ({"y_test": np.full(50, 100, np.uint8)}, r"labels in \[100, 100\]"),
    ],
)
def test_cifar_npz_mirror_rejects_bad_arrays(tmp_path: Path, override: dict, match: str) -> None:
    make_cifar_npz(tmp_path / "mirror" / "cifar100.npz", 100, **override)
    root = tmp_path / "root"
    with pytest.raises(UserError, match=match) as err:
        data.download("cifar100", root, mirror=tmp_path / "mirror")
    assert "cifar100.npz" in str(err.value)
    assert leftovers(root) == []


def test_cifar_npz_mirror_missing_key(tmp_path: Path) -> None:
    (tmp_path / "mirror").mkdir()
    np.savez(tmp_path / "mirror" / "cifar100.npz", x_train=np.zeros((2, 32, 32, 3), np.uint8))
    with pytest.raises(UserError, match="lacks the arrays y_train, x_test, y_test"):
        data.download("cifar100", tmp_path / "root", mirror=tmp_path / "mirror")


def test_cifar10_tarball_checksum(tmp_path: Path) -> None:
    fake = tmp_path / "mirror" / "cifar-10-python.tar.gz"
    fake.parent.mkdir()
    fake.write_bytes(gzip.compress(b"not cifar"))
    with pytest.raises(UserError, match="c58f30108f718f92721af3b95e74349a") as err:
        data.download("cifar10", tmp_path / "root", mirror=tmp_path / "mirror")
    assert str(fake) in str(err.value)
    assert not (tmp_path / "root" / "cifar10.npz").exists()


@pytest.mark.slow
def test_real_cifar100_mirror(shared_data: Path, tmp_path: Path) -> None:
    if not (shared_data / "cifar100.npz").is_file():
        pytest.skip("cifar100.npz not in the mirror")
    data.download("cifar100", tmp_path, mirror=shared_data)
    labels = data.load_labels("cifar100", tmp_path)
    assert labels.labels.shape == (60000,)
    np.testing.assert_array_equal(np.bincount(labels.labels[:50000], minlength=100), np.full(100, 500))
    np.testing.assert_array_equal(np.bincount(labels.labels[50000:], minlength=100), np.full(100, 100))
    ds = data.load_dataset("cifar100", tmp_path)
    assert ds.images.shape == (60000, 3, 32, 32) and ds.num_train == 50000
    mean = (ds.images[:50000] * 0.5 + 0.5).mean(dim=(0, 2, 3))
    np.testing.assert_allclose(mean.numpy(), [0.5071, 0.4865, 0.4409], atol=1e-3)


@pytest.mark.slow
def test_mirror_fashion_mnist(shared_data: Path, tmp_path: Path) -> None:
    data.download("fashion_mnist", tmp_path, mirror=shared_data)
    labels = data.load_labels("fashion_mnist", tmp_path).labels
    raw = shared_data / "FashionMNIST" / "raw"
    np.testing.assert_array_equal(labels[:60000], idx_labels(raw / "train-labels-idx1-ubyte.gz"))
    np.testing.assert_array_equal(labels[60000:], idx_labels(raw / "t10k-labels-idx1-ubyte.gz"))
