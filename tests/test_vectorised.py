"""The vectorised training path (all selected clients in one vmap step) against the sequential one."""

import pandas as pd
import pytest
import torch

from conftest import make_federation
from fedgmh.algorithms import get_algorithm
from fedgmh.engine import local_train, run_rounds
from fedgmh.vectorised import local_train_many

# unequal client sizes (partial last batches, clients running out of batches early) and a
# client with fewer samples than one batch
CLIENTS = [[0, 1, 0, 1, 2, 2, 1, 0, 1], [1, 2, 2], [0, 2, 2, 1, 0, 0, 1], [2], [0, 0, 2, 1, 1]]


def _close(a, b, atol=1e-5):
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=atol)


@pytest.mark.parametrize("drop_last", [False, True])
def test_local_train_many_matches_sequential_local_train(drop_last):
    clients = [0, 2, 3, 4]
    feds = [make_federation(CLIENTS, batch_size=3, local_epochs=2, lr=0.2, drop_last=drop_last) for _ in range(2)]
    for fed in feds:
        fed.participations[:] = [0, 1, 3, 2, 0]  # different learning rates per client
    start = feds[0].initial_params()
    sequential = [local_train(feds[0], start, c) for c in clients]
    batched = local_train_many(feds[1], [start] * len(clients), clients)
    for s, b in zip(sequential, batched):
        _close(s.params, b.params)
        assert b.num_samples == s.num_samples
        assert b.loss_sum == pytest.approx(s.loss_sum, rel=1e-4, abs=1e-6)
    # the parameters really moved (by different amounts per client), and the generator advanced alike
    assert not torch.equal(batched[0].params["body.0.weight"], start["body.0.weight"])
    assert torch.equal(feds[0].generator.get_state(), feds[1].generator.get_state())


def test_a_client_without_batches_keeps_its_parameters():
    fed = make_federation(CLIENTS, batch_size=3, drop_last=True)  # client 3 (one sample) has no full batch
    start = fed.initial_params()
    result = local_train_many(fed, [start, start], [3, 0])
    assert result[0].num_samples == 0
    for k in start:
        assert torch.equal(result[0].params[k], start[k])
        assert result[0].params[k].data_ptr() != result[1].params[k].data_ptr()  # own storage, not a view


@pytest.mark.parametrize("name", ["fedavg", "fedper", "lgfedavg", "fedgmh", "gmh_oa", "fedgh"])
def test_vectorised_runs_give_the_sequential_metrics(name):
    from fedgmh.train import resolve_options

    runs = {}
    for mode in ("off", "on"):
        options, _ = resolve_options(name, {})
        fed = make_federation(CLIENTS, num_classes=3, batch_size=3, local_epochs=2, lr=0.1, test_per_client=3, vectorise=mode)
        algorithm = get_algorithm(name)(fed, options)
        calls = []
        original = algorithm.train_client
        algorithm.train_client = lambda rnd, client, f=original: calls.append(client) or f(rnd, client)
        runs[mode] = pd.DataFrame(run_rounds(fed, algorithm, rounds=4, join_ratio=0.6, seed=3)).drop(columns="seconds")
        assert bool(calls) == (mode == "off")  # "on" never trains client by client
    pd.testing.assert_frame_equal(runs["on"], runs["off"], check_exact=False, rtol=1e-3, atol=1e-4)


def test_algorithms_with_their_own_local_step_stay_sequential():
    from fedgmh.train import resolve_options

    for name, vectorisable in [("fedavg", True), ("fedgmh", True), ("fedprox", False), ("ditto", False), ("fedrep", False)]:
        options, _ = resolve_options(name, {})
        algorithm = get_algorithm(name)(make_federation(CLIENTS, num_classes=3), options)
        assert algorithm.vectorisable() is vectorisable, name
    options, _ = resolve_options("fedgmh", {"preset": "official"})  # drop_last: prototypes draw a shuffle per client
    assert not get_algorithm("fedgmh")(make_federation(CLIENTS, num_classes=3, drop_last=True), options).vectorisable()


def test_auto_selects_the_vectorised_path_only_on_cuda():
    assert make_federation(CLIENTS).vectorised is False  # CPU, vectorise=auto
    assert make_federation(CLIENTS, vectorise="on").vectorised is True


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_cuda_auto_vectorises_and_matches_the_sequential_path(monkeypatch):
    """The same arithmetic on CUDA, in plain fp32 (tf32 off, as `fedgmh train` by default). With
    `cudnn.deterministic` (what `fedgmh train` sets, for run-to-run identity) the sequential path's
    first-convolution weight gradient comes from a less precise deterministic cuDNN algorithm
    (~1e-3 relative on an H100), so the paths are compared here without it."""
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", False)
    clients = [0, 2, 3, 4]
    feds = []
    for _ in range(2):
        fed = make_federation(CLIENTS, batch_size=3, local_epochs=2, lr=0.2)
        fed.images, fed.labels, fed.model = fed.images.cuda(), fed.labels.cuda(), fed.model.cuda()
        fed.train_idx = [i.cuda() for i in fed.train_idx]
        fed.participations[:] = [0, 1, 3, 2, 0]
        feds.append(fed)
    assert feds[0].vectorised  # vectorise=auto on CUDA
    start = feds[0].initial_params()
    sequential = [local_train(feds[0], start, c) for c in clients]
    batched = local_train_many(feds[1], [start] * len(clients), clients)
    for s, b in zip(sequential, batched):
        _close(s.params, b.params, atol=1e-4)
        assert b.num_samples == s.num_samples
