"""Data safety (issue 9, data side): what `download`, `partition` and the loaders refuse or verify.

Prepared datasets are verified on load (fingerprint, zip members), partition files are validated
on load, `fedgmh partition` never writes over a file that is not a partition file and rejects bad
parameters before reading anything, OS errors are one-line messages, and `atomic_path` fsyncs.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest
from conftest import Digits, cli_error, train_args

from fedgmh import data, io
from fedgmh.cli import main
from fedgmh.errors import UserError
from fedgmh.partition import PartitionError, exdir, load_partition

DIGITS_SIZE = 1797


def _permissions_are_enforced() -> bool:
    """False where a read-only folder can still be written (root, or a file system without modes)."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        locked = Path(folder) / "locked"
        locked.mkdir()
        locked.chmod(stat.S_IRUSR | stat.S_IXUSR)
        try:
            (locked / "probe").touch()
        except PermissionError:
            return True
        finally:
            locked.chmod(stat.S_IRWXU)
        return False


needs_permissions = pytest.mark.skipif(
    not _permissions_are_enforced(), reason="chmod does not stop this user from writing (running as root?)"
)


def partition_args(root: Path, out: Path, *extra: str, clients: str = "6", c: str = "2") -> list[str]:
    return ["partition", "--dataset", "digits", "--root", str(root), "--clients", clients,
            "--classes-per-client", c, "--alpha", "0.5", "--out", str(out), *extra]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> tuple[Path, Path]:
    """(root with digits prepared, a partition file of 6 clients made by `fedgmh partition`); read-only for tests."""
    base = tmp_path_factory.mktemp("safety")
    root = base / "data"
    data.download("digits", root)
    part = base / "part.npz"
    assert main(partition_args(root, part)) == 0
    return root, part


@pytest.fixture
def fresh_digits(tmp_path: Path) -> Path:
    """A root of its own with digits prepared, for tests that damage it."""
    root = tmp_path / "data"
    data.download("digits", root)
    return root


def partition_arrays(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as npz:
        return dict(npz)


def write_npz(path: Path, arrays: dict[str, np.ndarray], **changes) -> Path:
    """`arrays` with `changes` applied (a value of None drops that key), written with np.savez."""
    out = {**arrays, **changes}
    np.savez(path, **{k: v for k, v in out.items() if v is not None})
    return path


# ------------------------------------------------------------------- item 4: no overwriting the dataset


def test_partition_refuses_to_overwrite_the_prepared_dataset(fresh_digits: Path, tmp_path: Path, capsys) -> None:
    dataset = fresh_digits / "digits.npz"
    before = dataset.read_bytes()
    err = cli_error(capsys, partition_args(fresh_digits, dataset))
    assert "prepared dataset" in err and "refusing to overwrite" in err
    # a copy of the dataset elsewhere (not the --root's file) is recognised by its arrays
    copy = tmp_path / "copy.npz"
    copy.write_bytes(before)
    assert "prepared dataset" in cli_error(capsys, partition_args(fresh_digits, copy))
    assert copy.read_bytes() == before
    # nor through --stats
    assert "prepared dataset" in cli_error(capsys, partition_args(fresh_digits, tmp_path / "p.npz", "--stats", str(dataset)))
    assert dataset.read_bytes() == before and not (tmp_path / "p.npz").exists()
    assert data.load_labels("digits", fresh_digits).labels.shape == (DIGITS_SIZE,)


@pytest.mark.parametrize("content", [b"my notes\n", b"PK\x03\x04 a zip of something else", "npz"])
def test_partition_refuses_to_overwrite_other_files(prepared, tmp_path: Path, capsys, content) -> None:
    root, _ = prepared
    out = tmp_path / "out.npz"
    if content == "npz":
        np.savez(out, weights=np.arange(3))
    else:
        out.write_bytes(content)
    before = out.read_bytes()
    err = cli_error(capsys, partition_args(root, out))
    assert "is not a partition file" in err and "refusing to overwrite" in err
    assert out.read_bytes() == before and not out.with_suffix(".stats.csv").exists()


def test_partition_replaces_an_existing_partition_file(prepared, tmp_path: Path, capsys) -> None:
    root, _ = prepared
    out = tmp_path / "part.npz"
    assert main(partition_args(root, out, "--seed", "1")) == 0
    first = partition_arrays(out)["train_indices"]
    assert main(partition_args(root, out, "--seed", "2")) == 0
    assert not np.array_equal(first, partition_arrays(out)["train_indices"])
    assert json.loads(str(partition_arrays(out)["meta"]))["seed"] == 2


# ----------------------------------------------------------- item 7: prepared datasets are verified


def test_changed_labels_are_detected_on_load_and_download_prepares_again(fresh_digits: Path, capsys) -> None:
    path = fresh_digits / "digits.npz"
    arrays = partition_arrays(path)
    labels = arrays["y_train"].copy()
    labels[:50] = (labels[:50] + 1) % 10  # 50 changed labels, still valid classes
    write_npz(path, arrays, y_train=labels)
    for load in (data.load_dataset, data.load_labels):
        with pytest.raises(UserError, match="does not match its stored fingerprint") as err:
            load("digits", fresh_digits)
        assert "fedgmh download digits" in str(err.value)
    assert "stored fingerprint" in cli_error(capsys, partition_args(fresh_digits, fresh_digits.parent / "p.npz"))
    data.download("digits", fresh_digits)  # not "ready": prepared again
    restored = data.load_labels("digits", fresh_digits)
    np.testing.assert_array_equal(restored.labels[:50], arrays["y_train"][:50])


def _member_data_offset(path: Path, member: str) -> int:
    """Where the stored (uncompressed) bytes of a zip member start: after its local header."""
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo(member)
    assert info.compress_type == zipfile.ZIP_STORED
    with open(path, "rb") as handle:
        handle.seek(info.header_offset)
        header = handle.read(30)
    name_len, extra_len = struct.unpack("<HH", header[26:30])
    return info.header_offset + 30 + name_len + extra_len


@pytest.mark.parametrize("member", ["x_train.npy", "y_train.npy"])
def test_corrupt_zip_member_is_detected_and_download_prepares_again(fresh_digits: Path, member: str) -> None:
    path = fresh_digits / "digits.npz"
    raw = bytearray(path.read_bytes())
    at = _member_data_offset(path, member) + 200  # past the .npy header, inside the array's bytes
    raw[at] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(UserError, match="digits.npz") as err:
        data.load_dataset("digits", fresh_digits)
    assert "fedgmh download digits" in str(err.value)
    data.download("digits", fresh_digits)  # the "ready" check reads every member: prepared again
    assert data.load_dataset("digits", fresh_digits).images.shape == (DIGITS_SIZE, 1, 28, 28)
    assert data.prepared_problem("digits", fresh_digits) is None


def test_dataset_of_another_name_is_not_taken(fresh_digits: Path, tmp_path: Path) -> None:
    (tmp_path / "other").mkdir()
    (fresh_digits / "digits.npz").rename(tmp_path / "other" / "mnist.npz")
    with pytest.raises(UserError, match="holds the dataset 'digits', not 'mnist'"):
        data.load_labels("mnist", tmp_path / "other")


# --------------------------------------------------------------- item 8: partition files are validated


@pytest.mark.parametrize(
    "change,match",
    [
        (lambda a: {"train_indices": a["train_indices"].astype(np.float64) + 0.5}, "train_indices is a float64 array"),
        (lambda a: {"test_indices": a["test_indices"].astype(np.float32)}, "test_indices is a float32 array"),
        (lambda a: {"train_indices": a["train_indices"].astype(bool)}, "expected 1-d integers"),
        (lambda a: {"train_indices": a["train_indices"].reshape(1, -1)}, "expected 1-d integers"),
        (lambda a: {"train_indices": _set(a["train_indices"], 0, DIGITS_SIZE)}, "beyond the dataset's 1797 samples"),
        (lambda a: {"test_indices": _set(a["test_indices"], 3, -1)}, "negative sample index"),
        (lambda a: {"train_indices": _set(a["train_indices"], 1, a["train_indices"][0])}, "appears twice in the training data"),
        (lambda a: {"test_indices": _set(a["test_indices"], 1, a["test_indices"][0])}, "appears twice in the test sets"),
        (lambda a: {"train_offsets": np.zeros(0, np.int64)}, "inconsistent train_offsets"),
        (lambda a: {"test_offsets": a["test_offsets"].astype(np.float64)}, "test_offsets is a float64 array"),
        (lambda a: {"train_offsets": _swap(a["train_offsets"], 2, 3)}, "inconsistent train_offsets"),
        (lambda a: {"train_offsets": a["train_offsets"][:-1]}, "inconsistent train_offsets"),
        (lambda a: {"test_offsets": a["test_offsets"][:-1], "test_indices": a["test_indices"][: a["test_offsets"][-2]]},
         "different numbers of clients"),
        (lambda a: {"meta": np.array("{not json")}, "invalid meta"),
        (lambda a: {"meta": np.array("[1, 2]")}, "invalid meta (a JSON list, not an object)"),
        (lambda a: {"meta": np.arange(3)}, "invalid meta"),
        (lambda a: {"meta": _meta(a, num_samples="many")}, "num_samples='many' is not a positive integer"),
        (lambda a: {"meta": _meta(a, num_clients=7)}, "6 clients but its meta says 7"),
        (lambda a: {"meta": _meta(a, alpha=float("nan"))}, "invalid meta (it holds NaN, not a finite number)"),
        (lambda a: {"meta": _meta(a, train_ratio=float("inf"))}, "invalid meta (it holds Infinity, not a finite number)"),
        (lambda a: {"meta": np.array(str(a["meta"])[:-1] + ', "alpha": 1e999}')}, "invalid meta (it holds 1e999, not a finite number)"),
    ],
)
def test_invalid_partition_files_are_rejected_with_a_message(prepared, tmp_path: Path, change, match) -> None:
    _, good = prepared
    arrays = partition_arrays(good)
    bad = write_npz(tmp_path / "bad.npz", arrays, **change(arrays))
    with pytest.raises(UserError, match=_literal(match)) as err:
        load_partition(bad)  # the meta's num_samples (1797) bounds the indices
    assert str(bad) in str(err.value) and "\n" not in str(err.value)


def _set(values: np.ndarray, at: int, value) -> np.ndarray:
    values = values.copy()
    values[at] = value
    return values


def _swap(values: np.ndarray, i: int, j: int) -> np.ndarray:
    values = values.copy()
    values[[i, j]] = values[[j, i]]
    return values


def _meta(arrays: dict, **changes) -> np.ndarray:
    return np.array(json.dumps({**json.loads(str(arrays["meta"])), **changes}))


def _literal(text: str) -> str:
    import re

    return re.escape(text)


def test_test_sample_in_another_clients_training_data_is_rejected(prepared, tmp_path: Path, capsys) -> None:
    root, good = prepared
    arrays = partition_arrays(good)
    client0_test = arrays["test_indices"][: arrays["test_offsets"][1]]
    client3_train = arrays["train_indices"][arrays["train_offsets"][3] : arrays["train_offsets"][4]]
    test = arrays["test_indices"].copy()
    test[0] = client3_train[0]  # client 0's first test sample is now client 3's training data
    assert test[0] not in client0_test
    bad = write_npz(tmp_path / "contaminated.npz", arrays, test_indices=test)
    with pytest.raises(UserError, match="contaminated test set") as err:
        load_partition(bad)
    assert f"sample {client3_train[0]} is in client 0's test set and in client 3's training data" in str(err.value)
    # `fedgmh train` stops on it before training
    assert "contaminated test set" in cli_error(capsys, train_args(Digits(root, bad), tmp_path / "run", device="cpu"))
    assert not (tmp_path / "run").exists()


def test_partition_without_meta_is_bounded_by_the_dataset(prepared, tmp_path: Path) -> None:
    _, good = prepared
    arrays = partition_arrays(good)
    plain = write_npz(tmp_path / "plain.npz", arrays, meta=None)  # exdir.md: meta is optional
    part, meta = load_partition(plain, num_samples=DIGITS_SIZE)
    assert meta == {} and part.num_clients == 6
    with pytest.raises(UserError, match="beyond the dataset's 100 samples"):
        load_partition(plain, num_samples=100)


def test_valid_partition_still_loads(prepared) -> None:
    _, good = prepared
    part, meta = load_partition(good)
    assert part.num_clients == 6 and meta["num_samples"] == DIGITS_SIZE
    every = np.concatenate(part.train + part.test)
    assert np.array_equal(np.sort(every), np.arange(DIGITS_SIZE))


# ---------------------------------------------------------------- item 9: alpha too small to draw


@pytest.mark.parametrize("alpha", [1e-4, 1e-5, 1e-300])
def test_alpha_too_small_to_draw_is_rejected(alpha: float) -> None:
    labels = np.random.RandomState(0).permutation(np.repeat(np.arange(10), 180))
    with pytest.raises(PartitionError, match="too small to draw"):
        exdir(labels, 8, 2, alpha, seed=1)


def test_train_ratio_that_empties_a_client_train_set_is_rejected() -> None:
    labels = np.random.RandomState(0).permutation(np.repeat(np.arange(10), 180))
    with pytest.raises(PartitionError, match="train ratio 0.001 leaves client 0 .285 samples. with an empty train set"):
        exdir(labels, 8, 2, 0.5, seed=1, train_ratio=0.001)


def test_cli_alpha_too_small_writes_nothing(prepared, tmp_path: Path, capsys) -> None:
    root, _ = prepared
    out = tmp_path / "p.npz"
    argv = partition_args(root, out)
    argv[argv.index("--alpha") + 1] = "1e-5"
    assert "too small to draw" in cli_error(capsys, argv)
    assert list(tmp_path.iterdir()) == []


# -------------------------------------------------------------------- item 10: OS errors, one line


def test_download_into_a_root_that_is_a_file(tmp_path: Path, capsys) -> None:
    root = tmp_path / "root"
    root.write_text("a file")
    with pytest.raises(UserError, match="is a file, not a folder"):
        data.download("digits", root)
    err = cli_error(capsys, ["download", "digits", "--root", str(root)])
    assert "is a file, not a folder" in err
    err = cli_error(capsys, ["download", "digits", "--root", str(root / "sub")])  # below a file
    assert "cannot" in err and "--root" in err
    assert "is a file, not a folder" in cli_error(capsys, partition_args(root, tmp_path / "p.npz"))
    assert root.read_text() == "a file"


def test_download_write_refused_by_the_system_is_one_line(tmp_path: Path, monkeypatch, capsys) -> None:
    def refuse(*args, dir=None, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", str(dir))

    monkeypatch.setattr(io.tempfile, "mkstemp", refuse)
    err = cli_error(capsys, ["download", "digits", "--root", str(tmp_path / "root")])
    assert "Permission denied" in err and "--root" in err


def test_unreadable_mirror_file_is_one_line(tmp_path: Path, monkeypatch, capsys) -> None:
    mirror = tmp_path / "mirror"
    (mirror / "MNIST" / "raw").mkdir(parents=True)
    for name in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
                 "t10k-labels-idx1-ubyte.gz"):
        (mirror / "MNIST" / "raw" / name).write_bytes(b"not readable")

    def refuse(path):
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(data, "_md5", refuse)
    err = cli_error(capsys, ["download", "mnist", "--root", str(tmp_path / "root"), "--mirror", str(mirror)])
    assert "Permission denied" in err and "mirror" in err and "train-images-idx3-ubyte.gz" in err


def test_partition_write_refused_by_the_system_is_one_line(prepared, tmp_path: Path, monkeypatch, capsys) -> None:
    root, _ = prepared

    def refuse(*args, dir=None, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", str(dir))

    monkeypatch.setattr(io.tempfile, "mkstemp", refuse)
    err = cli_error(capsys, partition_args(root, tmp_path / "out" / "p.npz"))
    assert "Permission denied" in err and "--out" in err


@needs_permissions
def test_read_only_root_and_out_folder(prepared, tmp_path: Path, capsys) -> None:
    root, _ = prepared
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        assert "Permission denied" in cli_error(capsys, ["download", "digits", "--root", str(locked)])
        assert "Permission denied" in cli_error(capsys, partition_args(root, locked / "p.npz"))
        assert list(locked.iterdir()) == []
    finally:
        locked.chmod(stat.S_IRWXU)


@needs_permissions
def test_unreadable_mirror_folder(tmp_path: Path, capsys) -> None:
    mirror = tmp_path / "mirror"
    (mirror / "MNIST" / "raw").mkdir(parents=True)
    archive = mirror / "MNIST" / "raw" / "train-images-idx3-ubyte.gz"
    archive.write_bytes(b"x")
    archive.chmod(0)
    try:
        err = cli_error(capsys, ["download", "mnist", "--root", str(tmp_path / "root"), "--mirror", str(mirror)])
        assert "Permission denied" in err and "mirror" in err
    finally:
        archive.chmod(stat.S_IRWXU)


# ------------------------------------------------------- item 11: bad partition parameters, no work


@pytest.mark.parametrize(
    "extra,match",
    [
        (("--seed", "-1"), "--seed -1: must be an integer from 0 to 4294967295"),
        (("--seed", str(2**32)), "--seed 4294967296: must be an integer from 0 to 4294967295"),
        (("--heatmap", "map.jpg"), "--heatmap map.jpg: unsupported figure type"),
        (("--heatmap", "map"), "--heatmap map: unsupported figure type"),
        (("--clients", "1"), "--clients 1: a federation needs at least 2 clients"),
        (("--classes-per-client", "11"), "--classes-per-client 11: must be between 1 and K=10"),
        (("--classes-per-client", "0"), "--classes-per-client 0: must be between 1 and K=10"),
        (("--clients", "4", "--classes-per-client", "2"), "--clients 4 and --classes-per-client 2 give N x C = 8 < the 10 classes"),
        (("--clients", "200"), "--clients 200: the 1797 samples of digits give every client at least 10, so at most 179"),
    ],
)
def test_bad_partition_parameters_are_rejected_before_any_work(tmp_path: Path, capsys, extra, match) -> None:
    # the root holds no dataset: an error about the parameter shows nothing was read before the check
    empty = tmp_path / "empty"
    empty.mkdir()
    argv = partition_args(empty, tmp_path / "p.npz")
    for option, value in zip(extra[::2], extra[1::2]):
        if option in argv:
            argv[argv.index(option) + 1] = value
        else:
            argv += [option, value]
    err = cli_error(capsys, argv)
    assert match in err and "not found" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]


def test_partition_seed_bounds(prepared, tmp_path: Path) -> None:
    root, _ = prepared
    assert main(partition_args(root, tmp_path / "p.npz", "--seed", str(2**32 - 1))) == 0
    labels = np.repeat(np.arange(10), 30)
    with pytest.raises(PartitionError, match="seed -1 is out of range"):
        exdir(labels, 6, 2, 0.5, seed=-1)


# ------------------------------------------------------------- item 14: messages that do not mislead


def test_partition_path_that_is_a_folder(prepared, tmp_path: Path, capsys) -> None:
    root, _ = prepared
    folder = tmp_path / "part.npz"
    folder.mkdir()
    err = cli_error(capsys, train_args(Digits(root, folder), tmp_path / "run", device="cpu"))
    assert "is a folder" in err and "not found" not in err


def test_dataset_given_as_partition_is_not_to_be_deleted(prepared, tmp_path: Path, capsys) -> None:
    root, _ = prepared
    err = cli_error(capsys, train_args(Digits(root, root / "digits.npz"), tmp_path / "run", device="cpu"))
    assert "is a prepared dataset" in err and "not a partition file" in err
    assert "delete" not in err
    assert (root / "digits.npz").is_file()


def test_text_file_given_as_partition(prepared, tmp_path: Path, capsys) -> None:
    root, _ = prepared
    text = tmp_path / "part.npz"
    text.write_text("client,num_train,num_test\n0,10,3\n")
    err = cli_error(capsys, train_args(Digits(root, text), tmp_path / "run", device="cpu"))
    assert "not an .npz archive" in err and "allow_pickle" not in err


def test_compare_reference_that_is_binary(tmp_path: Path, capsys) -> None:
    binary = tmp_path / "reference.csv"
    binary.write_bytes(bytes(range(256)) * 4)
    err = cli_error(capsys, ["compare", "--results", str(tmp_path / "results.csv"), "--reference", str(binary),
                             "--out", str(tmp_path / "comparison.md")])
    assert "is a binary file, not a CSV table" in err
    latin = tmp_path / "latin1.csv"
    latin.write_bytes("table,dataset,C,alpha,algorithm,mean,std\ntable2,mnist,2,0.5,Ditto \u00e9,1,2\n".encode("latin-1"))
    err = cli_error(capsys, ["compare", "--results", str(tmp_path / "results.csv"), "--reference", str(latin),
                             "--out", str(tmp_path / "comparison.md")])
    assert "is not a CSV table (not UTF-8 text)" in err
    assert "is a folder" in cli_error(capsys, ["compare", "--results", str(tmp_path / "results.csv"), "--reference",
                                               str(tmp_path), "--out", str(tmp_path / "comparison.md")])
    assert not (tmp_path / "comparison.md").exists()


# ------------------------------------------------------------------- item 15: atomic_path fsyncs


def test_atomic_path_fsyncs_the_file_and_its_folder(tmp_path: Path, monkeypatch) -> None:
    synced: list[tuple[str, int]] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        mode = os.fstat(fd).st_mode
        synced.append(("folder" if stat.S_ISDIR(mode) else "file", os.fstat(fd).st_ino))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    target = tmp_path / "sub" / "result.json"
    io.write_json({"a": 1}, target)
    assert synced == [("file", target.stat().st_ino), ("folder", target.parent.stat().st_ino)]
    assert json.loads(target.read_text()) == {"a": 1}


def test_atomic_path_does_not_sync_or_replace_after_an_error(tmp_path: Path, monkeypatch) -> None:
    synced = []
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd))
    target = tmp_path / "result.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with io.atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("killed")
    assert synced == [] and target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["result.txt"]


@needs_permissions
def test_atomic_path_in_a_folder_that_cannot_be_read(tmp_path: Path) -> None:
    folder = tmp_path / "drop"
    folder.mkdir()
    folder.chmod(stat.S_IWUSR | stat.S_IXUSR)  # -wx: files can be created, the folder cannot be opened for its sync
    try:
        io.write_text("done", folder / "result.txt")
        assert (folder / "result.txt").read_text() == "done"
    finally:
        folder.chmod(stat.S_IRWXU)
