"""FedCAC (src/fedgmh/algorithms/fedcac.py): the spec's tests (docs: shared spec fedcac.md section 9),
numbered as there, plus a smoke run, resume identity, bad options and determinism."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from conftest import make_federation

from fedgmh.algorithms import fedcac, get_algorithm
from fedgmh.cards import resolve_options
from fedgmh.algorithms.fedcac import collaboration_threshold, collaborators, overlap_rates
from fedgmh.algorithms.fedgmh import critical_mask
from fedgmh.engine import Checkpoint, run_rounds, train_phases
from fedgmh.errors import UserError

CLIENTS = [[0, 1, 0, 1, 1, 0], [1, 2, 2, 1], [0, 2, 2, 0, 1], [2, 2, 1, 1], [0, 0, 1, 1, 2], [2, 1, 0, 0]]
FOUR = [[0, 1, 0, 1], [1, 0, 1, 1, 0, 0], [2, 2, 1, 2], [2, 1, 2, 2, 1]]


pytestmark = pytest.mark.usefixtures("one_thread")


def build(name="fedcac", clients=CLIENTS, **overrides):
    options, engine = resolve_options(name, overrides)
    fed = make_federation(clients, num_classes=3, batch_size=2, drop_last=engine.drop_last, lr_decay=engine.lr_decay)
    return get_algorithm(name)(fed, options)


def rows_of(algorithm, rounds=3, join_ratio=0.5, **kwargs):
    return pd.DataFrame(run_rounds(algorithm.fed, algorithm, rounds, join_ratio, **kwargs)).drop(columns="seconds")


def bits(*values):
    """A mask dict over one tensor 'p' from 0/1 values."""
    return {"p": torch.tensor(values, dtype=torch.bool)}


def hand_models(algorithm, seed=0):
    """One random full model per client (distinct values everywhere)."""
    gen = torch.Generator().manual_seed(seed)
    return [{k: torch.randn(v.shape, generator=gen) for k, v in algorithm.global_params.items()} for _ in range(algorithm.fed.num_clients)]


def block_masks(algorithm, groups):
    """Per client, a mask over the whole model marking the ten rows 10g..10g+9 of fc1's weight for
    its group g (None: nothing): equal sizes, so one group overlaps 1 and two groups 0."""
    masks = []
    for g in groups:
        mask = {k: torch.zeros_like(v, dtype=torch.bool) for k, v in algorithm.global_params.items()}
        if g is not None:
            mask["body.7.weight"][10 * g : 10 * g + 10] = True
        masks.append(mask)
    return masks


def upload(algorithm, selected, models, masks):
    """What the selected clients' finish_training leaves for aggregate, set by hand."""
    for c in selected:
        algorithm.uploads[c] = models[c]
        algorithm.pending_masks[c] = masks[c]


# ------------------------------------------------------------------ 1. tau = 0 is FedAvg


def test_1_tau_zero_is_fedavg_round_by_round():
    cac = build(tau=0.0, beta=2)
    avg = build("fedavg")
    traffic = ["bytes_up", "bytes_down"]
    ours, theirs = rows_of(cac, rounds=4), rows_of(avg, rounds=4)
    pd.testing.assert_frame_equal(ours.drop(columns=traffic), theirs.drop(columns=traffic), check_exact=True)
    trained = [c for c in range(len(CLIENTS)) if cac.masks[c] is not None]
    assert trained and all(not m.any() for c in trained for m in cac.masks[c].values())  # no critical parameter
    assert all(torch.equal(cac.global_params[k], avg.global_params[k]) for k in avg.global_params)


# ------------------------------------------------------------------ 2. overlap by hand


def test_2_overlap_rates_by_hand():
    same = overlap_rates([bits(1, 1, 0, 0), bits(1, 1, 0, 0)])
    assert same[0, 1] == 1 and same[1, 0] == 1
    disjoint = overlap_rates([bits(1, 1, 0, 0), bits(0, 0, 1, 1)])
    assert disjoint[0, 1] == 0 and disjoint[1, 0] == 0
    half = overlap_rates([bits(1, 1, 0, 0), bits(0, 1, 1, 0)])
    assert half[0, 1] == 0.5 and half[1, 0] == 0.5
    # |M_0| = 2, |M_1| = 1, one shared: O_01 = 1 - 1 / 4, O_10 = 1 - 1 / 2
    lopsided = overlap_rates([bits(1, 1, 0, 0), bits(1, 0, 0, 0)])
    assert lopsided[0, 1] == 0.75 and lopsided[1, 0] == 0.5


def test_2_overlap_rates_equal_the_codes_formula_over_several_tensors_and_chunks(monkeypatch):
    gen = torch.Generator().manual_seed(0)
    masks = [{"a": torch.rand(7, 5, generator=gen) < p, "b": torch.rand(13, generator=gen) < p} for p in (0.2, 0.5, 0.7, 0.5)]
    flat = [torch.cat([m["a"].flatten(), m["b"].flatten()]).long() for m in masks]
    expected = torch.tensor([[1 - float((fi - fj).abs().sum()) / (2 * float(fi.sum())) for fj in flat] for fi in flat], dtype=torch.float64)
    off = ~torch.eye(4, dtype=torch.bool)
    torch.testing.assert_close(overlap_rates(masks)[off], expected[off], rtol=0, atol=1e-15)
    monkeypatch.setattr(fedcac, "CHUNK", 4)  # the counts add up over chunks
    torch.testing.assert_close(overlap_rates(masks)[off], expected[off], rtol=0, atol=1e-15)


# ------------------------------------------------------------------ 3. threshold schedule


def test_3_threshold_schedule_by_hand():
    overlaps = torch.tensor([[9.0, 0.2, 0.4], [0.6, 9.0, 0.8], [0.3, 0.5, 9.0]], dtype=torch.float64)  # diagonal ignored
    mean, top = 2.8 / 6, 0.8
    torch.testing.assert_close(collaboration_threshold(overlaps, 0, 4), torch.tensor(mean + 0.25 * (top - mean), dtype=torch.float64))
    assert float(collaboration_threshold(overlaps, 10**6, 10**9 * 10**9)) == pytest.approx(mean)  # beta huge: T ~ mean
    at_end = collaboration_threshold(overlaps, 3, 4)  # t + 1 = beta: the largest overlap itself
    assert float(at_end) == 0.8 and collaborators(overlaps, at_end) == [[0], [1, 2], [2]]
    assert collaborators(overlaps, collaboration_threshold(overlaps, 4, 4)) == [[0], [1], [2]]  # t + 1 > beta: nobody
    assert collaborators(overlaps, torch.tensor(0.5, dtype=torch.float64)) == [[0], [1, 0, 2], [2, 1]]


def test_3_after_round_beta_every_customised_model_is_the_clients_own_trained_model():
    algorithm = build(beta=1, clients=FOUR)
    models = hand_models(algorithm)
    upload(algorithm, range(4), models, block_masks(algorithm, [0, 0, 1, 2]))
    algorithm.aggregate(1, [0, 1, 2, 3])  # t + 1 = 2 > beta = 1
    assert all(algorithm.custom[c] is models[c] for c in range(4))


def test_3_huge_beta_keeps_the_threshold_at_the_mean_overlap():
    algorithm = build(beta=10**9, clients=FOUR)
    models = hand_models(algorithm)
    # 0 and 1 share everything (overlap 1), 2 and 3 nothing with anyone: only 0 and 1 are above the mean
    upload(algorithm, range(4), models, block_masks(algorithm, [0, 0, 1, 2]))
    algorithm.aggregate(5, [0, 1, 2, 3])
    pair = {k: (models[0][k] + models[1][k]) / 2.0 for k in models[0]}
    for c in (0, 1):
        assert all(torch.equal(algorithm.custom[c][k], pair[k]) for k in pair)
    assert algorithm.custom[2] is models[2] and algorithm.custom[3] is models[3]


# ------------------------------------------------------------------ 4. customised and client models


@pytest.mark.parametrize("pool", ["all_uploaded", "selected"])
def test_4_customised_model_is_the_unweighted_mean_of_the_collaborators(pool):
    algorithm = build(beta=10**9, clients=FOUR, pool=pool)
    fed = algorithm.fed
    models = hand_models(algorithm)
    masks = block_masks(algorithm, [0, 0, 1, 1])
    upload(algorithm, range(4), models, masks)
    algorithm.aggregate(0, [0, 1, 2, 3])
    sizes = fed.train_sizes() / fed.train_sizes().sum()
    for k in models[0]:  # w: the train-size weighted mean of the trained models
        torch.testing.assert_close(algorithm.global_params[k], sum(float(s) * m[k] for s, m in zip(sizes, models)))
    for i, j in ((0, 1), (1, 0), (2, 3), (3, 2)):  # collaborators {i, j}: hand-picked through the masks
        assert all(torch.equal(algorithm.custom[i][k], (models[i][k] + models[j][k]) / 2.0) for k in models[0])
    w = algorithm.global_params
    for c in range(4):  # theta_i = M_i * u_i + (1 - M_i) * w, exactly
        theta = algorithm.eval_params(c)
        for k in w:
            assert torch.equal(theta[k], masks[c][k].float() * algorithm.custom[c][k] + (~masks[c][k]).float() * w[k])
    # next round only 0 and 2 train: client 1 is in the pool (stale) only with pool=all_uploaded
    new = hand_models(algorithm, seed=1)
    masks_now = block_masks(algorithm, [0, 0, 0, 0])
    upload(algorithm, [0, 2], new, masks_now)
    old_custom_1 = algorithm.custom[1]
    algorithm.aggregate(1, [0, 2])
    # overlaps: 0-2 share everything now; with all_uploaded, 1 (group 0) too, 3 (group 1) nothing
    if pool == "all_uploaded":
        expected = {k: (new[0][k] + models[1][k] + new[2][k]) / 3.0 for k in new[0]}
    else:
        expected = {k: (new[0][k] + new[2][k]) / 2.0 for k in new[0]}
    assert all(torch.equal(algorithm.custom[0][k], expected[k]) for k in expected)
    assert algorithm.custom[1] is old_custom_1 and algorithm.masks[1] is masks[1]  # not selected: kept
    theta = algorithm.eval_params(1)  # ... with the new global model
    assert all(torch.equal(theta[k], torch.where(masks[1][k], old_custom_1[k], algorithm.global_params[k])) for k in theta)


def test_4_a_client_that_never_trained_has_the_global_model():
    algorithm = build(clients=FOUR)
    models = hand_models(algorithm)
    upload(algorithm, [0, 1], models, block_masks(algorithm, [0, 1, None, None]))
    algorithm.aggregate(0, [0, 1])
    assert algorithm.eval_params(3) is algorithm.global_params and algorithm.masks[3] is None
    assert algorithm.start_training(1, 0)[0].params is algorithm.eval_params(0)  # trains from theta_i


def test_4_pfllib_round0_reset_gives_the_critical_positions_the_initial_model():
    algorithm = build(clients=FOUR, round0_reset=True)
    initial = algorithm.fed.initial_params()
    models = hand_models(algorithm)
    masks = block_masks(algorithm, [0, 0, 1, 1])
    upload(algorithm, range(4), models, masks)
    algorithm.aggregate(0, [0, 1, 2, 3])
    for c in range(4):
        theta = algorithm.eval_params(c)
        assert all(torch.equal(theta[k], torch.where(masks[c][k], initial[k], algorithm.global_params[k])) for k in theta)
    upload(algorithm, [0, 1], models, masks)
    algorithm.aggregate(1, [0, 1])  # from round 1 on, customised as usual
    assert all(torch.equal(algorithm.custom[0][k], (models[0][k] + models[1][k]) / 2.0) for k in initial)


# ------------------------------------------------------------------ 5. criticality = the shared function


@pytest.mark.parametrize("tau", [0.5, 1.0])
def test_5_masks_are_the_shared_critical_mask_over_every_tensor(tau):
    algorithm = build(tau=tau)
    algorithm.send(0, [0])
    phases = algorithm.start_training(0, 0)
    results = train_phases(algorithm.fed, phases, 0)
    algorithm.finish_training(0, 0, phases, results)
    before, after = phases[0].params, results[0].params
    mask = algorithm.pending_masks[0]
    assert mask.keys() == algorithm.global_params.keys()  # the whole model, not only the head
    expected = critical_mask(before, after, tau, "delta_theta", "per_tensor")
    assert all(torch.equal(mask[k], expected[k]) for k in mask)
    for k, m in mask.items():
        score = ((after[k] - before[k]) * after[k]).abs().flatten()
        if tau == 1.0 and bool((score > 1e-10).all()):
            assert m.all(), k  # no zero score: everything is critical
        elif tau == 0.5 and bool((score > 1e-10).all()):  # top half, ties included
            threshold = torch.sort(score, descending=True).values[int(0.5 * len(score)) - 1]
            assert torch.equal(m.flatten(), score >= threshold), k
    assert any(bool((((after[k] - before[k]) * after[k]).abs() > 1e-10).all()) for k in mask)  # some tensor is checked


# ------------------------------------------------------------------ smoke, resume, options, determinism


@pytest.mark.parametrize("preset", ["paper", "official"])
def test_two_round_smoke_run(preset):
    algorithm = build(preset=preset, beta=2)
    rows = rows_of(algorithm, rounds=2)
    assert list(rows["round"]) == [0, 1, 2] and rows["train_loss"].iloc[:2].notna().all()
    assert rows["test_acc"].between(0, 1).all() and (rows["bytes_up"].iloc[:2] > 0).all()
    trained = set(range(len(CLIENTS))) - {c for c in range(len(CLIENTS)) if algorithm.masks[c] is None}
    assert trained and all(algorithm.custom[c] is not None for c in trained)
    assert all(m.dtype == torch.bool for c in trained for m in algorithm.masks[c].values())
    assert not algorithm.pending_masks and not algorithm.uploads  # nothing left over between rounds
    if preset == "official":
        assert algorithm.options.pool == "selected" and algorithm.options.round0_reset and algorithm.fed.options.drop_last
        assert all(latest is None for latest in algorithm.latest)  # only this round's uploads are used


class Stop(Exception):
    pass


@pytest.mark.parametrize("pool", ["all_uploaded", "selected"])
def test_killed_run_resumes_with_identical_metrics(tmp_path, pool):
    expected = rows_of(build(pool=pool, beta=3), rounds=4)

    def stop_after_round_2(row):
        if row["round"] == 2:
            raise Stop

    checkpoint = Checkpoint(tmp_path / "ck.pt", every=1, identity={"run": pool})
    with pytest.raises(Stop):
        rows_of(build(pool=pool, beta=3), rounds=4, on_round=stop_after_round_2, checkpoint=checkpoint)
    resumed = rows_of(build(pool=pool, beta=3), rounds=4, checkpoint=checkpoint)  # rebuilt, then restored
    pd.testing.assert_frame_equal(resumed, expected, check_exact=True)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"beta": 0}, "beta must be an integer >= 1"),
        ({"beta": "1.5"}, "expected a value of type int"),
        ({"tau": -0.1}, r"tau must be in \[0, 1\]"),
        ({"tau": 1.5}, r"tau must be in \[0, 1\]"),
        ({"pool": "everyone"}, "choose one of all_uploaded, selected"),
    ],
)
def test_bad_option_fails_before_training(overrides, message):
    with pytest.raises(UserError, match=message):
        resolve_options("fedcac", overrides)  # what `fedgmh train` and the workflow's planning call first


def test_a_float_beta_is_refused_also_when_the_options_are_built_directly():
    with pytest.raises(UserError, match="beta must be an integer"):
        type(resolve_options("fedcac", {})[0])(beta=2.0)


def test_same_seed_same_run():
    first, second = build(beta=2), build(beta=2)
    pd.testing.assert_frame_equal(rows_of(first, rounds=3), rows_of(second, rounds=3), check_exact=True)
    for a, b in zip(first.custom, second.custom):
        assert (a is None) == (b is None) and (a is None or all(torch.equal(a[k], b[k]) for k in a))
