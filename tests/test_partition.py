"""ExDir partition: invariants, seeding, failure modes, file format, CLI outputs."""

from __future__ import annotations

import gzip
import hashlib

import numpy as np
import pytest

from fedgmh.cli import main
from fedgmh.errors import UserError
from fedgmh.partition import PartitionError, Partition, check_parameters, client_statistics, exdir, load_partition, save_partition


def synthetic_labels(num_classes=10, per_class=300, seed=0):
    labels = np.repeat(np.arange(num_classes), per_class)
    return np.random.RandomState(seed).permutation(labels)


def all_indices(part: Partition) -> np.ndarray:
    return np.concatenate(part.train + part.test)


@pytest.mark.parametrize("clients,c,alpha", [(20, 2, 0.5), (30, 3, 5.0), (10, 10, 1.0)])
def test_every_sample_exactly_once_and_at_most_c_classes(clients, c, alpha):
    labels = synthetic_labels()
    part = exdir(labels, clients, c, alpha, seed=3)
    assert part.num_clients == clients
    assert np.array_equal(np.sort(all_indices(part)), np.arange(len(labels)))
    for tr, te in zip(part.train, part.test):
        held = np.unique(labels[np.concatenate([tr, te])])
        assert 1 <= len(held) <= c
        assert len(tr) + len(te) >= 10


def test_train_test_split_is_75_25_per_client():
    part = exdir(synthetic_labels(), 20, 2, 0.5, seed=1)
    for tr, te in zip(part.train, part.test):
        n = len(tr) + len(te)
        assert len(tr) == int(np.floor(0.75 * n))  # sklearn: n_train = floor(train_size * n)
        assert len(np.intersect1d(tr, te)) == 0


def test_same_seed_same_partition_other_seed_differs():
    labels = synthetic_labels()
    a, b, c = (exdir(labels, 20, 2, 0.5, seed=s) for s in (5, 5, 6))
    assert all(np.array_equal(x, y) for x, y in zip(a.train + a.test, b.train + b.test))
    assert not all(np.array_equal(x, y) for x, y in zip(a.train, c.train))


def test_small_alpha_gives_unequal_shares():
    labels = synthetic_labels(per_class=1000)

    def spread(alpha):
        sizes = exdir(labels, 20, 10, alpha, seed=2).client_sizes()
        return sizes.std() / sizes.mean()

    assert spread(0.1) > 2 * spread(100.0)


def test_balance_cap_bounds_client_size():
    labels = synthetic_labels(per_class=1000)
    part = exdir(labels, 20, 2, 0.1, seed=4)
    cap = len(labels) / 20
    # a client stops receiving once it reaches the cap; one class can push it past it at most once
    assert part.client_sizes().max() < cap + 1000


@pytest.mark.parametrize(
    "clients,c,alpha,message",
    [
        (10, 11, 0.5, "between 1 and K"),
        (10, 2, 0.0, r"alpha=0: must be in \(0, 1e\+100\]"),
        (10, 2, -1.0, r"alpha=-1: must be in \(0, 1e\+100\]"),
        (400, 2, 0.5, "N=400: the 3000 samples give every client at least 10, so at most 300 clients"),
        (4, 2, 0.5, "N=4 and C=2 give N x C = 8 < the 10 classes"),
        (1, 2, 0.5, "at least 2 clients"),
    ],
)
def test_impossible_parameters_fail_fast(clients, c, alpha, message):
    with pytest.raises(PartitionError, match=message):
        exdir(synthetic_labels(per_class=300), clients, c, alpha, seed=1)


def test_one_feasibility_rule_speaks_the_callers_names():
    """`check_parameters` is the rule of exdir, the CLI and the workflow's plan: it knows the chain
    assignment's coverage and names each parameter as the caller does."""
    named = {"clients": "--clients 4", "classes_per_client": "--classes-per-client 3", "assignment": "--assignment chain"}
    with pytest.raises(PartitionError, match=r"^--assignment chain with --clients 4 and --classes-per-client 3 covers only 6 of "
                                             r"the 10 classes of digits \("):
        check_parameters(1797, 10, 4, 3, 1.0, 0.75, "chain", named=named, dataset="digits")
    check_parameters(1797, 10, 4, 3, 1.0, 0.75, "random")  # N x C = 12 >= K: a random draw can cover every class
    check_parameters(1797, 10, 8, 3, 1.0, 0.75, "chain")  # N + C - 1 = 10 = K
    with pytest.raises(PartitionError, match="^assignment 'ring' is not one of random, chain"):
        check_parameters(1797, 10, 8, 3, 1.0, 0.75, "ring")


def test_unsatisfiable_draw_stops_after_bounded_attempts():
    # 200 samples for 20 clients: every client would need exactly 10; with a tiny alpha no draw works.
    labels = synthetic_labels(num_classes=2, per_class=100)
    with pytest.raises(PartitionError, match="no draw in 25"):
        exdir(labels, 20, 1, 0.01, seed=1, max_attempts=25)


def test_file_round_trip_and_corrupt_file(tmp_path):
    labels = synthetic_labels()
    part = exdir(labels, 12, 2, 0.5, seed=1)
    path = tmp_path / "p.npz"
    save_partition(path, part, {"dataset": "x"})
    loaded, meta = load_partition(path)
    assert meta == {"dataset": "x"}
    assert all(np.array_equal(x, y) for x, y in zip(part.train + part.test, loaded.train + loaded.test))
    with np.load(path) as npz:
        assert npz["train_offsets"].shape == (13,) and npz["train_indices"].dtype == np.int64
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(UserError, match="unreadable"):
        load_partition(path)
    with pytest.raises(UserError, match="not found"):
        load_partition(tmp_path / "missing.npz")
    assert [p.name for p in tmp_path.iterdir()] == ["p.npz"]  # no temporary files left behind


def test_statistics_count_classes():
    labels = synthetic_labels()
    part = exdir(labels, 12, 2, 0.5, seed=1)
    stats = client_statistics(part, labels, 10)
    assert stats["num_samples"].sum() == len(labels)
    assert (stats[[f"class_{k}" for k in range(10)]].sum(axis=1) == stats["num_samples"]).all()
    assert (stats["num_classes"] <= 2).all()


def test_cli_writes_partition_stats_and_heatmap(digits_root, tmp_path, capsys):
    out = tmp_path / "part.npz"
    code = main(["partition", "--dataset", "digits", "--root", str(digits_root), "--clients", "8",
                 "--classes-per-client", "2", "--alpha", "0.5", "--out", str(out), "--heatmap", str(tmp_path / "heat.png")])
    assert code == 0
    _, meta = load_partition(out)
    assert meta["num_clients"] == 8 and meta["dataset"] == "digits" and meta["num_samples"] == 1797
    assert (tmp_path / "part.stats.csv").read_text().startswith("client,num_train,num_test")
    assert (tmp_path / "heat.png").read_bytes()[:4] == b"\x89PNG"
    code = main(["partition", "--dataset", "digits", "--root", str(digits_root), "--clients", "8",
                 "--classes-per-client", "20", "--alpha", "0.5", "--out", str(tmp_path / "bad.npz")])
    assert code == 2 and "between 1 and K" in capsys.readouterr().err
    assert not (tmp_path / "bad.npz").exists()


def _mnist_labels(mirror):
    parts = []
    for name in ("train-labels-idx1-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
        with gzip.open(mirror / "MNIST" / "raw" / name) as handle:
            parts.append(np.frombuffer(handle.read()[8:], dtype=np.uint8))
    return np.concatenate(parts).astype(np.int64)


# sha256 of the concatenated train/test index arrays of MNIST ExDir(2, 0.5), 100 clients, seed 1.
# Checked on 2026-11-22 against a line-by-line transcription of PFLlib's `separate_data` + `split_data`
# (np.random.seed(1); same pooled label order): identical clients, sample for sample, in order.
MNIST_100_2_05_SHA256 = "8e0d4c6516c7ace4a8f33622b1cf73b423527c2a0e598e430698fe1eaba5d2b6"


def test_mnist_partition_matches_reference_fingerprint(shared_data):
    labels = _mnist_labels(shared_data)
    part = exdir(labels, 100, 2, 0.5, seed=1)
    digest = hashlib.sha256(b"".join(a.tobytes() for a in part.train + part.test)).hexdigest()
    assert part.client_sizes().sum() == 70000
    assert digest == MNIST_100_2_05_SHA256


def test_heatmap_title_and_colour_scale(digits_root, tmp_path, monkeypatch):
    import matplotlib.figure

    drawn = []
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda self, *a, **k: drawn.append(self))
    args = ["partition", "--dataset", "digits", "--root", str(digits_root), "--clients", "20", "--classes-per-client", "5"]
    assert main([*args, "--alpha", "1000000", "--out", str(tmp_path / "a.npz"), "--heatmap", str(tmp_path / "a.png")]) == 0
    assert main([*args, "--alpha", "0.1", "--out", str(tmp_path / "b.npz"), "--heatmap", str(tmp_path / "b.png")]) == 0
    even, skewed = (fig.axes[0] for fig in drawn)
    assert even.get_title() == "Digits ExDir(5, 1000000)"  # as in the file names and tables, not 1e+06
    # near-equal counts: a linear scale from 0, not a log scale stretched over a few samples
    assert type(even.collections[0].norm).__name__ == "Normalize" and even.collections[0].norm.vmin == 0
    assert type(skewed.collections[0].norm).__name__ == "LogNorm"  # counts spanning a factor of 10 and more


def test_heatmap_pdf_has_no_creation_date(digits_root, tmp_path):
    args = ["partition", "--dataset", "digits", "--root", str(digits_root), "--clients", "8", "--classes-per-client", "2",
            "--alpha", "0.5"]
    for name in ("a", "b"):
        assert main([*args, "--out", str(tmp_path / f"{name}.npz"), "--heatmap", str(tmp_path / f"{name}.pdf")]) == 0
    assert b"CreationDate" not in (tmp_path / "a.pdf").read_bytes()
    assert (tmp_path / "a.pdf").read_bytes() == (tmp_path / "b.pdf").read_bytes()  # a re-run leaves a clone clean
