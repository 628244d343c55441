"""CE-pFL (Huang & Chen 2025, seed 004): the spec's tests 1-8 (docs/baselines.md, "CE-pFL") on a tiny model."""

from __future__ import annotations

import copy
import math

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import comparable, make_federation

from fedgmh.algorithms import clustered, get_algorithm
from fedgmh.algorithms.clustered import loss_slope, median_gamma, mmd, raw_scores, smoothed, top_clients
from fedgmh.engine import Checkpoint, run_rounds
from fedgmh.engine import rounds as round_loop
from fedgmh.errors import UserError
from fedgmh.model import is_body, is_head
from fedgmh.train import resolve_options

CLIENTS = [[0, 1, 0, 1, 1, 0], [1, 2, 2, 1], [0, 2, 2, 0, 1], [2, 2, 1, 1], [0, 0, 1, 1, 2], [2, 1, 0, 0]]
SMALL = [[0, 1, 0], [1, 2, 2], [0, 2], [2, 1, 1]]  # fewer samples: whole runs stay fast on a loaded CPU
TIMING = ["seconds"]
BYTES = ["bytes_up", "bytes_down"]


def build(name="cepfl", client_labels=CLIENTS, fed_kwargs=None, **overrides):
    algo_options, engine = resolve_options(name, overrides)
    fed = make_federation(client_labels, num_classes=3, lr_decay=engine.lr_decay, **(fed_kwargs or {}))
    return get_algorithm(name)(fed, algo_options)


def rows_of(algo, rounds=4, join_ratio=0.5, **kwargs):
    return pd.DataFrame(run_rounds(algo.fed, algo, rounds, join_ratio, **kwargs)).drop(columns=TIMING)


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def always_flat(monkeypatch):
    """Every full loss window fits slope 0: clustering fires as soon as the window is full."""
    monkeypatch.setattr(clustered, "loss_slope", lambda window: 0.0)


# --- test 1: the MMD -------------------------------------------------------------------------------


def brute_force_mmd(a, b, gamma):
    k = lambda x, y: math.exp(-gamma * float(((x - y) ** 2).sum()))  # noqa: E731
    m, n = len(a), len(b)
    aa = sum(k(a[p], a[q]) for p in range(m) for q in range(m)) / m**2
    ab = sum(k(a[p], b[q]) for p in range(m) for q in range(n)) / (m * n)
    bb = sum(k(b[p], b[q]) for p in range(n) for q in range(n)) / n**2
    return math.sqrt(max(aa - 2 * ab + bb, 0.0))


def test_mmd_is_eq8_with_a_gaussian_kernel():
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(3, 5, generator=gen, dtype=torch.float64), torch.randn(4, 5, generator=gen, dtype=torch.float64)
    assert float(mmd(a, a, 0.3)) == pytest.approx(0.0, abs=1e-7)
    assert float(mmd(a, b, 0.3)) == pytest.approx(float(mmd(b, a, 0.3)), rel=1e-12)
    assert float(mmd(a, b, 0.3)) == pytest.approx(brute_force_mmd(a, b, 0.3), rel=1e-10)
    shifted = [float(mmd(a, a + shift, 0.3)) for shift in (0.1, 0.5, 1.0, 3.0)]
    assert shifted == sorted(shifted) and shifted[0] > 0  # grows as B moves away from A
    # pitfall 2: with a large gamma every off-diagonal kernel value vanishes and the MMD depends only
    # on the numbers of points, sqrt(1/m + 1/n), whatever the points are
    assert float(mmd(a, b, 1e6)) == pytest.approx(math.sqrt(1 / 3 + 1 / 4), rel=1e-9)
    # the median heuristic: 1 / the median squared distance over the 3 distinct pairs of 3 points
    points = torch.tensor([[0.0], [1.0], [3.0]], dtype=torch.float64)  # squared distances 1, 9, 4
    assert median_gamma(points[:1], points[1:]) == pytest.approx(1 / 4)


# --- test 2: scores and selection ------------------------------------------------------------------


def test_with_alpha_zero_and_half_participation_the_halves_alternate():
    n, count = 6, 3
    scores = torch.full((n,), math.nan, dtype=torch.float64)
    last = torch.full((n,), -1, dtype=torch.int64)
    proposed = [4, 0, 2]  # round 0: the engine's draw
    chosen = []
    for rnd in range(6):
        selected = proposed if rnd == 0 else top_clients(scores, proposed, count)
        chosen.append(sorted(selected))
        last[selected] = rnd
        sim = torch.randn(n, dtype=torch.float64)  # alpha = 0: the similarity does not matter
        scores = smoothed(raw_scores(sim, last, rnd + 1, alpha=0.0, beta=1.0), scores, 1.0)
    assert chosen == [[0, 2, 4], [1, 3, 5]] * 3


@pytest.mark.parametrize("wait_term,just_trained", [(None, 0.0), ("current", 0.0), ("next", 1 - math.exp(-1))])
def test_the_time_term_of_a_client_that_has_just_trained(wait_term, just_trained):
    """004: t is the current round, so the time term is 0 at the end of the round a client trained in
    (the default); wait_term=next scores for round t + 1. alpha = 0, smoothing 1: the score is the time term."""
    overrides = {"alpha": 0.0, "smoothing": 1.0, "clustering": "off"} | ({"wait_term": wait_term} if wait_term else {})
    algo = build(**overrides)
    rows_of(algo, rounds=1, join_ratio=0.5)
    trained = algo.last_round == 0
    assert int(trained.sum()) == 3
    assert torch.allclose(algo.scores[trained], torch.tensor(just_trained, dtype=torch.float64))
    assert torch.allclose(algo.scores[~trained], torch.tensor(1.0, dtype=torch.float64))  # never trained: 1


def test_records_made_before_wait_term_keep_their_reading_in_the_run_key():
    """A record without `wait_term` ran the t + 1 reading: it must not be reused for today's default."""
    from fedgmh.store import with_option_defaults

    old = {"config": {"algorithm": "cepfl"}, "algorithm_options": {}, "engine_options": {}}
    assert with_option_defaults(old)["algorithm_options"]["wait_term"] == "next"
    assert resolve_options("cepfl", {})[0].wait_term == "current"


def test_with_beta_zero_similarity_picks_the_smallest_mmd_and_literal_the_largest():
    algo = build(alpha=1.0, beta=0.0)
    gen = torch.Generator().manual_seed(0)
    base = torch.randn(3, 512, generator=gen)
    offsets = [0.0, 2.0, 0.5, 4.0, 1.0, 3.0]  # client c's centres: the same points, moved by offsets[c]
    for client, offset in enumerate(offsets):
        algo.centres[client] = {k: base[k] + offset for k in range(3)}
    mmds = []
    mu = torch.stack(list(algo.global_centres().values())).double()
    for client in range(6):
        mine = torch.stack(list(algo.centres[client].values())).double()
        mmds.append(float(mmd(mine, mu, median_gamma(mine, mu))))
    algo.last_round[:] = 0
    similar = algo.raw_scores(1)
    torch.testing.assert_close(similar, -torch.tensor(mmds, dtype=torch.float64))
    assert sorted(top_clients(similar, [0, 1], 2)) == sorted(np.argsort(mmds)[:2].tolist())
    literal = build(alpha=1.0, beta=0.0, mmd_sign="literal")
    literal.centres, literal.last_round = algo.centres, algo.last_round
    assert sorted(top_clients(literal.raw_scores(1), [0, 1], 2)) == sorted(np.argsort(mmds)[-2:].tolist())


def test_smoothing_is_eq10_and_never_seen_clients_get_finite_scores():
    sim = torch.tensor([-0.2, math.nan, -0.6, math.nan], dtype=torch.float64)
    last = torch.tensor([3, -1, 1, -1])
    raw = raw_scores(sim, last, 5, alpha=2.0, beta=0.5)
    by_hand = [2 * -0.2 + 0.5 * (1 - math.exp(-2)), 2 * -0.4 + 0.5, 2 * -0.6 + 0.5 * (1 - math.exp(-4)), 2 * -0.4 + 0.5]
    torch.testing.assert_close(raw, torch.tensor(by_hand, dtype=torch.float64))
    previous = torch.tensor([1.0, math.nan, 0.0, 2.0], dtype=torch.float64)
    expected = [0.3 * by_hand[0] + 0.7 * 1.0, by_hand[1], 0.3 * by_hand[2], 0.3 * by_hand[3] + 0.7 * 2.0]
    torch.testing.assert_close(smoothed(raw, previous, 0.3), torch.tensor(expected, dtype=torch.float64))
    assert bool(torch.isfinite(raw_scores(torch.full((3,), math.nan), torch.full((3,), -1), 0, 1.0, 1.0)).all())


def test_equal_scores_keep_the_engines_draw():
    assert top_clients(torch.zeros(5, dtype=torch.float64), [3, 1], 2) == [3, 1]
    assert top_clients(torch.tensor([0.0, 1.0, 0.0, 0.0, 1.0]), [3, 0], 3) == [1, 4, 3]


# --- test 3: reduces to FedPer ---------------------------------------------------------------------


def test_with_random_selection_and_no_clustering_it_is_fedper_round_by_round():
    fedper = rows_of(build("fedper", SMALL), rounds=3)
    cepfl = rows_of(build(client_labels=SMALL, selection="random", clustering="off", weighting="size", broadcast="all"), rounds=3)
    pd.testing.assert_frame_equal(cepfl.drop(columns=BYTES), fedper.drop(columns=BYTES), check_exact=True)
    assert (cepfl["bytes_down"] == fedper["bytes_down"]).all()
    assert (cepfl["bytes_up"].iloc[:-1] > fedper["bytes_up"].iloc[:-1]).all()  # + the centres, labels and loss


# --- test 4: the trigger ---------------------------------------------------------------------------


def test_loss_slope_is_the_least_squares_slope():
    assert loss_slope([(0, 3.0), (1, 2.0), (2, 1.0)]) == pytest.approx(-1.0)
    assert loss_slope([(4, 1.0), (5, 1.0), (6, 1.0)]) == 0.0
    t = np.arange(7.0)
    values = 0.3 * t + np.sin(t)
    assert loss_slope(list(zip(t.tolist(), values.tolist()))) == pytest.approx(np.polyfit(t, values, 1)[0])


def test_a_decreasing_window_never_clusters_a_flat_one_once_per_window():
    algo = build(window=3)
    fired = [rnd for rnd in range(20) if algo.watch_loss(rnd, 5.0 - 0.1 * rnd) is not None]
    assert fired == [] and len(algo.slopes) == 18 and all(s < 0 for _, s in algo.slopes)
    algo = build(window=3)
    fired = [rnd for rnd in range(10) if algo.watch_loss(rnd, 1.0) is not None]
    assert fired == [2, 5, 8]  # the window is emptied: M rounds between two cluster rounds
    assert [rnd for rnd in range(10) if build(window=3, clustering="off").watch_loss(rnd, 1.0) is not None] == []


# --- test 5: the fusion ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def warmed():
    """The state after 2 rounds without clustering (the fusion options play no part in them)."""
    algo = build(clustering="off")
    run_rounds(algo.fed, algo, 2, 0.5)
    return algo.state(), algo.fed.generator.get_state(), algo.fed.participations.copy()


def trained_clustered(monkeypatch, warmed, **overrides):
    """An algorithm after 2 rounds, with the bodies its next cluster round trains recorded."""
    algo = build(**overrides)
    state, generator, participations = warmed
    algo.load_state(copy.deepcopy(state))  # each test moves its own copy
    algo.fed.generator.set_state(generator)
    algo.fed.participations[:] = participations
    bodies = {}
    train = round_loop.train_clients

    def recording(fed, algorithm, rnd, clients):
        results = train(fed, algorithm, rnd, clients)
        bodies.update({c: {k: v for k, v in r.params.items() if is_body(k)} for c, r in zip(clients, results)})
        return results

    monkeypatch.setattr(round_loop, "train_clients", recording)
    return algo, bodies


def mean_of(models, weights=None):
    weights = weights or [1 / len(models)] * len(models)
    return {k: sum(w * m[k] for w, m in zip(weights, models)) for k in models[0]}


def test_one_cluster_gives_the_mean_of_all_members_bodies(monkeypatch, warmed):
    algo, bodies = trained_clustered(monkeypatch, warmed, clusters=1)
    start = dict(algo.global_params)
    algo.cluster_round(2, [0, 1, 2], slope=0.0)
    clustered_clients = [c for c in range(6) if algo.centres[c]]
    assert sorted(bodies) == clustered_clients and len(clustered_clients) >= 3
    for k, v in mean_of(list(bodies.values())).items():
        torch.testing.assert_close(algo.global_params[k], v, rtol=1e-5, atol=1e-6)
        assert not torch.equal(algo.global_params[k], start[k])


def test_size_fusion_collapses_to_the_plain_mean_and_uniform_fusion_does_not(monkeypatch, warmed):
    fused = {}
    for fuse in ("size", "uniform"):
        algo, bodies = trained_clustered(monkeypatch, warmed, clusters=2, cluster_fuse=fuse)
        algo.cluster_round(2, [0, 1, 2], slope=0.0)
        event = algo.cluster_events[-1]
        fused[fuse] = algo.global_params
    plain = mean_of(list(bodies.values()))
    for k, v in plain.items():
        torch.testing.assert_close(fused["size"][k], v, rtol=1e-5, atol=1e-6)
    sizes = torch.bincount(event["cluster"])
    assert len(sizes) == 2 and sizes[0] != sizes[1]  # unequal clusters: each counting once moves the mean
    members = event["trained"].tolist()
    cluster_of = dict(zip(event["clients"].tolist(), event["cluster"].tolist()))
    means = [mean_of([bodies[c] for c in members if cluster_of[c] == g]) for g in (0, 1)]
    for k, v in mean_of(means).items():
        torch.testing.assert_close(fused["uniform"][k], v, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(fused["uniform"]["body.0.weight"], plain["body.0.weight"])


# --- test 6: the class centres ---------------------------------------------------------------------


def test_centres_are_per_label_mean_features_of_the_trained_body():
    algo = build(client_labels=[[0, 1, 0, 1, 1], [1, 2, 2], [0, 2, 2, 0]])
    fed = algo.fed
    algo.send(0, [2])
    result = algo.train_client(0, 2)
    idx = fed.train_idx[2]
    x, y = fed.images[idx], fed.labels[idx]
    body = {k[5:]: v for k, v in result.params.items() if k.startswith("body.")}
    feats = torch.func.functional_call(fed.model.body, body, (x,))
    assert sorted(algo.centres[2]) == [0, 2]
    for label in (0, 2):
        torch.testing.assert_close(algo.centres[2][label], feats[y == label].mean(0))
    assert algo.centres[0] is None and algo.centres[1] is None and int(algo.last_round[2]) == 0
    head = {k: v for k, v in result.params.items() if is_head(k)}
    assert all(torch.equal(algo.local[2][k], head[k]) for k in head)  # the head stays on the client


# --- test 7: accounting ----------------------------------------------------------------------------


def test_a_cluster_round_counts_its_members_uploads(always_flat):
    algo = build(client_labels=SMALL, window=2)
    rows = rows_of(algo, rounds=2)
    [event] = algo.cluster_events
    assert event["round"] == 1  # the window of 2 rounds is full at round 1
    selected, members = 2, len(event["trained"])  # int(4 * 0.5) selected
    assert members == len(event["clients"]) >= selected  # cluster_members=all: every client with centres
    assert rows["clients_up"].tolist() == [selected, selected + members, 0]  # the last round only evaluates
    assert algo.fed.participations.sum() == 2 * selected + members
    tables = algo.extra_records()
    assert tables["participations"]["participations"].tolist() == algo.fed.participations.tolist()
    assert tables["participations"]["last_round"].tolist() == algo.last_round.tolist()
    clusters = tables["cluster_rounds"]
    assert clusters["round"].tolist() == [1] * members and clusters["slope"].tolist() == [event["slope"]] * members
    assert clusters["client"].tolist() == event["clients"].tolist() and clusters["cluster"].tolist() == event["cluster"].tolist()
    assert clusters["trained"].all()  # cluster_members=all


def test_cluster_members_selected_trains_only_this_rounds_clients(always_flat):
    algo = build(client_labels=SMALL, window=2, cluster_members="selected")
    rows = rows_of(algo, rounds=2)
    assert rows["clients_up"].tolist() == [2, 4, 0]
    assert sorted(algo.cluster_events[0]["trained"].tolist()) == sorted(c for c in range(4) if int(algo.last_round[c]) == 1)


# --- test 8 and the common checks ------------------------------------------------------------------


class Stop(Exception):
    pass


@pytest.mark.parametrize("overrides", [{"client_labels": SMALL, "window": 2, "broadcast": "selected"}])
def test_interrupted_run_resumes_bit_identically(tmp_path, always_flat, overrides):
    algo = build(**overrides)
    expected = rows_of(algo, rounds=4)
    expected_state = algo.state()
    assert [e["round"] for e in algo.cluster_events] == [1, 3]  # one before the interruption, one after

    def stop_after_round_2(row):
        if row["round"] == 2:
            raise Stop

    checkpoint = Checkpoint(tmp_path / "ck.pt", every=1, identity={"run": "cepfl"})
    with pytest.raises(Stop):
        rows_of(build(**overrides), rounds=4, on_round=stop_after_round_2, checkpoint=checkpoint)
    resumed_algo = build(**overrides)
    resumed = rows_of(resumed_algo, rounds=4, checkpoint=checkpoint)
    pd.testing.assert_frame_equal(resumed, expected, check_exact=True)
    state = resumed_algo.state()
    assert torch.equal(state["scores"], expected_state["scores"]) and state["window"] == expected_state["window"]
    assert state["slopes"] == expected_state["slopes"]
    for mine, theirs in zip(state["cluster_events"], expected_state["cluster_events"]):
        assert mine["round"] == theirs["round"] and torch.equal(mine["cluster"], theirs["cluster"])
    for mine, theirs in zip(state["centres"], expected_state["centres"]):
        assert (mine is None) == (theirs is None)
        assert mine is None or all(torch.equal(mine[k], theirs[k]) for k in theirs)


def test_two_round_smoke_run_and_determinism():
    first, second = build(), build()
    rows = [comparable(r) for r in run_rounds(first.fed, first, 2, 0.5)]
    again = [comparable(r) for r in run_rounds(second.fed, second, 2, 0.5)]
    strip = lambda rs: [{k: v for k, v in r.items() if k not in TIMING} for r in rs]  # noqa: E731
    assert strip(rows) == strip(again)
    assert len(rows) == 3 and all(0 <= r["test_acc"] <= 1 for r in rows)
    assert all(math.isfinite(r["train_loss"]) for r in rows[:2])
    assert bool(torch.isfinite(first.scores).all())
    # round 1 takes the top scores, not the engine's draw for round 1
    assert sorted(first.choose_clients(2, [0, 1, 2])) == sorted(top_clients(first.scores, [0, 1, 2], 3))


def test_broadcast_selected_evaluates_the_others_with_the_body_they_last_received():
    algo = build(broadcast="selected")
    run_rounds(algo.fed, algo, 1, 0.5)  # round 0 trains 3 clients, round 1 evaluates
    trained = [c for c in range(6) if int(algo.last_round[c]) == 0]
    others = [c for c in range(6) if c not in trained]
    initial = algo.fed.initial_params()
    algo.send(1, others[:1])
    for c in trained:  # received the initial body in round 0, nothing since
        assert all(torch.equal(algo.eval_params(c)[k], initial[k]) for k in algo.global_params)
    assert all(algo.eval_params(others[0])[k] is algo.global_params[k] for k in algo.global_params)


@pytest.mark.parametrize("bad", [{"window": "1"}, {"clusters": "0"}, {"smoothing": "0"}, {"smoothing": "1.5"},
                                 {"alpha": "-1"}, {"gamma": "0"}, {"gamma": "wide"}, {"mmd_sign": "other"},
                                 {"weighting": "median"}, {"centres": "during_training"}])
def test_bad_options_fail_before_training(bad):
    with pytest.raises(UserError):
        resolve_options("cepfl", bad)


def test_defaults_are_the_specs():
    options, _ = resolve_options("cepfl", {})
    assert (options.window, options.alpha, options.beta, options.gamma, options.smoothing, options.clusters) == (10, 1.0, 1.0, "median", 0.5, 4)
    assert (options.mmd_sign, options.cluster_fuse, options.cluster_members, options.broadcast, options.weighting,
            options.selection, options.clustering, options.centres) == (
        "similarity", "uniform", "all", "all", "uniform", "priority", "on", "after_training")
    assert resolve_options("cepfl", {"gamma": 0.01})[0].kernel_gamma() == 0.01


def test_a_cluster_round_trains_batched_as_sequentially(always_flat):
    """vectorise=on trains a cluster round's members in one batched step, with the sequential numbers."""
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # float32 last digits can flip a ReLU of this toy model (test_vectorised.py)
    try:
        runs = {}
        for mode in ("off", "on"):
            algo = build(client_labels=SMALL, window=2, fed_kwargs={"vectorise": mode})
            runs[mode] = rows_of(algo, rounds=3)
            assert [e["round"] for e in algo.cluster_events] == [1]
        pd.testing.assert_frame_equal(runs["on"], runs["off"], check_exact=False, rtol=1e-6, atol=1e-8)
    finally:
        torch.set_default_dtype(default)
