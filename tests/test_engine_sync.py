"""Host round-trips of the engine: evaluation and training read the device once per round, and the
numbers are exactly those of reading every client's sums one by one (as the engine used to).

On a CPU a "read" costs nothing, but it is the same code path as on a GPU, where each one waits for
every queued kernel; the tests count the calls that move a tensor's value to Python.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch
from conftest import comparable, make_federation

from fedgmh.algorithms import get_algorithm
from fedgmh.engine import LocalResult, check_trained, evaluate_clients, play_round, predict
from fedgmh.engine import rounds as round_loop
from fedgmh.train import resolve_options

READS = ("__float__", "__int__", "__bool__", "item", "tolist", "numpy", "cpu", "__array__")
CLIENTS = [[0, 1, 0, 1, 1], [1, 2, 2, 1], [0, 2, 2, 1, 0, 0], [2, 1, 1], [0, 0, 2, 1], [1, 0, 2]]


@contextlib.contextmanager
def counted_reads():
    """Count the calls of the Tensor methods that hand a value to Python."""
    counts = {"reads": 0}
    originals = {name: getattr(torch.Tensor, name) for name in READS}

    def counting(original):
        def read(self, *args, **kwargs):
            counts["reads"] += 1
            return original(self, *args, **kwargs)

        return read

    for name, original in originals.items():
        setattr(torch.Tensor, name, counting(original))
    try:
        yield counts
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)


def _one_by_one(fed, params_of):
    """The metrics of `evaluate_clients` from per-client reads (the engine's way before reads were batched)."""
    correct, losses = [], []
    for client in range(fed.num_clients):
        hits, sample_losses = predict(fed, params_of(client), fed.test_idx[client])
        correct.append(float(hits.sum()))
        losses.append(float(sample_losses.double().sum()))
    correct, losses = np.array(correct), np.array(losses)
    total = np.array([len(idx) for idx in fed.test_idx], dtype=float)
    accs = correct / total
    return {"test_acc": float(correct.sum() / total.sum()), "test_acc_mean": float(accs.mean()),
            "test_acc_std": float(accs.std()), "test_loss": float(losses.sum() / total.sum()), "client_acc": accs}


def test_evaluation_reads_once_per_call_and_gives_the_numbers_of_one_read_per_client():
    fed = make_federation(CLIENTS, num_classes=3, test_per_client=3)
    models = {c: {k: v + 0.01 * c for k, v in fed.initial_params().items()} for c in range(fed.num_clients)}
    with counted_reads() as counts:
        metrics = evaluate_clients(fed, models.__getitem__)
    assert counts["reads"] == 1  # was two per client
    assert comparable(metrics) == comparable(_one_by_one(fed, models.__getitem__))  # exactly, not approximately


@pytest.mark.parametrize("vectorise", ["off", "on"])
@pytest.mark.parametrize("name", ["fedavg", "fedrep", "perfedavg", "fedgmh"])
def test_a_round_reads_the_device_a_fixed_number_of_times_and_sums_losses_as_before(name, vectorise, monkeypatch):
    fed = make_federation(CLIENTS, num_classes=3, test_per_client=3, batch_size=2, local_epochs=2, vectorise=vectorise)
    algorithm = get_algorithm(name)(fed, resolve_options(name, {"double_train": True} if name == "perfedavg" else {})[0])
    losses, samples = [], []  # each trained client's loss as it left local training (read below, one by one)
    train_clients = round_loop.train_clients

    def recording(fed, algorithm, rnd, selected):
        results = train_clients(fed, algorithm, rnd, selected)
        losses.extend(r._loss.clone() if isinstance(r._loss, torch.Tensor) else r._loss for r in results)
        samples.extend(r.num_samples for r in results)
        return results

    monkeypatch.setattr(round_loop, "train_clients", recording)
    reads = []
    for rnd, selected in enumerate([[0, 2, 4], [1, 3, 5], [0, 1, 5]]):
        before = len(losses)
        with counted_reads() as counts:
            row = play_round(fed, algorithm, rnd, selected)
        reads.append(counts["reads"])
        expected = 0.0
        for loss in losses[before:]:
            expected += float(loss)  # the engine's old way: one float per client, summed in order
        assert row["train_loss"] == expected / sum(samples[before:])  # bit for bit
        if name == "fedavg":
            assert samples[before:] == [len(fed.train_idx[c]) * 2 for c in selected]  # E = 2 epochs each
    if name != "fedgmh":  # (FedGMH's prototypes read each client's label set)
        # evaluation once, training once: not per client, phase, batch or parameter, also when a
        # client trains in two phases (FedRep: head, then body) or twice (Per-FedAvg's double_train)
        assert reads == [2, 2, 2]


def test_check_trained_finds_each_kind_of_divergence_in_one_read():
    ok = LocalResult({"w": torch.ones(3)}, torch.tensor(2.5), 4)
    infinite_loss = LocalResult({"w": torch.ones(3)}, float("inf"), 4)  # FedRoD's Balanced Softmax: not divergence
    bad_param = LocalResult({"w": torch.tensor([1.0, float("inf")]), "n": torch.ones(2, dtype=torch.long)}, torch.tensor(1.0), 4)
    nan_loss = LocalResult({"w": torch.ones(3)}, torch.tensor(float("nan")), 4)
    with counted_reads() as counts:
        problems = check_trained([ok, infinite_loss, bad_param, nan_loss])
    assert problems[:2] == [None, None]
    assert "parameter w is no longer finite" in problems[2] and problems[3] == "the training loss is nan"
    assert counts["reads"] == 2  # one read for all, then one for the parameter of the client that diverged
    assert ok.loss_sum == 2.5 and isinstance(ok.loss_sum, float) and isinstance(ok._loss, float)
    assert check_trained([]) == []
