"""Ditto, FedAMP and FedFomo (src/fedgmh/algorithms/personal.py) on tiny hand-made tensors and models."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import make_federation

from fedgmh.algorithms import get_algorithm
from fedgmh.algorithms.personal import (
    attention_weights, flatten, fomo_weights, proximal_hook, pull_toward, squared_distances, unflatten,
)
from fedgmh.engine import evaluate_clients, local_train
from fedgmh.errors import UserError
from fedgmh.train import resolve_options

LABELS = [[0, 0, 0, 1], [1, 2, 2, 2, 0, 1], [0, 1, 2, 2, 2]]


def build(name, client_labels=LABELS, batch_size=4, lr=0.1, **overrides):
    options, engine = resolve_options(name, overrides)
    fed = make_federation(client_labels, num_classes=3, batch_size=batch_size, lr=lr, lr_decay=engine.lr_decay, drop_last=engine.drop_last)
    return get_algorithm(name)(fed, options)


def perturbed(params, scale=0.05, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return {k: v + scale * torch.randn(v.shape, generator=gen) for k, v in params.items()}


def ce_gradient(fed, params, client):
    """Gradient of the mean cross-entropy over the client's whole train split."""
    params = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    idx = fed.train_idx[client]
    loss = F.cross_entropy(fed.forward(params, fed.images[idx]), fed.labels[idx])
    return dict(zip(params, torch.autograd.grad(loss, list(params.values()))))


def squared_distance(a, b):
    return float(squared_distances(flatten(a), flatten(b).unsqueeze(0)))


# ------------------------------------------------------------------------------------ shared pieces


def test_proximal_hook_adds_coef_times_distance_exactly():
    anchor = {"w": torch.tensor([1.0, -2.0, 0.5])}
    p, g = torch.tensor([1.5, 0.0, 0.5]), torch.tensor([0.25, -1.0, 3.0])
    assert torch.equal(proximal_hook(0.4)("w", p, g, {"anchor": anchor}), g + 0.4 * (p - anchor["w"]))
    assert torch.equal(proximal_hook(0.4)("w", p, torch.zeros(3), {"anchor": anchor}), 0.4 * (p - anchor["w"]))


def test_pull_toward_is_own_plus_weighted_differences():
    own, others = torch.tensor([1.0, 2.0]), torch.tensor([[3.0, 2.0], [1.0, 6.0]])
    out = pull_toward(own, others, torch.tensor([0.5, 0.25], dtype=torch.float64))
    torch.testing.assert_close(out, torch.tensor([2.0, 3.0]))  # 0.25*own + 0.5*a + 0.25*b
    params = {"a": torch.arange(6.0).view(2, 3), "b": torch.tensor([7.0])}
    flat = flatten(params)
    assert flat.tolist() == [0, 1, 2, 3, 4, 5, 7]
    assert all(torch.equal(v, params[k]) for k, v in unflatten(flat, params).items())
    assert squared_distances(own, others).tolist() == [4.0, 16.0]


# -------------------------------------------------------------------------------------------- Ditto


def test_ditto_hook_is_mu_times_distance_to_the_received_global_model(monkeypatch):
    algo = build("ditto", mu=0.5)
    global_before = algo.global_params
    algo.personal[0] = perturbed(global_before)
    personal, global_step = algo.start_training(0, 0)  # personal step first, then the global (FedAvg) step
    assert global_step.grad_hook is None and all(global_step.params[k] is v for k, v in global_before.items())
    assert personal.params is algo.personal[0] and personal.epochs == 1
    v, g = perturbed(global_before, seed=1), perturbed(global_before, seed=2)
    for k in v:
        assert torch.equal(personal.grad_hook(k, v[k], g[k], personal.extra), g[k] + 0.5 * (v[k] - global_before[k]))


def test_ditto_personal_step_is_proximal_sgd_from_the_personal_model():
    algo = build("ditto", batch_size=100, mu=0.5)  # one full batch per epoch, plocal_epochs = 1
    v, w = perturbed(algo.global_params), algo.global_params
    algo.personal[0] = v
    grads = ce_gradient(algo.fed, v, 0)
    algo.train_client(0, 0)
    for k in v:
        expected = v[k] - 0.1 * (grads[k] + 0.5 * (v[k] - w[k]))
        torch.testing.assert_close(algo.personal[0][k], expected)


def test_ditto_mu_pulls_the_personal_model_toward_the_global_model():
    distances = {}
    for mu in (0.0, 2.0):
        algo = build("ditto", mu=mu, batch_size=2)  # 3 steps of lr 0.1 on client 1
        w = algo.global_params
        algo.personal[1] = perturbed(w)
        start = squared_distance(algo.personal[1], w)
        algo.train_client(0, 1)
        distances[mu] = squared_distance(algo.personal[1], w)
    assert distances[2.0] < 0.8 * distances[0.0] and distances[2.0] < 0.8 * start


def test_ditto_global_model_is_the_train_size_weighted_average_of_global_steps():
    algo = build("ditto", mu=1.0)
    untouched = algo.personal[2]
    algo.send(0, [0, 1])
    for client in (0, 1):
        algo.train_client(0, client)
    uploads = {c: dict(p) for c, p in algo.uploads.items()}
    algo.aggregate(0, [0, 1])
    for k, v in algo.global_params.items():
        torch.testing.assert_close(v, (4 * uploads[0][k] + 6 * uploads[1][k]) / 10)
    assert algo.personal[2] is untouched  # unselected client
    assert not torch.equal(algo.personal[1]["head.bias"], uploads[1]["head.bias"])  # two separate models


def biased(params, label, value=100.0):
    """A model that predicts `label` for every input."""
    bias = torch.zeros_like(params["head.bias"])
    bias[label] = value
    return {**params, "head.weight": torch.zeros_like(params["head.weight"]), "head.bias": bias}


@pytest.mark.parametrize("global_label,best", [(0, 4 / 9), (1, 3 / 9)], ids=["global_better", "personal_better"])
def test_ditto_max_of_both_reports_the_better_of_global_and_personal(global_label, best):
    # test labels [0,0,0], [1,2,2], [0,1,2]: always predicting 0 / 1 / 2 is right 4 / 2 / 3 times of 9
    accs = {}
    for report in ("personal", "max_of_both"):
        algo = build("ditto", report=report)
        algo.global_params = biased(algo.global_params, global_label)
        algo.personal = [biased(p, 2) for p in algo.personal]
        algo.send(0, [0])
        accs[report] = evaluate_clients(algo.fed, algo.eval_params)["test_acc"]
    assert accs["personal"] == pytest.approx(3 / 9)
    assert accs["max_of_both"] == pytest.approx(best)


# ------------------------------------------------------------------------------------------- FedAMP


def test_attention_weights_by_hand_closer_weighs_more():
    own = torch.tensor([0.0, 0.0])
    others = torch.tensor([[0.3, 0.4], [1.0, 1.0]])  # ||.||^2 = 0.25 (near) and 2 (far)
    xi = attention_weights(own, others, alphaK=0.5, sigma=2.0)
    assert xi.tolist() == pytest.approx([0.5 * math.exp(-0.125) / 2, 0.5 * math.exp(-1.0) / 2])
    assert xi[0] > xi[1] > 0
    u = pull_toward(own, others, xi)
    torch.testing.assert_close(u, (xi[0] * others[0] + xi[1] * others[1] + (1 - xi.sum()) * own).float())
    same = torch.tensor([7.0, -3.0])  # weights (self included) sum to 1: equal models give that model
    torch.testing.assert_close(pull_toward(same, torch.stack([same, same]), xi), same)


@pytest.mark.parametrize("cloud,pool,senders", [("all_uploaded", [0, 1, 2], [1, 2]), ("last_round", [2, 0], [2])])
def test_fedamp_cloud_model_uses_the_held_models(cloud, pool, senders):
    algo = build("fedamp", cloud=cloud, alphaK=0.5, sigma=2.0)
    algo.models = [{"w": torch.tensor([0.0, 0.0])}, {"w": torch.tensor([0.3, 0.4])}, {"w": torch.tensor([1.0, 1.0])}]
    algo.aggregate(0, [0, 1])
    algo.aggregate(1, [2, 0])
    assert algo.pool() == pool
    own = algo.models[0]["w"]
    xi = [0.25 * math.exp(-float(((algo.models[j]["w"] - own) ** 2).sum()) / 2.0) for j in senders]
    expected = sum(x * algo.models[j]["w"] for x, j in zip(xi, senders)) + (1 - sum(xi)) * own
    torch.testing.assert_close(algo.cloud_models([0])[0]["w"], expected)


def test_fedamp_gradient_includes_lamda_over_alphak_times_distance_to_cloud():
    algo = build("fedamp", batch_size=100, lamda=4000.0, alphaK=1000.0, sigma=1000.0)  # lamda / alphaK = 4
    algo.models[1] = perturbed(algo.models[0], scale=0.01)
    algo.aggregate(0, [1])
    algo.send(1, [0])
    u, w = algo.clouds[0], algo.models[0]
    d = squared_distance(algo.models[1], w)  # ~ 58: xi_01 = exp(-d / 1000) ~ 0.94, u = w + xi_01 (w_1 - w)
    assert squared_distance(u, w) == pytest.approx(math.exp(-d / 1000) ** 2 * d, rel=1e-4)
    grads = ce_gradient(algo.fed, w, 0)
    algo.train_client(1, 0)
    for k in w:
        torch.testing.assert_close(algo.models[0][k], w[k] - 0.1 * (grads[k] + 4.0 * (w[k] - u[k])))


def test_fedamp_detached_proximal_term_is_plain_local_sgd_bit_for_bit():
    algo = build("fedamp", proximal="detached")
    reference = build("fedamp")  # an identical federation (same data, same RNG)
    algo.models[1] = perturbed(algo.models[0], scale=0.01)
    algo.aggregate(0, [1])
    algo.send(1, [0])
    result = algo.train_client(1, 0)
    plain = local_train(reference.fed, reference.models[0], 0)
    for k in plain.params:
        assert torch.equal(result.params[k], plain.params[k])


# ------------------------------------------------------------------------------------------ FedFomo


def test_fomo_weights_only_improving_models_normalised():
    raw, w = fomo_weights(1.0, [0.5, 1.2, 0.8], [1.0, 2.0, 4.0])
    expected_raw = [0.5 / 1.00001, -0.2 / 2.00001, 0.2 / 4.00001]
    assert raw.tolist() == pytest.approx(expected_raw)
    total = expected_raw[0] + expected_raw[2]
    assert w.tolist() == pytest.approx([expected_raw[0] / total, 0.0, expected_raw[2] / total])
    raw, w = fomo_weights(1.0, [1.5, 1.0], [1.0, 1.0])
    assert raw.tolist() == pytest.approx([-0.5 / 1.00001, 0.0]) and w.tolist() == [0.0, 0.0]


def test_fomo_combination_on_hand_made_models(monkeypatch):
    algo = build("fedfomo", M=3)
    old = {"w": torch.tensor([0.0, 0.0])}
    far_good, near_good, bad = {"w": torch.tensor([3.0, 4.0])}, {"w": torch.tensor([0.0, 1.0])}, {"w": torch.tensor([1.0, 0.0])}
    losses = {id(old): 1.0, id(far_good): 0.5, id(near_good): 0.9, id(bad): 1.1}
    monkeypatch.setattr(algo, "validation_loss", lambda client, params: losses[id(params)])
    algo.models[1] = old  # client 1 has 6 train samples, so 1 validation sample
    combined, raw = algo.personalise(1, [(0, far_good), (2, near_good), (3, bad)])
    a, b = 0.5 / (5 + 1e-5), 0.1 / (1 + 1e-5)
    assert raw.tolist() == pytest.approx([a, b, -0.1 / (1 + 1e-5)])
    torch.testing.assert_close(combined["w"], (a * far_good["w"] + b * near_good["w"]) / (a + b))
    losses[id(old)] = 0.1  # nothing improves: the client keeps its own model
    assert algo.personalise(1, [(0, far_good), (3, bad)])[0] is old


def test_fomo_affinity_row_gains_the_raw_weights_and_best_model_is_taken():
    algo = build("fedfomo", client_labels=[[0] * 10, [1] * 6, [2] * 6], M=2, epsilon=0.0)
    initial = algo.models[0]
    algo.models[1], algo.models[2] = biased(initial, 0, 10.0), biased(initial, 0, -10.0)  # good / bad for client 0
    algo.aggregate(0, [1, 2])
    algo.send(1, [0])
    downloads = algo.downloads[0]
    assert sorted(j for j, _ in downloads) == [1, 2]
    combined, raw = algo.personalise(0, downloads)
    by_id = dict(zip([j for j, _ in downloads], raw.tolist()))
    assert by_id[1] > 0 > by_id[2]
    for k in combined:
        torch.testing.assert_close(combined[k], algo.models[1][k])  # weight 1 on the only improving model
    algo.train_client(1, 0)
    assert algo.affinity[0, 1].item() == pytest.approx(by_id[1]) and algo.affinity[0, 2].item() == pytest.approx(by_id[2])
    assert algo.affinity[0, 0] == 1 and algo.affinity[1].tolist() == [0, 1, 0]


def test_fomo_validation_is_the_fixed_last_fifth_and_training_uses_the_rest():
    algo = build("fedfomo", M=3, local_order="fixed", client_labels=[[0] * 10, [1] * 7, [2] * 4], batch_size=3)
    fed = algo.fed
    for c, idx in enumerate(fed.train_idx):
        cut = len(idx) - int(0.2 * len(idx))
        assert torch.equal(algo.val_idx[c], idx[cut:]) and torch.equal(algo.train_fed.train_idx[c], idx[:cut])
    assert [len(v) for v in algo.val_idx] == [2, 1, 0]
    batches = list(algo.train_fed.shuffled_batches(0))
    assert torch.equal(torch.cat(batches), fed.train_idx[0][:8]) and [len(b) for b in batches] == [3, 3, 2]
    algo.fed.participations[0] = 3  # the view shares lr decay counts with the engine
    assert algo.train_fed.client_lr(0) == fed.client_lr(0)


def test_fomo_downloads_top_m_pfllib_and_epsilon_greedy_paper():
    pfl = build("fedfomo", client_labels=[[0]] * 6, selection="top_m", M=3)
    pfl.affinity[0] = torch.tensor([1.0, 0.5, 0.0, 0.5, 2.0, 0.0], dtype=torch.float64)
    assert pfl.choose(1, 0) == []  # nobody uploaded last round
    pfl.aggregate(0, [3, 5])
    assert pfl.choose(1, 0) == [4, 0]  # min(M, 2 uploads last round), self included
    paper = build("fedfomo", client_labels=[[0]] * 6, M=3, epsilon=0.0)
    paper.affinity[0] = pfl.affinity[0]
    paper.aggregate(0, [0, 1, 2, 3])
    picks = paper.choose(1, 0)  # uploaded others only, by affinity; 1 and 3 tie (random order)
    assert set(picks[:2]) == {1, 3} and picks[2] == 2
    paper.aggregate(1, [4])
    assert paper.choose(2, 0)[0] == 4
    explore = build("fedfomo", client_labels=[[0]] * 6, M=3, epsilon=1.0)
    explore.aggregate(0, list(range(6)))
    picks = explore.choose(0, 0)
    assert len(set(picks)) == 3 and 0 not in picks


@pytest.mark.parametrize(
    "name,overrides,message",
    [
        ("ditto", {"mu": -1}, "mu must be a finite number >= 0"),
        ("ditto", {"report": "best"}, "choose one of personal, max_of_both"),
        ("fedamp", {"alphaK": 0}, "alphaK must be a finite number > 0"),
        ("fedamp", {"lamda": -0.5}, "lamda must be a finite number >= 0"),
        ("fedamp", {"sigma": 0}, "sigma must be a finite number > 0"),
        ("fedfomo", {"M": 4}, "larger than the number of clients"),
        ("fedfomo", {"val_ratio": 1.0}, "val_ratio must be in (0, 1)"),
    ],
)
def test_bad_hyper_parameters_fail_before_training(name, overrides, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build(name, **overrides)
