"""FedProx, FedPer, LG-FedAvg, FedRep and FedGH: the update that distinguishes each, on a tiny model."""

from __future__ import annotations


import pytest
import torch
import torch.nn.functional as F
from conftest import comparable, make_federation

from fedgmh import engine
from fedgmh.algorithms import get_algorithm
from fedgmh.engine import run_rounds
from fedgmh.errors import UserError
from fedgmh.model import FEATURE_DIM, is_body, is_head
from fedgmh.train import resolve_options

CLIENTS = [[0, 0, 1, 2, 1], [1, 2, 2], [0, 1, 2, 2, 0, 1, 0], [2, 2, 0, 1]]


def build(name, client_labels=CLIENTS, fed_kwargs=None, **overrides):
    algo_options, engine = resolve_options(name, overrides)
    fed = make_federation(client_labels, num_classes=3, drop_last=engine.drop_last, lr_decay=engine.lr_decay, **(fed_kwargs or {}))
    return get_algorithm(name)(fed, algo_options)


# --- FedProx -------------------------------------------------------------------------------------


def test_fedprox_step_is_gradient_of_ce_plus_proximal_term():
    # full-batch SGD for 3 steps: after the first step w != w_global, so the proximal term matters
    mu, lr = 0.7, 0.1
    algo = build("fedprox", fed_kwargs={"batch_size": 100, "local_epochs": 3, "lr": lr}, mu=mu)
    fed = algo.fed
    received = {k: v.clone() for k, v in algo.global_params.items()}
    algo.send(0, [2])
    result = algo.train_client(0, 2)
    x, y = fed.images[fed.train_idx[2]], fed.labels[fed.train_idx[2]]
    w = {k: v.clone().requires_grad_(True) for k, v in received.items()}
    for _ in range(3):
        loss = F.cross_entropy(fed.forward(w, x), y) + mu / 2 * sum(((w[k] - received[k]) ** 2).sum() for k in w)
        grads = torch.autograd.grad(loss, list(w.values()))
        w = {k: (v - lr * g).detach().requires_grad_(True) for (k, v), g in zip(w.items(), grads)}
    for k in w:
        torch.testing.assert_close(result.params[k], w[k].detach(), rtol=1e-5, atol=1e-7)
    plain = build("fedavg", fed_kwargs={"batch_size": 100, "local_epochs": 3, "lr": lr}).train_client(0, 2)
    assert not torch.equal(plain.params["head.weight"], result.params["head.weight"])
    assert all(algo.eval_params(c) is algo.global_params for c in range(4))  # global model evaluated


def test_fedprox_with_mu_zero_is_fedavg_bit_for_bit():
    runs = {}
    for name in ("fedavg", "fedprox"):
        algo = build(name)
        rows = run_rounds(algo.fed, algo, rounds=2, join_ratio=0.5)
        runs[name] = ([comparable({k: v for k, v in r.items() if k != "seconds"}) for r in rows], algo.global_params)
    assert runs["fedavg"][0] == runs["fedprox"][0]
    for k, v in runs["fedavg"][1].items():
        assert torch.equal(v, runs["fedprox"][1][k])


# --- FedPer / LG-FedAvg --------------------------------------------------------------------------


TOP_TWO = {"body.7.weight", "body.7.bias", "head.weight", "head.bias"}  # fc1 (Linear -> 512) and the head


@pytest.mark.parametrize("name,overrides,shared", [
    ("fedper", {}, is_body),
    ("lgfedavg", {}, is_head),
    ("lgfedavg", {"global_part": "fc1+head"}, lambda k: k in TOP_TWO),
])
def test_shared_part_is_weighted_average_and_local_part_stays(name, overrides, shared):
    algo = build(name, **overrides)
    fed = algo.fed
    initial = fed.initial_params()
    local = lambda k: not shared(k)  # noqa: E731
    assert set(algo.global_params) == {k for k in initial if shared(k)}
    assert any(local(k) for k in initial)  # something stays on the clients
    algo.send(0, [0, 2])
    trained = {c: algo.train_client(0, c).params for c in (0, 2)}
    algo.aggregate(0, [0, 2])
    w0, w2 = 5 / 12, 7 / 12  # train sizes 5 and 7
    for k, v in algo.global_params.items():
        torch.testing.assert_close(v, w0 * trained[0][k] + w2 * trained[2][k])
    for c in (0, 2):  # own unshared part as trained, shared part the new average
        params = algo.eval_params(c)
        assert all(torch.equal(params[k], trained[c][k]) for k in params if local(k))
        assert all(params[k] is algo.global_params[k] for k in params if shared(k))
    for c in (1, 3):  # never selected: the initial unshared part
        params = algo.eval_params(c)
        assert all(torch.equal(params[k], initial[k]) for k in params if local(k))
    before = {c: algo.eval_params(c) for c in range(4)}
    algo.send(1, [1])
    algo.train_client(1, 1)
    algo.aggregate(1, [1])
    for c in range(4):  # only the selected client's unshared part changed
        unchanged = [torch.equal(algo.eval_params(c)[k], before[c][k]) for k in before[c] if local(k)]
        assert not any(unchanged) if c == 1 else all(unchanged)


def test_lgfedavg_global_part_names_the_top_layers_and_defaults_to_the_head():
    fc1 = build("lgfedavg").fed.model.body[7]
    assert isinstance(fc1, torch.nn.Linear) and fc1.out_features == FEATURE_DIM  # PFLlib's fc1 is body.7
    assert set(build("lgfedavg", global_part="fc1+head").global_params) == TOP_TWO
    for preset in ("paper", "official"):  # the spec's and PFLlib's global part: the head only
        assert set(build("lgfedavg", preset=preset).global_params) == {"head.weight", "head.bias"}
    with pytest.raises(UserError, match="global_part"):
        resolve_options("lgfedavg", {"global_part": "body"})


# --- FedRep --------------------------------------------------------------------------------------


def test_fedrep_trains_head_then_body_with_the_other_frozen(monkeypatch):
    algo = build("fedrep", fed_kwargs={"local_epochs": 1}, plocal_epochs=2)
    calls, original = [], engine.local_train

    def spy(fed, params, client, **kwargs):
        result = original(fed, params, client, **kwargs)
        calls.append((kwargs, params, result))
        return result

    monkeypatch.setattr(engine.training, "local_train", spy)
    algo.send(0, [2])
    received = algo.eval_params(2)
    result = algo.train_client(0, 2)
    (head_kw, head_in, head_out), (body_kw, body_in, body_out) = calls
    assert head_kw["epochs"] == 2 and body_kw["epochs"] is None  # head phase first, then E body epochs
    assert all(head_in[k] is received[k] for k in received) and body_in is head_out.params  # body phase starts from the new head
    assert [k for k in received if head_kw["trainable"](k)] == ["head.weight", "head.bias"]
    assert [k for k in received if body_kw["trainable"](k)] == [k for k in received if is_body(k)]
    for k in received:
        moved_in_head_phase = not torch.equal(head_out.params[k], received[k])
        moved_in_body_phase = not torch.equal(body_out.params[k], head_out.params[k])
        assert moved_in_head_phase == is_head(k) and moved_in_body_phase == is_body(k)
    assert result.num_samples == 3 * 7  # 2 head epochs + 1 body epoch over 7 samples
    algo.aggregate(0, [2])
    assert all(torch.equal(algo.global_params[k], body_out.params[k]) for k in algo.global_params)
    assert all(torch.equal(algo.local[2][k], head_out.params[k]) for k in algo.local[2])


# --- FedGH ---------------------------------------------------------------------------------------


def ce_step(w, b, feats, labels, lr):
    """One SGD step of a linear head on the mean CE, gradients written out by hand."""
    g = F.softmax(feats @ w.T + b, dim=1) - F.one_hot(labels, w.shape[0]).float()
    return w - lr * g.T @ feats / len(labels), b - lr * g.mean(0)


def test_fedgh_batched_server_pass_is_shuffled_sgd_over_prototypes():
    algo = build("fedgh", preset="official", eta_h=0.5)  # PFLlib: batched pass, batch = local batch size 4
    protos = [(i % 3, torch.randn(512)) for i in range(7)]
    algo.uploads = list(protos)
    gen = torch.Generator()
    gen.set_state(algo.fed.generator.get_state())
    order = torch.randperm(7, generator=gen)
    w, b = algo.heads["head.weight"][0].clone(), algo.heads["head.bias"][0].clone()
    algo.aggregate(0, [0])
    for batch in (order[:4], order[4:]):
        feats = torch.stack([protos[i][1] for i in batch])
        labels = torch.tensor([protos[i][0] for i in batch])
        w, b = ce_step(w, b, feats, labels, 0.5)
    torch.testing.assert_close(algo.heads["head.weight"][0], w)
    torch.testing.assert_close(algo.heads["head.bias"][0], b)


def test_fedgh_default_server_pass_is_batched():
    assert resolve_options("fedgh", {})[0].server_pass == "batched"
    assert resolve_options("gmh_o", {})[0].server_pass == "per_prototype"  # FedGMH's eq. 6 keeps its own


def test_fedgh_per_prototype_server_step_in_upload_order():
    algo = build("fedgh", server_pass="per_prototype")
    protos = [(2, torch.randn(512)), (0, torch.randn(512)), (2, torch.randn(512))]
    algo.uploads = list(protos)
    w, b = algo.heads["head.weight"][0].clone(), algo.heads["head.bias"][0].clone()
    algo.aggregate(0, [0])
    for label, f in protos:
        w, b = ce_step(w, b, f.unsqueeze(0), torch.tensor([label]), 1.0)
    torch.testing.assert_close(algo.heads["head.weight"][0], w)
    torch.testing.assert_close(algo.heads["head.bias"][0], b)


@pytest.mark.parametrize("preset,receivers", [("paper", [1, 3]), ("official", [0, 1, 2, 3])])
def test_fedgh_clients_take_the_global_head_and_keep_their_body(preset, receivers):
    algo = build("fedgh", preset=preset, head_alias="server", drop_last=False)
    algo.send(0, [0, 2])
    trained = {c: algo.train_client(0, c).params for c in (0, 2)}
    assert sorted(label for label, _ in algo.uploads) == [0, 0, 1, 1, 2, 2]  # one prototype per label per client
    algo.aggregate(0, [0, 2])
    global_head = {k: v[0] for k, v in algo.heads.items()}
    assert not torch.equal(global_head["head.weight"], trained[0]["head.weight"])
    before = {c: algo.eval_params(c) for c in range(4)}
    algo.send(1, [1, 3])
    for c in range(4):
        params = algo.eval_params(c)
        if c in receivers:
            assert all(torch.equal(params[k], global_head[k]) for k in global_head)
        else:  # paper: an unselected client keeps its own (locally trained) head
            assert params is before[c] and torch.equal(params["head.weight"], trained[c]["head.weight"])
        assert all(torch.equal(params[k], before[c][k]) for k in params if is_body(k))


def test_fedgh_pflib_server_head_is_client_zeros_head():
    for alias in ("server", "client0"):
        algo = build("fedgh", preset="official", head_alias=alias, drop_last=False)
        start = {k: v.clone() for k, v in algo.heads.items()}
        algo.send(0, [1, 0])
        algo.train_client(0, 1)
        assert all(torch.equal(algo.heads[k], start[k]) for k in start)  # another client: no effect
        algo.train_client(0, 0)
        moved = {k: algo.params[0][k].unsqueeze(0) for k in start}
        assert all(torch.equal(algo.heads[k], moved[k] if alias == "client0" else start[k]) for k in start)


# --- options and end to end ----------------------------------------------------------------------


def test_bad_options_fail_before_training():
    with pytest.raises(UserError, match="mu must be a finite number >= 0"):
        resolve_options("fedprox", {"mu": "-0.1"})
    with pytest.raises(UserError, match="plocal_epochs must be an integer >= 0"):
        resolve_options("fedrep", {"plocal_epochs": "-1"})
    with pytest.raises(UserError, match="choose one of"):
        resolve_options("fedgh", {"head_alias": "client1"})
    with pytest.raises(UserError, match="unknown option"):
        resolve_options("fedper", {"mu": "0.1"})
    with pytest.raises(UserError, match="heads=single"):
        build("fedgh", heads="per_label")
    assert resolve_options("fedgh", {})[0].heads == "single"
    assert resolve_options("fedrep", {"preset": "official"})[1].drop_last is True
