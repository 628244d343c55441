"""Shared fixtures: where the offline data mirror lives (tests skip when it is absent)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def shared_data_dir() -> Path:
    """The read-only dataset mirror: $FEDGMH_SHARED_DATA, else ../shared/data next to the repo."""
    env = os.environ.get("FEDGMH_SHARED_DATA")
    return Path(env) if env else REPO_ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    path = shared_data_dir()
    if not (path / "MNIST" / "raw").is_dir():
        pytest.skip(f"offline data mirror not found at {path} (set FEDGMH_SHARED_DATA to a folder laid out like shared/data)")
    return path


def comparable(row: dict) -> dict:
    """A metrics row with its per-client accuracy array as a list, so rows compare with `==`."""
    return {k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in row.items()}


def batched_plain_sgd(fed, starts, clients, trainable=None):
    """Plain SGD on cross-entropy for every client of `clients` from `starts` (one per client), on the
    batched path (`vectorised.train_phases_many`, one phase each): the batched twin of `engine.local_train`."""
    from fedgmh.engine.vectorised import Phase, train_phases_many

    return [own[0] for own in train_phases_many(fed, [[Phase(start, trainable=trainable)] for start in starts], clients)]


def make_federation(client_labels, *, batch_size=4, local_epochs=1, lr=0.1, seed=0, num_classes=None, test_per_client=3,
                    device="cpu", **engine):
    """A tiny federation on random 1x28x28 images: client i gets train labels `client_labels[i]`
    (drawn on the CPU, then placed on `device`, so a CUDA federation holds the CPU one's numbers)."""
    import torch

    from fedgmh.config import EngineOptions
    from fedgmh.engine import Federation
    from fedgmh.model import FedAvgCNN, use_unfold_convolutions

    num_classes = num_classes or (max(max(c) for c in client_labels) + 1)
    gen = torch.Generator().manual_seed(1234 + seed)
    labels, train_idx, test_idx = [], [], []
    for client in client_labels:
        start = len(labels)
        labels.extend(client)
        train_idx.append(torch.arange(start, len(labels)))
        start = len(labels)
        labels.extend(client[:test_per_client])
        test_idx.append(torch.arange(start, len(labels)))
    images = torch.randn(len(labels), 1, 28, 28, generator=gen)
    torch.manual_seed(seed)
    model = FedAvgCNN(1, num_classes, 28)
    options = EngineOptions(**engine)
    if options.conv == "unfold":  # as fedgmh.train.build_federation builds the model
        use_unfold_convolutions(model)
    return Federation(
        model=model.to(device),
        images=images.to(device),
        labels=torch.tensor(labels, device=device),
        train_idx=[idx.to(device) for idx in train_idx],
        test_idx=[idx.to(device) for idx in test_idx],
        num_classes=num_classes,
        batch_size=batch_size,
        local_epochs=local_epochs,
        lr=lr,
        options=options,
        seed=seed,
    )


@pytest.fixture
def digits_root(tmp_path_factory) -> Path:
    """The embedded dataset, prepared once per test session."""
    from fedgmh import data

    root = tmp_path_factory.getbasetemp() / "digits_data"
    data.download("digits", root)
    return root


@pytest.fixture
def one_thread():
    """One torch thread: the tests' tiny models run many times faster so on a busy machine (a
    second intra-op thread only waits). Files of such tests use it for every test (pytestmark)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def float64():
    """Computations in float64 (default dtype), e.g. for comparisons a float32 rounding could flip."""
    import torch

    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(default)


@pytest.fixture
def digits_partition(digits_root, tmp_path):
    """An ExDir(2, 0.5) partition of the embedded digits over 6 clients."""
    from fedgmh.cli import main

    out = tmp_path / "part.npz"
    assert main(["partition", "--dataset", "digits", "--root", str(digits_root), "--clients", "6",
                 "--classes-per-client", "2", "--alpha", "0.5", "--out", str(out)]) == 0
    return out



@contextlib.contextmanager
def stopping_after_a_snapshot():
    """Inside it, a training run writes its next snapshot and is then interrupted (what a killed
    session leaves: a snapshot and no record)."""
    from fedgmh import engine

    real_save = engine.Checkpoint.save

    def save_then_stop(self, snapshot):
        real_save(self, snapshot)
        raise KeyboardInterrupt

    engine.Checkpoint.save = save_then_stop
    try:
        yield
    finally:
        engine.Checkpoint.save = real_save
