"""The round loop and local SGD: FedAvg = centralised SGD, determinism, schedules, evaluation."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from conftest import comparable, make_federation

from fedgmh.algorithms import get_algorithm
from fedgmh.cards import card
from fedgmh.config import EngineOptions, TrainConfig
from fedgmh.engine import evaluate_clients, local_train, run_rounds, select_clients, should_evaluate
from fedgmh.train import run_training


@pytest.mark.parametrize("clients", [[[0, 1, 2, 1]] * 3, [[0, 1, 1], [2, 2, 0, 1, 0], [1, 2]]], ids=["identical", "different"])
def test_fedavg_of_full_batch_clients_equals_centralised_gradient_descent(clients):
    # One full-batch step per round on each client, averaged by train size, is one GD step on
    # the pooled data (the size-weighted mean of client gradients is the pooled gradient).
    fed = make_federation(clients, batch_size=100, lr=0.05, lr_decay=1.0)
    if clients[0] == clients[1]:  # identical clients: the very same samples
        fed.train_idx = [fed.train_idx[0]] * len(clients)
    algo = get_algorithm("fedavg")(fed, card("fedavg").options())  # weighting=size
    model = fed.model
    pooled = torch.cat(fed.train_idx)
    x, y = fed.images[pooled], fed.labels[pooled]
    central = torch.optim.SGD(model.parameters(), lr=0.05)
    for rnd in range(3):
        algo.send(rnd, [0, 1, 2])
        for c in (0, 1, 2):
            algo.train_client(rnd, c)
        algo.aggregate(rnd, [0, 1, 2])
        central.zero_grad()
        F.cross_entropy(model(x), y).backward()
        central.step()
    for name, p in model.named_parameters():
        torch.testing.assert_close(algo.global_params[name], p.detach(), rtol=1e-4, atol=1e-6)


def test_local_train_returns_new_tensors_and_respects_frozen_and_grad_hook():
    fed = make_federation([[0, 1, 0, 1]])
    start = fed.initial_params()
    snapshot = {k: v.clone() for k, v in start.items()}
    result = local_train(fed, start, 0, trainable=lambda k: k.startswith("head."))
    assert all(torch.equal(start[k], snapshot[k]) for k in start)  # input untouched
    assert torch.equal(result.params["body.0.weight"], start["body.0.weight"])
    assert not torch.equal(result.params["head.weight"], start["head.weight"])
    assert result.num_samples == 4
    zeroed = local_train(fed, start, 0, grad_hook=lambda k, p, g, extra: torch.zeros_like(g))
    assert all(torch.equal(zeroed.params[k], start[k]) for k in start)


def test_drop_last_and_batches_cover_each_sample_once_per_epoch():
    fed = make_federation([list(range(3)) * 3], batch_size=4)
    batches = list(fed.shuffled_batches(0))
    assert [len(b) for b in batches] == [4, 4, 1]
    assert sorted(torch.cat(batches).tolist()) == fed.train_idx[0].tolist()
    fed.options = dataclasses.replace(fed.options, drop_last=True)
    assert [len(b) for b in fed.shuffled_batches(0)] == [4, 4]


@pytest.mark.parametrize("drop_last", [False, True])
def test_epoch_indices_are_one_randperm_draw_cut_to_full_batches(drop_last):
    fed = make_federation([list(range(3)) * 3], batch_size=4, drop_last=drop_last)
    idx, state = fed.train_idx[0], fed.generator.get_state()
    order = torch.randperm(9, generator=torch.Generator().manual_seed(0).set_state(state))
    expected = idx[order][: 8 if drop_last else 9]
    assert torch.equal(fed.epoch_indices(0), expected)
    fed.generator.set_state(state)
    assert torch.equal(torch.cat(list(fed.shuffled_batches(0))), expected)  # the batches are that epoch, in order
    assert torch.equal(fed.epoch_indices(0, shuffle=False), idx[: 8 if drop_last else 9])
    small = make_federation([[0, 1, 2]], batch_size=4, drop_last=True)  # no full batch: an empty epoch
    assert len(small.epoch_indices(0)) == 0 and list(small.shuffled_batches(0)) == []


def test_lr_decays_once_per_participation():
    fed = make_federation([[0, 1], [1, 0]], lr=0.1, lr_decay=0.5)
    fed.participations[1] = 3
    assert fed.client_lr(0) == pytest.approx(0.1)
    assert fed.client_lr(1) == pytest.approx(0.1 * 0.5**3)


def test_lr_decays_once_per_round_with_lr_decay_unit_round():
    fed = make_federation([[0, 1], [1, 0]], lr=0.1, lr_decay=0.5, lr_decay_unit="round")
    fed.participations[1] = 3
    fed.current_round = 2
    assert fed.client_lr(0) == pytest.approx(0.1 * 0.5**2)  # never trained: still decayed, per round
    assert fed.client_lr(1) == pytest.approx(0.1 * 0.5**2)


def test_play_round_sets_the_round_that_round_decay_reads():
    from fedgmh.engine import play_round
    from fedgmh.train import resolve_options

    fed = make_federation([[0, 1, 0, 1], [1, 0, 1, 0]], lr=0.1, lr_decay=0.5, lr_decay_unit="round")
    algo = get_algorithm("fedavg")(fed, resolve_options("fedavg", {})[0])
    seen = []
    original = fed.client_lr
    fed.client_lr = lambda c: seen.append(original(c)) or original(c)  # type: ignore[method-assign]
    play_round(fed, algo, 3, [0, 1], evaluate=False)
    assert len(seen) == 2 and all(lr == pytest.approx(0.1 * 0.5**3) for lr in seen)


def test_fedfomo_training_view_follows_the_round_decay():
    from fedgmh.engine import play_round
    from fedgmh.train import resolve_options

    fed = make_federation([[0, 1, 0, 1, 1]] * 6, lr=0.1, lr_decay=0.5, lr_decay_unit="round")
    algo = get_algorithm("fedfomo")(fed, resolve_options("fedfomo", {})[0])
    play_round(fed, algo, 3, [0, 1], evaluate=False)
    assert algo.train_fed.client_lr(4) == pytest.approx(0.1 * 0.5**3)


def test_evaluation_pools_samples_and_reports_client_spread():
    fed = make_federation([[0, 1, 0, 1], [1, 1, 1, 1, 1, 1, 1, 1]], test_per_client=100)
    params = fed.initial_params()
    metrics = evaluate_clients(fed, lambda c: params)
    logits = fed.model(fed.images)
    hits = (logits.argmax(1) == fed.labels).float()
    per_client = [hits[idx].mean().item() for idx in fed.test_idx]
    assert metrics["test_acc"] == pytest.approx(hits[torch.cat(fed.test_idx)].mean().item())
    assert metrics["test_acc_mean"] == pytest.approx(np.mean(per_client))
    assert metrics["test_acc_std"] == pytest.approx(np.std(per_client))


def test_evaluation_schedule():
    every = EngineOptions()
    assert all(should_evaluate(r, 10, every) for r in range(11))
    last3 = EngineOptions(eval_last=3)
    assert [r for r in range(11) if should_evaluate(r, 10, last3)] == [8, 9, 10]
    sparse = EngineOptions(eval_every=4)
    assert [r for r in range(11) if should_evaluate(r, 10, sparse)] == [0, 4, 8, 10]


def test_round_loop_order_and_selection_size():
    calls = []

    class Recorder:
        def send(self, rnd, selected):
            calls.append(("send", rnd, tuple(selected)))

        def eval_params(self, client):
            calls.append(("eval", client))
            return params

        def forward(self, params, x):
            return fed.forward(params, x)

        def train_client(self, rnd, client):
            from fedgmh.engine import LocalResult

            calls.append(("train", client))
            return LocalResult(params, 1.0, 1)

        def aggregate(self, rnd, selected):
            calls.append(("aggregate", rnd))

    fed = make_federation([[0, 1]] * 5)
    params = fed.initial_params()
    rows = run_rounds(fed, Recorder(), rounds=2, join_ratio=0.4)
    assert [r["round"] for r in rows] == [0, 1, 2]  # rounds + 1 iterations, like PFLlib
    first_round = calls[: calls.index(("aggregate", 0)) + 1]
    kinds = [c[0] for c in first_round]
    assert kinds == ["send"] + ["eval"] * 5 + ["train"] * 2 + ["aggregate"]
    assert len(first_round[0][2]) == 2 and len(set(first_round[0][2])) == 2
    assert fed.participations.sum() == 4  # the last iteration only evaluates
    assert calls[-1] == ("eval", 4)


def test_select_clients_replays_the_draws_of_the_round_loop():
    # tools/pflib_compare hands PFLlib our client draws by replaying select_clients on
    # RandomState(seed): that must be exactly the sequence run_rounds trains
    sent = []

    class Recorder:
        def send(self, rnd, selected):
            sent.append(list(selected))

        def eval_params(self, client):
            return params

        def forward(self, params, x):
            return fed.forward(params, x)

        def train_client(self, rnd, client):
            from fedgmh.engine import LocalResult

            return LocalResult(params, 1.0, 1)

        def aggregate(self, rnd, selected):
            pass

    fed = make_federation([[0, 1]] * 7, seed=5)
    params = fed.initial_params()
    run_rounds(fed, Recorder(), rounds=4, join_ratio=0.3)
    rng = np.random.RandomState(fed.seed)
    assert sent == [select_clients(rng, 7, 0.3) for _ in range(5)]
    assert all(len(s) == 2 for s in sent) and len({tuple(s) for s in sent}) > 1
    assert select_clients(np.random.RandomState(0), 7, 0.01) != []  # at least one client


def _train(tmp_path, digits_partition, digits_root, name, algorithm, seed=0, **overrides):
    config = TrainConfig(dataset="digits", root=str(digits_root), partition=str(digits_partition), algorithm=algorithm,
                         rounds=2, join_ratio=0.5, local_epochs=1, batch_size=32, seed=seed, device="cpu",
                         overrides={k: str(v) for k, v in overrides.items()})
    run_training(config, tmp_path / name, progress=False)
    return pd.read_csv(tmp_path / name / "metrics.csv").drop(columns="seconds")


def test_run_json_counts_the_useful_share_of_the_training_sample_passes(tmp_path, digits_partition, digits_root):
    """Client by client every executed pass is useful; the batched step (vectorise=on) executes the
    same useful passes plus the padding of partial batches, never a step of a client without a batch."""
    passes = {}
    for mode in ("off", "on"):
        _train(tmp_path, digits_partition, digits_root, mode, "fedavg", vectorise=mode)
        passes[mode] = json.loads((tmp_path / mode / "run.json").read_text())["sample_passes"]
    assert passes["off"]["useful"] == passes["off"]["executed"] > 0 and passes["off"]["useful_share"] == 1.0
    assert passes["on"]["useful"] == passes["off"]["useful"] < passes["on"]["executed"]
    assert passes["on"]["useful_share"] == passes["on"]["useful"] / passes["on"]["executed"]


@pytest.mark.parametrize("algorithm", ["fedavg", "fedgmh"])
def test_same_seed_identical_metrics_other_seed_different(tmp_path, digits_partition, digits_root, algorithm):
    a = _train(tmp_path, digits_partition, digits_root, "a", algorithm)
    b = _train(tmp_path, digits_partition, digits_root, "b", algorithm)
    c = _train(tmp_path, digits_partition, digits_root, "c", algorithm, seed=1)
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert not a.equals(c)
    assert list(a.columns[:5]) == ["round", "test_acc", "test_acc_mean", "test_acc_std", "test_loss"]


@pytest.mark.parametrize("name", ["fedgmh", "fedper", "ditto", "fedamp", "fedrod"])
def test_cached_evaluation_gives_exactly_the_numbers_of_a_full_evaluation(name, monkeypatch):
    from fedgmh.train import resolve_options

    results, passes = {}, {}
    for cached in (True, False):
        algo_options, _ = resolve_options(name, {})
        fed = make_federation([[0, 1, 0, 1], [1, 2, 2], [0, 2, 2, 1], [2, 1, 1], [0, 0, 2], [1, 0, 2]], num_classes=3,
                              test_per_client=3, eval_cache=cached)
        algorithm = get_algorithm(name)(fed, algo_options)
        calls = []
        original = algorithm.forward
        monkeypatch.setattr(algorithm, "forward", lambda p, x, f=original: calls.append(len(x)) or f(p, x))
        results[cached] = pd.DataFrame(run_rounds(fed, algorithm, rounds=4, join_ratio=0.34)).drop(columns="seconds")
        passes[cached] = len(calls)
    pd.testing.assert_frame_equal(results[True], results[False], check_exact=True)
    if name in ("fedgmh", "ditto", "fedamp"):  # unselected clients keep their model: fewer passes
        assert passes[True] < passes[False]


def test_clients_sharing_an_unchanged_model_are_not_evaluated_again():
    from fedgmh.engine import EvalCache

    fed = make_federation([[0, 1]] * 4, test_per_client=2)
    params = fed.initial_params()
    cache, calls = EvalCache(), []

    def forward(p, x):
        calls.append(len(x))
        return fed.forward(p, x)

    first = evaluate_clients(fed, lambda c: params, forward, cache)
    assert sum(calls) == 8  # every client's test split once
    assert comparable(evaluate_clients(fed, lambda c: params, forward, cache)) == comparable(first)
    assert sum(calls) == 8  # nothing changed: nothing evaluated
    changed = {**params, "head.bias": params["head.bias"] + 1.0}
    evaluate_clients(fed, lambda c: changed if c == 0 else params, forward, cache)
    assert sum(calls) == 10  # only client 0 again
    params["head.bias"].add_(1.0)  # an in-place change is seen too (tensor version counter)
    evaluate_clients(fed, lambda c: params, forward, cache)
    assert sum(calls) == 18
