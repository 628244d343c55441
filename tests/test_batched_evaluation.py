"""Many clients' evaluation in a few vmap passes (`batched_evaluation.evaluate_many`, engine option
eval_batched) against one pass per client (`engine.predict`)."""

import dataclasses
import math

import pandas as pd
import pytest
import torch

from conftest import make_federation
from fedgmh import engine
from fedgmh.algorithms import get_algorithm
from fedgmh.cards import algorithm_names
from fedgmh.engine import Checkpoint, batched_evaluation, evaluate_clients, play_round, run_rounds, vectorised
from fedgmh.train import resolve_options

# unequal test splits (3, 3, 3, 1, 3 samples): padding and masking are exercised
CLIENTS = [[0, 1, 0, 1, 2, 2, 1, 0, 1], [1, 2, 2], [0, 2, 2, 1, 0, 0, 1], [2], [0, 0, 2, 1, 1]]


def _trained(name, overrides=None, **engine_options):
    """An algorithm after one round in which clients 0, 2 and 3 trained: clients' models differ."""
    options, _ = resolve_options(name, overrides or {})
    fed = make_federation(CLIENTS, num_classes=3, batch_size=3, local_epochs=2, lr=0.1, vectorise="off", **engine_options)
    algorithm = get_algorithm(name)(fed, options)
    play_round(fed, algorithm, 0, [0, 2, 3], evaluate=False)
    return fed, algorithm


def _same_evaluation(a, b):
    assert list(a["client_acc"]) == list(b["client_acc"])  # counts: exactly
    assert a["test_acc"] == b["test_acc"]
    assert math.isclose(a["test_loss"], b["test_loss"], rel_tol=1e-12)


@pytest.mark.parametrize("name", algorithm_names())
def test_every_algorithms_clients_evaluate_in_vmap_passes_as_one_by_one(name, float64, monkeypatch):
    fed, algorithm = _trained(name)
    one_by_one = evaluate_clients(fed, algorithm.eval_params, algorithm.forward)
    passes = []
    monkeypatch.setattr(engine.evaluation, "predict", lambda *a, **k: pytest.fail("evaluated client by client"))
    monkeypatch.setattr(batched_evaluation, "_evaluate_pass", lambda *a, f=batched_evaluation._evaluate_pass: passes.append(a[2].shape[0]) or f(*a))
    together = evaluate_clients(fed, algorithm.eval_params, algorithm.forward, many=batched_evaluation.evaluate_many)
    assert passes == [4, 1]  # two buckets: the splits of 3 samples, the split of 1
    _same_evaluation(one_by_one, together)


@pytest.mark.parametrize("name", ["fedavg", "fedgmh"])
def test_batched_evaluation_with_the_label_prior_mask(name, float64):
    fed, algorithm = _trained(name, eval_prior="mask")
    one_by_one = evaluate_clients(fed, algorithm.eval_params, algorithm.forward)
    together = evaluate_clients(fed, algorithm.eval_params, algorithm.forward, many=batched_evaluation.evaluate_many)
    _same_evaluation(one_by_one, together)
    fed.options = dataclasses.replace(fed.options, eval_prior="none")
    unmasked = evaluate_clients(fed, algorithm.eval_params, algorithm.forward, many=batched_evaluation.evaluate_many)
    assert unmasked["test_loss"] > together["test_loss"]  # the mask took part: absent labels' logits removed

def test_passes_hold_at_most_their_share_of_clients_and_of_each_clients_samples(float64, monkeypatch):
    fed, algorithm = _trained("fedgmh")
    one_by_one = evaluate_clients(fed, algorithm.eval_params, algorithm.forward)
    fed.options = dataclasses.replace(fed.options, eval_batch_size=2)  # each client's 3 samples: 2 + 1
    monkeypatch.setattr(batched_evaluation, "EVAL_SAMPLES_PER_PASS", 4)  # 2 clients of 2 samples per pass
    calls = []

    def counted(params, x):
        calls.append(x.shape[0])
        return algorithm.forward(params, x)

    together = evaluate_clients(fed, algorithm.eval_params, counted, many=batched_evaluation.evaluate_many)
    # the bucket of 3-sample splits in passes [0, 1], [2, 4], each of samples 0-1 then 2; then client 3's
    # bucket of 1-sample splits
    assert calls == [2, 1, 2, 1, 1]
    _same_evaluation(one_by_one, together)


def test_a_padded_copy_of_a_sample_with_an_infinite_loss_adds_nothing(float64):
    fed = make_federation(CLIENTS, num_classes=3)
    logits = torch.tensor([-math.inf, 0.0, 0.0])  # every label-0 sample has an infinite loss
    forward = lambda params, x: params["logits"].expand(len(x), -1)  # noqa: E731
    # client 3's one test sample (label 2) is padded with dataset sample 0 (label 0)
    assert fed.labels[0] == 0 and len(fed.test_idx[3]) == 1
    sums = batched_evaluation.evaluate_many(fed, [{"logits": logits}] * 2, [0, 3], forward)
    assert sums[1, 1] == pytest.approx(math.log(2))
    assert sums[0, 1] == math.inf


def test_models_that_cannot_be_stacked_are_evaluated_one_by_one(float64):
    fed, algorithm = _trained("fedavg")
    model = algorithm.global_params
    reordered = dict(reversed(model.items()))
    wider = {**model, "head.bias": torch.zeros(4)}
    other_dtype = {**model, "head.bias": model["head.bias"].float()}
    for odd in (reordered, wider, other_dtype):
        assert not engine.can_stack([model, odd])
    assert engine.can_stack([model, {k: v.clone() for k, v in model.items()}])
    called = []
    with pytest.raises(RuntimeError):  # client 1's wider head reaches the one-by-one pass, which cannot use it
        evaluate_clients(fed, lambda c: wider if c == 1 else model, algorithm.forward, many=lambda *a: called.append(1))
    assert not called


def test_the_round_loop_evaluates_in_passes_with_eval_batched_unless_evaluation_draws_at_random(float64, monkeypatch):
    passes = []
    monkeypatch.setattr(batched_evaluation, "evaluate_many", lambda *a, f=batched_evaluation.evaluate_many: passes.append(1) or f(*a))
    for name, overrides, batched, expected in [("fedavg", {}, True, True), ("fedavg", {}, False, False),
                                               ("fedcp", {"policy": "gumbel"}, True, False), ("fedcp", {}, True, True)]:
        options, _ = resolve_options(name, overrides)
        fed = make_federation(CLIENTS, num_classes=3, batch_size=3, eval_batched=batched)
        passes.clear()
        run_rounds(fed, get_algorithm(name)(fed, options), rounds=2, join_ratio=0.6)
        assert bool(passes) == expected, (name, overrides, batched)


@pytest.mark.parametrize("name", ["fedavg", "fedgmh", "fedrod", "ditto"])
def test_a_run_evaluated_in_passes_gives_the_metrics_of_one_pass_per_client(name, float64):
    runs = []
    for batched in (False, True):
        options, _ = resolve_options(name, {})
        fed = make_federation(CLIENTS, num_classes=3, batch_size=3, local_epochs=2, lr=0.1, eval_batched=batched)
        runs.append(pd.DataFrame(run_rounds(fed, get_algorithm(name)(fed, options), rounds=3, join_ratio=0.6)).drop(columns="seconds"))
    pd.testing.assert_frame_equal(runs[1], runs[0], check_exact=False, rtol=1e-9)


def test_a_clients_sums_do_not_depend_on_the_clients_it_is_evaluated_with():
    """float32, as runs train: the same bits alone, with others, and at another place in a pass."""
    _same_bits_whatever_the_pass_mates(*_trained("ditto"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_cuda_a_clients_sums_do_not_depend_on_the_clients_it_is_evaluated_with(monkeypatch):
    """As `fedgmh train` runs on CUDA: deterministic cuDNN, no TF32."""
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", True)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    _same_bits_whatever_the_pass_mates(*_trained("ditto", device="cuda"))


def _same_bits_whatever_the_pass_mates(fed, algorithm):
    models = [algorithm.eval_params(c) for c in range(fed.num_clients)]
    alone = batched_evaluation.evaluate_many(fed, [models[2]], [2], algorithm.forward)
    for clients in ([0, 1, 2, 3, 4], [2, 4], [4, 3, 2]):
        together = batched_evaluation.evaluate_many(fed, [models[c] for c in clients], clients, algorithm.forward)
        assert torch.equal(together[clients.index(2)], alone[0]), clients


@pytest.mark.parametrize("name", ["ditto", "fedamp", "fedcp", "fedgmh"])
def test_a_resumed_run_evaluated_in_passes_ends_with_the_metrics_of_an_uninterrupted_one(name, tmp_path):
    """float32; the evaluation cache is not in the snapshot, so a resumed run evaluates other clients afresh."""

    def run(checkpoint=None, on_round=None):
        options, _ = resolve_options(name, {})
        fed = make_federation(CLIENTS, num_classes=3, batch_size=3, local_epochs=2, lr=0.1, eval_batched=True)
        rows = run_rounds(fed, get_algorithm(name)(fed, options), rounds=6, join_ratio=0.4, on_round=on_round, checkpoint=checkpoint)
        return pd.DataFrame(rows).drop(columns=["seconds", "client_acc"], errors="ignore")

    def stop_after_round_2(row):
        if row["round"] == 2:
            raise KeyboardInterrupt

    checkpoint = Checkpoint(tmp_path / "ck.pt", every=1, identity={"run": name})
    with pytest.raises(KeyboardInterrupt):
        run(checkpoint, stop_after_round_2)
    pd.testing.assert_frame_equal(run(checkpoint), run(), check_exact=True)


def _two_runs(first: str = "ditto", second: str = "ditto"):
    """Two runs sharing their data, as a group's do; the second's clients 0 and 1 have swapped their test
    splits (of equal length: the same buckets), so each run's rows must come from its own buckets."""
    runs = [_trained(first), _trained(second)]
    b = runs[1][0]
    b.images, b.labels = runs[0][0].images, runs[0][0].labels
    b.test_idx = [b.test_idx[i] for i in (1, 0, 2, 3, 4)]
    b.__dict__.pop("test_buckets", None)
    return runs


def _request(fed, algorithm, clients):
    return batched_evaluation.EvalRequest(fed, [algorithm.eval_params(c) for c in clients], clients, algorithm.forward)


def test_two_runs_share_passes_and_each_gets_the_bits_of_its_own(float64, monkeypatch):
    """A group's evaluation (`evaluate_requests`): one set of passes for both runs' models, each run's
    sums equal to its own passes' bit for bit, its useful samples counted as alone; fewer samples
    executed than in the runs' own passes, each filled up with copies."""
    (fa, a), (fb, b) = _two_runs()
    clients_a, clients_b = [0, 1, 3], [0, 4]
    with torch.no_grad():
        for value in fb.model.parameters():  # the second run's models differ from the first's
            value.add_(0.01)
    b.personal = {c: {k: v + 0.01 for k, v in b.eval_params(c).items()} for c in range(fb.num_clients)}
    alone = [batched_evaluation.evaluate_requests([_request(fed, algorithm, clients)])[0]
             for fed, algorithm, clients in ((fa, a, clients_a), (fb, b, clients_b))]
    counts_alone = [fed.evaluation_passes.state() for fed in (fa, fb)]
    passes, shared = [], []
    monkeypatch.setattr(batched_evaluation, "_evaluate_pass", lambda *a, f=batched_evaluation._evaluate_pass: passes.append(a[2].shape[0]) or f(*a))
    together = batched_evaluation.evaluate_requests([_request(fa, a, clients_a), _request(fb, b, clients_b)], shared)
    assert shared == [2] and passes == [4, 1]  # the bucket of splits of 3 (4 models: 2 passes alone), that of 1
    assert not torch.equal(alone[0][0], alone[1][0])  # client 0: the runs' models differ
    assert all(torch.equal(x, y) for x, y in zip(together, alone))
    counts = [fed.evaluation_passes.state() for fed in (fa, fb)]
    assert [c[0] - own[0] for c, own in zip(counts, counts_alone)] == [own[0] for own in counts_alone]  # useful: as alone
    assert sum(c[1] - own[1] for c, own in zip(counts, counts_alone)) < sum(own[1] for own in counts_alone)


def test_runs_whose_forwards_differ_evaluate_in_passes_of_their_own():
    (fa, a), (fb, b) = _two_runs("fedavg", "fedrod")
    shared = []
    batched_evaluation.evaluate_requests([_request(fa, a, [0, 1]), _request(fb, b, [0, 1])], shared)
    assert shared == [1, 1]
