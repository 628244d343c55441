"""FedGMH's pieces on tiny hand-made tensors (docs/fedgmh.md)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import make_federation

from fedgmh.algorithms import get_algorithm
from fedgmh.algorithms.fedgmh import critical_mask
from fedgmh.train import resolve_options


def build(name="fedgmh", client_labels=None, **overrides):
    client_labels = client_labels or [[0, 0, 0, 1], [1, 2, 2, 2], [0, 1, 2, 2], [2, 2, 2, 2]]
    algo_options, engine = resolve_options(name, overrides)
    fed = make_federation(client_labels, num_classes=3, **{k: getattr(engine, k) for k in ("drop_last", "lr_decay")})
    return get_algorithm(name)(fed, algo_options)


def heads_of(params):
    return {k: v for k, v in params.items() if k.startswith("head.")}


def test_label_weights_are_train_shares_and_sum_to_one():
    algo = build()
    assert algo.label_weights[0] == {0: 0.75, 1: 0.25}
    assert algo.label_weights[3] == {2: 1.0}
    for weights in algo.label_weights:
        assert sum(weights.values()) == pytest.approx(1.0)


def test_mixed_head_is_label_weighted_sum_of_global_heads():
    algo = build()
    for k in algo.heads:
        algo.heads[k] = torch.randn_like(algo.heads[k])
    mixed = algo.mixed_head(0)
    for k in algo.heads:
        expected = 0.75 * algo.heads[k][0] + 0.25 * algo.heads[k][1]
        torch.testing.assert_close(mixed[k], expected)


def test_eq9_known_mask_takes_mix_at_marked_positions_only():
    algo = build()
    for k in algo.heads:
        algo.heads[k] = torch.randn_like(algo.heads[k])
    local = {k: torch.randn_like(v) for k, v in heads_of(algo.params[0]).items()}
    algo.params[0] = {**algo.params[0], **local}
    mask = {k: torch.rand_like(v) < 0.5 for k, v in local.items()}
    algo.masks[0] = mask
    mixed = algo.mixed_head(0)
    algo.personalise_head(0)
    for k, psi in mask.items():
        expected = local[k] * (~psi) + mixed[k] * psi  # h (1 - psi) + H psi
        assert torch.equal(algo.params[0][k], expected)
        assert psi.any() and (~psi).any()


def test_never_trained_client_takes_mixed_head():
    algo = build()
    for k in algo.heads:
        algo.heads[k] = torch.randn_like(algo.heads[k])
    algo.send(0, [1])
    mixed = algo.mixed_head(1)
    for k in mixed:
        assert torch.equal(algo.params[1][k], mixed[k])


def test_unselected_clients_untouched_in_paper_mode_remixed_in_official_mode():
    paper, official = build(), build(preset="official")
    for algo in (paper, official):
        for k in algo.heads:
            algo.heads[k] = torch.randn_like(algo.heads[k])
        before = {c: algo.params[c] for c in range(4)}
        algo.send(0, [1])
        assert algo.params[1] is not before[1]
        unchanged = [algo.params[c] is before[c] for c in (0, 2, 3)]
        assert all(unchanged) if algo is paper else not any(unchanged)


def test_global_top_b_counts_ties_and_zeros():
    before = {"head.weight": torch.zeros(2, 3), "head.bias": torch.zeros(2)}
    after = {"head.weight": torch.tensor([[3.0, 1.0, 1.0], [0.0, 0.0, 2.0]]), "head.bias": torch.tensor([1.0, 0.0])}
    # score |delta * theta| = theta^2 here: weight [[9,1,1],[0,0,4]], bias [1,0]; L = 8
    mask = critical_mask(before, after, 0.5, "delta_theta", "global")
    assert sum(int(m.sum()) for m in mask.values()) == 4  # B = floor(0.5 * 8)
    # 9 and 4, then the tied 1s in position order: weight[0,1] then weight[0,2]; bias[0] (also 1) loses the tie
    assert mask["head.weight"].tolist() == [[True, True, True], [False, False, True]]
    assert mask["head.bias"].tolist() == [False, False]
    # B larger than the number of positive scores: zeros fill the budget, still exactly B
    mask = critical_mask(before, after, 0.875, "delta_theta", "global")
    assert sum(int(m.sum()) for m in mask.values()) == 7


def test_per_tensor_selection_and_near_zero_fallback():
    before = {"head.weight": torch.zeros(2, 2), "head.bias": torch.zeros(4)}
    after = {"head.weight": torch.tensor([[2.0, 1.0], [3.0, 0.5]]), "head.bias": torch.tensor([0.0, 0.0, 0.0, 1e-3])}
    mask = critical_mask(before, after, 0.5, "delta_theta", "per_tensor")
    assert mask["head.weight"].tolist() == [[True, False], [True, False]]  # top 2 of 4 in this tensor
    # bias: the 2nd largest score is 0 -> threshold falls back to the smallest score > 1e-20
    assert mask["head.bias"].tolist() == [False, False, False, True]
    everything_zero = critical_mask(before, {k: torch.zeros_like(v) for k, v in after.items()}, 0.5, "delta_theta", "per_tensor")
    assert all(m.all() for m in everything_zero.values())  # official: threshold 0, every position ">= 0"


def test_score_variants():
    before = {"head.weight": torch.tensor([[1.0, 1.0]]), "head.bias": torch.tensor([1.0])}
    after = {"head.weight": torch.tensor([[3.0, -0.5]]), "head.bias": torch.tensor([1.5])}
    # |d*theta|: [6, 0.75], 0.75 ; |d^2*theta|: [12, 1.125], 0.375
    paper = critical_mask(before, after, 1 / 3, "delta_theta", "global")
    official = critical_mask(before, after, 2 / 3, "delta_sq_theta", "global")
    assert paper["head.weight"].tolist() == [[True, False]] and not paper["head.bias"].any()
    assert official["head.weight"].tolist() == [[True, True]] and not official["head.bias"].any()


def test_mask_marks_critical_in_paper_mode_and_the_rest_in_official_mode():
    for preset, expect_critical in (("paper", True), ("official", False)):
        algo = build(preset=preset, drop_last=False)
        before = heads_of(algo.params[2])
        algo.train_client(0, 2)
        after = heads_of(algo.params[2])
        critical = critical_mask(before, after, 0.5, algo.options.score, algo.options.selection)
        for k, m in algo.masks[2].items():
            assert torch.equal(m, critical[k] if expect_critical else ~critical[k])


def test_prototypes_are_class_means_of_trained_body_features():
    algo = build()
    algo.train_client(0, 2)
    fed, params = algo.fed, algo.params[2]
    idx = fed.train_idx[2]
    feats = fed.features(params, fed.images[idx])
    labels = fed.labels[idx]
    uploads = dict(algo.uploads)
    assert sorted(uploads) == [0, 1, 2]
    for s, proto in uploads.items():
        torch.testing.assert_close(proto, feats[labels == s].mean(0))


def test_eq6_one_step_per_prototype_on_the_label_head():
    algo = build(eta_h=0.5)
    start = {k: v.clone() for k, v in algo.heads.items()}
    f1, f2 = torch.randn(512), torch.randn(512)
    algo.uploads = [(1, f1), (1, f2)]
    algo.aggregate(0, [0])
    w, b = start["head.weight"][1].clone(), start["head.bias"][1].clone()
    for f in (f1, f2):  # two sequential unbatched steps on head 1 only
        g = F.softmax(w @ f + b, dim=0) - F.one_hot(torch.tensor(1), 3).float()
        w, b = w - 0.5 * torch.outer(g, f), b - 0.5 * g
    torch.testing.assert_close(algo.heads["head.weight"][1], w)
    torch.testing.assert_close(algo.heads["head.bias"][1], b)
    for other in (0, 2):
        assert torch.equal(algo.heads["head.weight"][other], start["head.weight"][other])


def test_single_head_ablation_trains_one_head_with_all_prototypes():
    algo = build("gmh_o")
    assert algo.heads["head.weight"].shape[0] == 1
    start = algo.heads["head.weight"].clone()
    algo.uploads = [(0, torch.randn(512)), (2, torch.randn(512))]
    algo.aggregate(0, [0])
    assert not torch.equal(algo.heads["head.weight"], start)


def test_average_ablation_halves_local_and_mixed_head():
    algo = build("gmh_a")
    for k in algo.heads:
        algo.heads[k] = torch.randn_like(algo.heads[k])
    local = {k: torch.randn_like(v) for k, v in heads_of(algo.params[0]).items()}
    algo.params[0] = {**algo.params[0], **local}
    algo.masks[0] = {k: torch.ones_like(v, dtype=torch.bool) for k, v in local.items()}  # ignored without mask
    mixed = algo.mixed_head(0)
    algo.personalise_head(0)
    for k in local:
        torch.testing.assert_close(algo.params[0][k], (local[k] + mixed[k]) / 2)


def test_official_drop_last_client_smaller_than_a_batch_never_trains():
    algo = build(preset="official")  # batch size 4; give client 3 only 4 train samples -> trains
    algo.fed.batch_size = 5
    before = algo.params[3]
    result = algo.train_client(0, 3)
    assert result.num_samples == 0 and not algo.uploads
    for k in before:
        assert torch.equal(algo.params[3][k], before[k])
    assert all(not m.any() for m in algo.masks[3].values())  # official: nothing takes the global mix


def test_bad_options_fail_before_training():
    from fedgmh.errors import UserError

    with pytest.raises(UserError, match="beta must be in"):
        resolve_options("fedgmh", {"beta": "1.5"})
    with pytest.raises(UserError, match="expected a finite float"):
        resolve_options("fedgmh", {"eta_h": "fast"})
    with pytest.raises(UserError, match="choose one of"):
        resolve_options("fedgmh", {"mix": "sometimes"})
    with pytest.raises(UserError, match="unknown option"):
        resolve_options("fedavg", {"beta": "0.3"})


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_non_finite_hyper_parameters_are_rejected(value):
    from fedgmh.errors import UserError

    with pytest.raises(UserError, match="expected a finite float"):
        resolve_options("fedgmh", {"eta_h": value})


def test_global_budget_is_exact_floor_of_beta_times_l():
    # 0.7 * 5130 = 3590.9999999999995 in floating point; B must be 3591
    before = {"head.weight": torch.zeros(10, 512), "head.bias": torch.zeros(10)}
    after = {k: torch.rand_like(v) + 0.1 for k, v in before.items()}
    mask = critical_mask(before, after, 0.7, "delta_theta", "global")
    assert sum(int(m.sum()) for m in mask.values()) == 3591


@pytest.mark.parametrize("name", ["gmh_o", "gmh_oa"])
def test_official_single_head_is_client_0s_head(name):
    algo = build(name, preset="official")
    assert algo.options.head_alias == "client0"
    algo.train_client(0, 0)
    trained = heads_of(algo.params[0])
    for k, v in trained.items():  # client 0's training moved the server head
        assert torch.equal(algo.heads[k][0], v)
    algo.train_client(0, 2)
    algo.aggregate(0, [0, 2])
    for k in trained:  # and the server pass moved client 0's head
        assert torch.equal(algo.params[0][k], algo.heads[k][0])
        assert not torch.equal(algo.params[0][k], trained[k])
    with pytest.raises(Exception, match="heads=single"):
        resolve_options("fedgmh", {"head_alias": "client0"})


@pytest.mark.parametrize("zeroing", [True, False])
def test_official_gmh_o_zeroes_the_server_head_at_every_send_until_client_0_trains(zeroing):
    algo = build("gmh_o", preset="official", gmh_o_zeroing=str(zeroing).lower())
    for rnd in range(2):  # client 0 has not trained yet: each send wipes the server's head
        for k in algo.heads:
            algo.heads[k] = torch.randn_like(algo.heads[k])  # as if the server pass had trained it
        server = {k: v[0].clone() for k, v in algo.heads.items()}
        algo.send(rnd, [1, 2])
        expected = {k: torch.zeros_like(v) for k, v in server.items()} if zeroing else server
        assert all(torch.equal(algo.heads[k][0], v) for k, v in expected.items())
        for c in (0, 2, 3):  # broadcast=all; untrained clients take the whole head
            for k, v in expected.items():
                assert torch.equal(algo.params[c][k], v), (rnd, c, k)
        algo.train_client(rnd, 1)
    algo.train_client(2, 0)  # client 0 has a mask now: no more zeroing
    algo.aggregate(2, [0])
    server = {k: v[0].clone() for k, v in algo.heads.items()}
    algo.send(3, [0, 3])
    assert all(torch.equal(algo.heads[k][0], v) for k, v in server.items())
    assert any(bool(v.abs().sum() > 0) for v in server.values())


def test_gmh_o_zeroing_needs_the_client0_alias():
    with pytest.raises(Exception, match="head_alias=client0"):
        resolve_options("gmh_o", {"gmh_o_zeroing": "true"})
    assert resolve_options("gmh_o", {"preset": "official"})[0].gmh_o_zeroing
    assert not resolve_options("gmh_oa", {"preset": "official"})[0].gmh_o_zeroing  # GMH-oa's send only copies


@pytest.mark.parametrize("name", ["fedgmh", "gmh_o", "gmh_a", "gmh_oa"])
def test_official_runs_train_the_same_whichever_rounds_are_evaluated(name):
    """Table 5's official runs evaluate every round (config table5_pflib: eval_last=0) where the
    official code evaluates the last 20 only: the training, and the rounds both evaluate, must not change."""
    import pandas as pd

    from fedgmh.engine import run_rounds

    def run(eval_last):
        algo_options, engine = resolve_options(name, {"preset": "official", "eval_last": eval_last})
        fed = make_federation([[0, 0, 0, 1], [1, 2, 2, 2], [0, 1, 2, 2], [2, 2, 2, 2]], num_classes=3, batch_size=2, lr=0.01,
                              **{k: getattr(engine, k) for k in ("drop_last", "lr_decay", "eval_last")})
        algo = get_algorithm(name)(fed, algo_options)
        rows = pd.DataFrame(run_rounds(fed, algo, 5, 0.5)).drop(columns=["seconds"]).set_index("round")
        state = {f"head {k}": v for k, v in algo.heads.items()}
        state |= {f"client {c} {k}": v for c, params in enumerate(algo.params) for k, v in params.items()}
        return rows, state, fed.generator.get_state()

    every, every_state, every_draws = run(0)
    last, last_state, last_draws = run(2)
    assert every.index.tolist() == [0, 1, 2, 3, 4, 5] and last.index.tolist() == [4, 5]
    pd.testing.assert_frame_equal(last, every.loc[last.index], check_exact=True)
    assert every_state.keys() == last_state.keys() and torch.equal(every_draws, last_draws)
    for k, v in every_state.items():
        assert torch.equal(last_state[k], v), k


@pytest.mark.parametrize("local_epochs", [1, 3])
def test_extra_computation_is_one_body_forward_over_an_epoch(monkeypatch, local_epochs):
    """Section 2.3.3: beyond its local training a FedGMH client runs the feature extractor forward once
    over one epoch's samples (its prototypes); counted in FLOPs, that is C_phi / C_omega of an epoch,
    the figure `fedgmh costs` reports (prototype_forward_per_epoch) for the claim c-compute-half-epoch."""
    from torch.func import functional_call
    from torch.utils.flop_counter import FlopCounterMode

    import fedgmh.algorithms.fedgmh as gmh

    algo = build(drop_last=False)
    algo.fed.local_epochs = local_epochs
    original, counted = gmh.class_means, {}

    def counting(fed, params, idx, *labels):
        with FlopCounterMode(display=False) as inner:
            means = original(fed, params, idx, *labels)
        counted.update(flops=inner.get_total_flops(), samples=len(idx))
        return means

    monkeypatch.setattr(gmh, "class_means", counting)
    with FlopCounterMode(display=False) as total:
        algo.train_client(0, 2)
    fed = algo.fed
    samples = len(fed.train_idx[2])
    one = fed.images[fed.train_idx[2][:1]]
    with FlopCounterMode(display=False) as forward:
        fed.features(algo.params[2], one)
    params = {k: v.detach().requires_grad_() for k, v in algo.params[2].items()}
    with FlopCounterMode(display=False) as step:
        F.cross_entropy(functional_call(fed.model, params, (one,)), fed.labels[fed.train_idx[2][:1]]).backward()
    assert counted["samples"] == samples and counted["flops"] == samples * forward.get_total_flops()
    training = total.get_total_flops() - counted["flops"]
    assert training == local_epochs * samples * step.get_total_flops()
    assert counted["flops"] / training == pytest.approx(forward.get_total_flops() / step.get_total_flops() / local_epochs)
