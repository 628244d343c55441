"""FedRoD and FedCP (src/fedgmh/algorithms/decoupled.py) on tiny tensors, plus a short real run each."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import make_federation
from torch import nn

from fedgmh.algorithms import get_algorithm
from fedgmh.algorithms.decoupled import FedCP, balanced_softmax_loss, client_vector, mmd
from fedgmh.errors import UserError
from fedgmh.train import resolve_options

LABELS = [[0, 0, 0, 1, 1], [1, 2, 2], [0, 1, 2, 2, 2, 2, 0]]  # different train sizes: weights 5/15, 3/15, 7/15


def build(name, client_labels=LABELS, local_epochs=1, **overrides):
    algo_options, engine = resolve_options(name, overrides)
    fed = make_federation(client_labels, num_classes=3, batch_size=2, local_epochs=local_epochs,
                          **{k: getattr(engine, k) for k in ("drop_last", "lr_decay")})
    return get_algorithm(name)(fed, algo_options)


def randomise(params, prefixes):
    """Distinct random values for the keys starting with `prefixes` (so mix-ups would show)."""
    gen = torch.Generator().manual_seed(7)
    return {**params, **{k: torch.randn(v.shape, generator=gen) * 0.1 for k, v in params.items() if k.startswith(prefixes)}}


def weighted(values, weights):
    return sum(w * v for w, v in zip(weights, values))


# ----------------------------------------------------------------------------------- FedRoD


def test_balanced_softmax_matches_hand_computation_with_a_missing_class():
    logits = torch.tensor([[0.5, 2.0, -1.0], [1.0, 0.0, 3.0]], requires_grad=True)
    counts = torch.tensor([2, 0, 1])  # class 1 absent from the client's train split
    y = torch.tensor([0, 2])
    loss = balanced_softmax_loss(logits, y, counts)
    # logits + log n_c: class 1 drops out of the softmax, class 0 gets + log 2
    p0 = 2 * math.exp(0.5) / (2 * math.exp(0.5) + math.exp(-1.0))
    p1 = math.exp(3.0) / (2 * math.exp(1.0) + math.exp(3.0))
    assert loss.item() == pytest.approx(-(math.log(p0) + math.log(p1)) / 2, rel=1e-6)
    (grad,) = torch.autograd.grad(loss, logits)
    assert torch.isfinite(grad).all() and torch.equal(grad[:, 1], torch.zeros(2))
    assert grad[0, 0].item() == pytest.approx((p0 - 1) / 2, rel=1e-5)


def test_fedrod_counts_are_train_label_counts_and_personal_head_starts_as_the_head():
    algo = build("fedrod")
    assert [c.tolist() for c in algo.counts] == [[3, 2, 0], [0, 1, 2], [2, 1, 4]]
    params = algo.client_params(1)
    assert torch.equal(params["phead.weight"], params["head.weight"]) and torch.equal(params["phead.bias"], params["head.bias"])


def test_fedrod_each_loss_reaches_only_its_own_part():
    algo = build("fedrod")
    params = randomise(algo.client_params(0), ("phead.",))
    params = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    x, y = algo.fed.images[:5], algo.fed.labels[:5]
    generic, personal = algo.losses(params, x, y, algo.counts[0])
    names = list(params)
    g_grads = dict(zip(names, torch.autograd.grad(generic, [params[k] for k in names], allow_unused=True)))
    p_grads = dict(zip(names, torch.autograd.grad(personal, [params[k] for k in names], allow_unused=True)))
    for k in names:
        if k.startswith("phead."):
            assert g_grads[k] is None and p_grads[k].abs().sum() > 0
        else:
            assert p_grads[k] is None and g_grads[k] is not None
    assert g_grads["head.weight"].abs().sum() > 0 and g_grads["body.7.weight"].abs().sum() > 0


def test_fedrod_one_local_train_equals_pfllib_two_optimiser_loop():
    """The summed loss in one local_train == PFLlib: a generic SGD step on body + head, then a
    personal-head step on the same batch's (pre-step) detached body output and generic logits,
    bit for bit."""
    algo = build("fedrod", local_epochs=2)
    fed = algo.fed
    start = randomise(algo.client_params(2), ("phead.",))
    algo.local[2] = {k: start[k] for k in ("phead.weight", "phead.bias")}
    state = fed.generator.get_state()
    algo.train_client(0, 2)
    fed.generator.set_state(state)
    p = {k: v.clone() for k, v in start.items()}
    lr = fed.client_lr(2)
    generic_keys = [k for k in p if not k.startswith("phead.")]
    for _ in range(2):
        for batch in fed.shuffled_batches(2):
            x, y = fed.images[batch], fed.labels[batch]
            for k in p:
                p[k].requires_grad_(True)
            rep = fed.features(p, x)
            out_g = F.linear(rep, p["head.weight"], p["head.bias"])
            grads = torch.autograd.grad(balanced_softmax_loss(out_g, y, algo.counts[2]), [p[k] for k in generic_keys])
            with torch.no_grad():
                for k, g in zip(generic_keys, grads):
                    p[k] = p[k].add(g, alpha=-lr)  # torch.optim.SGD's step
            out_p = F.linear(rep.detach(), p["phead.weight"], p["phead.bias"])
            loss = F.cross_entropy(out_g.detach() + out_p, y)
            gw, gb = torch.autograd.grad(loss, [p["phead.weight"], p["phead.bias"]])
            with torch.no_grad():
                p["phead.weight"], p["phead.bias"] = p["phead.weight"].add(gw, alpha=-lr), p["phead.bias"].add(gb, alpha=-lr)
    for k in generic_keys:
        torch.testing.assert_close(algo.uploads[2][k], p[k].detach(), rtol=0, atol=0)
    for k in ("phead.weight", "phead.bias"):
        torch.testing.assert_close(algo.local[2][k], p[k].detach(), rtol=0, atol=0)
        assert not torch.equal(algo.local[2][k], start[k])


def test_fedrod_output_is_generic_plus_personal():
    algo = build("fedrod")
    params = randomise(algo.client_params(0), ("phead.",))
    x = algo.fed.images[:4]
    f = algo.fed.features(params, x)
    expected = f @ params["head.weight"].T + params["head.bias"] + f @ params["phead.weight"].T + params["phead.bias"]
    torch.testing.assert_close(algo.forward(params, x), expected)


def test_fedrod_server_averages_body_and_generic_head_only():
    algo = build("fedrod")
    for c in (0, 2):
        algo.train_client(0, c)
    uploads = {c: dict(algo.uploads[c]) for c in (0, 2)}
    personal = {c: dict(algo.local[c]) for c in (0, 2)}
    algo.aggregate(0, [0, 2])
    assert set(algo.global_params) == set(uploads[0]) and not any(k.startswith("phead.") for k in algo.global_params)
    for k, v in algo.global_params.items():
        torch.testing.assert_close(v, weighted([uploads[0][k], uploads[2][k]], [5 / 12, 7 / 12]))
    assert algo.local[0] == personal[0] and algo.local[2] == personal[2]  # personal heads stay home
    assert 1 not in algo.local  # the unselected client keeps its initial personal head
    assert algo.eval_params(1)["body.0.weight"] is algo.global_params["body.0.weight"]


# ------------------------------------------------------------------------------------ FedCP


def reference_policy(algo, params, f):
    """The CPN with torch.nn modules: Linear -> LayerNorm -> ReLU, pairs (j, d + j), softmax."""
    d = f.shape[1]
    fc, ln = nn.Linear(d, 2 * d), nn.LayerNorm(2 * d)
    with torch.no_grad():
        fc.weight.copy_(params["cpn.fc.weight"]), fc.bias.copy_(params["cpn.fc.bias"])
        ln.weight.copy_(params["cpn.ln.weight"]), ln.bias.copy_(params["cpn.ln.bias"])
        v = params["context"]
        a = torch.relu(ln(fc(f * v / v.norm())))
        s = torch.exp(a[:, :d]) / (torch.exp(a[:, :d]) + torch.exp(a[:, d:]))
    return s, 1 - s


@pytest.mark.parametrize("policy", ["softmax", "gumbel"])
def test_fedcp_policy_shares_sum_to_one_and_lie_in_unit_interval(policy):
    algo = build("fedcp", policy=policy)
    params = randomise(algo.client_params(0), ("cpn.ln.",))
    f = algo.fed.features(params, algo.fed.images[:6])
    gumbel = algo.gumbel_noise(len(f), algo.fed.generator) if policy == "gumbel" else None
    s, r = algo.policy(params, f, gumbel)
    assert s.shape == r.shape == f.shape
    torch.testing.assert_close(s + r, torch.ones_like(s))
    assert ((s >= 0) & (s <= 1) & (r >= 0) & (r <= 1)).all()
    ref_s, ref_r = reference_policy(algo, params, f)
    if policy == "softmax":
        torch.testing.assert_close(s, ref_s)
        torch.testing.assert_close(r, ref_r)
    else:  # gumbel noise: random, but drawn from the run's generator
        assert not torch.allclose(s, ref_s)
        state = algo.fed.generator.get_state()
        s1, _ = algo.policy(params, f, algo.gumbel_noise(len(f), algo.fed.generator))
        algo.fed.generator.set_state(state)
        s2, _ = algo.policy(params, f, algo.gumbel_noise(len(f), algo.fed.generator))
        assert torch.equal(s1, s2) and not torch.equal(s, s1)


def test_mmd_matches_hand_computation_and_is_zero_for_identical_inputs():
    x, y = torch.tensor([[0.0], [1.0]]), torch.tensor([[0.0], [3.0]])
    k = lambda d: sum(math.exp(-d / (2 * a)) for a in (10, 15, 20, 50))  # noqa: E731
    # K_xx: d = 0, 1; K_yy: d = 0, 9; K_xy: d = 0, 9, 1, 4  ->  mean = (k(0) - k(4)) / 2
    assert mmd(x, y).item() == pytest.approx((k(0) - k(4)) / 2, rel=1e-6)
    z = torch.randn(5, 8)
    assert mmd(z, z).item() == pytest.approx(0.0, abs=1e-6)


def test_fedcp_output_is_personal_head_of_s_f_plus_global_head_of_r_f():
    algo = build("fedcp")
    params = randomise(algo.client_params(0), ("head.", "ghead."))
    x = algo.fed.images[:4]
    f = algo.fed.features(params, x)
    s, r = reference_policy(algo, params, f)
    expected = (s * f) @ params["head.weight"].T + params["head.bias"] + (r * f) @ params["ghead.weight"].T + params["ghead.bias"]
    torch.testing.assert_close(algo.forward(params, x), expected)


def test_fedcp_frozen_global_copies_get_no_update_and_mmd_moves_the_personal_body():
    bodies = {}
    for lamda in (0.0, 1.0):
        algo = build("fedcp", lamda=lamda)
        algo.local[0] = randomise(algo.client_params(0), ("ghead.",))
        before = {k: v.clone() for k, v in algo.client_params(0).items()}
        global_body = {k: v.clone() for k, v in algo.global_params.items() if k.startswith("body.")}
        state = algo.fed.generator.get_state()
        algo.train_client(0, 0)
        algo.fed.generator.set_state(state)
        after = algo.local[0]
        for k in ("ghead.weight", "ghead.bias", "context"):
            assert torch.equal(after[k], before[k])
        for k in ("head.weight", "cpn.fc.weight", "body.7.weight"):
            assert not torch.equal(after[k], before[k])
        for k, v in global_body.items():
            assert torch.equal(algo.global_params[k], v)
        bodies[lamda] = after["body.7.weight"]
    assert not torch.equal(bodies[0.0], bodies[1.0])  # the MMD term reaches the personal body


def test_fedcp_uploads_mean_head_and_server_averages_body_head_and_cpn():
    algo = build("fedcp")
    for c in (0, 1):
        algo.local[c] = randomise(algo.client_params(c), ("ghead.",)) if c == 0 else algo.client_params(c)
        algo.train_client(0, c)
    trained = {c: dict(algo.local[c]) for c in (0, 1)}
    algo.aggregate(0, [0, 1])
    w = [5 / 8, 3 / 8]
    for k, v in algo.global_params.items():
        if k.startswith("head."):
            expected = weighted([(trained[c][k] + trained[c]["g" + k]) / 2 for c in (0, 1)], w)
        else:
            expected = weighted([trained[c][k] for c in (0, 1)], w)
        torch.testing.assert_close(v, expected)
    assert {k.split(".")[0] for k in algo.global_params} == {"body", "head", "cpn"}


def test_fedcp_round_start_sync_gives_selected_clients_the_global_parts():
    algo = build("fedcp")
    algo.global_params = randomise(algo.global_params, ("body.", "head.", "cpn."))
    algo.local[0] = randomise(algo.client_params(0), ("head.",))
    untouched = algo.client_params(2)
    algo.send(0, [0])
    got = algo.client_params(0)
    for k, v in algo.global_params.items():
        assert got["g" + k if k.startswith("head.") else k] is v
    torch.testing.assert_close(got["context"], algo.local[0]["head.weight"].sum(0))
    assert not torch.equal(got["head.weight"], algo.global_params["head.weight"])  # personal head kept
    assert 2 not in algo.local and algo.client_params(2).keys() == untouched.keys()
    assert all(torch.equal(algo.client_params(2)[k], v) for k, v in untouched.items())


def test_fedcp_after_round_sync_is_pfllib_order():
    algo = build("fedcp", preset="official")
    assert algo.options.sync == "after_round" and algo.options.policy == "gumbel" and algo.fed.options.lr_decay == 1.0
    contexts = {c: algo.client_params(c)["context"] for c in range(3)}
    assert torch.equal(contexts[0], contexts[1])  # PFLlib: one random vector for all clients until their first training
    assert not any(k.startswith("body.") for k in algo.client_params(0) if k in algo.initial_local)  # bodies are the global one
    algo.send(0, [0])
    assert torch.equal(algo.client_params(0)["context"], contexts[0])  # nothing is sent before evaluation
    algo.train_client(0, 0)
    trained_head = algo.local[0]["head.weight"]
    algo.aggregate(0, [0])
    got = algo.client_params(0)
    for k, v in algo.global_params.items():
        assert got["g" + k if k.startswith("head.") else k] is v
    torch.testing.assert_close(got["context"], client_vector({"head.weight": trained_head}))
    other = algo.client_params(1)
    assert other["body.0.weight"] is algo.global_params["body.0.weight"]  # the body goes to every client
    assert other["cpn.fc.weight"] is not algo.global_params["cpn.fc.weight"] and torch.equal(other["context"], contexts[1])


def test_fedcp_official_context_is_pfllibs_one_vector_for_every_client():
    """PFLlib's Client.__init__ re-seeds torch with 0 and clientCP then draws torch.rand(1, d): the
    same vector for every client and every run. `context=random` draws one per client instead."""
    with torch.random.fork_rng():
        torch.manual_seed(0)
        pfllib = torch.rand(1, 512)[0]  # what each PFLlib client draws
    official = build("fedcp", preset="official")
    assert official.options.context == "random_shared"
    first = [official.client_params(c)["context"] for c in range(3)]
    assert all(torch.equal(v, pfllib) for v in first)
    other_seed = get_algorithm("fedcp")(make_federation(LABELS, num_classes=3, seed=5, drop_last=True),
                                        resolve_options("fedcp", {"preset": "official"})[0])
    assert torch.equal(other_seed.client_params(1)["context"], pfllib)  # independent of the run's seed
    per_client = build("fedcp", preset="official", context="random")
    drawn = [per_client.client_params(c)["context"] for c in range(3)]
    assert not torch.equal(drawn[0], drawn[1]) and not any(torch.equal(v, pfllib) for v in drawn)
    # the shared vector does not come from the run's generator: it leaves it where context=head does
    head = build("fedcp", preset="official", context="head")
    assert torch.equal(official.fed.generator.get_state(), head.fed.generator.get_state())
    assert not torch.equal(per_client.fed.generator.get_state(), head.fed.generator.get_state())


def test_bad_fedcp_lamda_fails_before_training():
    with pytest.raises(UserError, match="lamda"):
        resolve_options("fedcp", {"lamda": "-1"})
    assert isinstance(build("fedcp"), FedCP)
