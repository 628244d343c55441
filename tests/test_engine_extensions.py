"""The engine extensions of issue 12: server-chosen clients, the run's total rounds, evaluation-side
random generators, uniform averaging, the per-round upload counter, the batched `trainable`
filter, and ExDir with a very large alpha."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import REPO_ROOT, batched_plain_sgd, make_federation

from fedgmh import store
from fedgmh.algorithms import algorithm_classes, get_algorithm
from fedgmh.algorithms.averaging import FedAvg, ParameterAveraging
from fedgmh.cards import card, resolve_options
from fedgmh.cards.averaging import AveragingOptions
from fedgmh.engine import Checkpoint, eval_generator, local_train, mix_seed, run_rounds, select_clients, splitmix64
from fedgmh.errors import UserError

CLIENTS = [[0, 1, 0, 1, 1, 0], [1, 2, 2, 1], [0, 2, 2, 0, 1], [2, 2, 1, 1], [0, 0, 1, 1, 2], [2, 1, 0, 0]]


class Stop(Exception):
    pass


class Recording(FedAvg):
    """FedAvg that records what the engine tells it (transient: not part of its state)."""

    name = "recording"
    transient = ("proposed", "seen_total")
    keep_first = 0  # 0: play every proposed client; k: only the k lowest-numbered ones

    def __init__(self, fed, options) -> None:
        super().__init__(fed, options)
        self.proposed, self.seen_total = [], []

    def choose_clients(self, rnd, proposed):
        self.proposed.append(list(proposed))
        return sorted(proposed)[: self.keep_first] if self.keep_first else proposed

    def send(self, rnd, selected):
        self.seen_total.append(self.fed.total_rounds)
        super().send(rnd, selected)


class KeepOne(Recording):
    keep_first = 1


class KeepTwo(Recording):
    keep_first = 2


def build(cls, **engine):
    fed = make_federation(CLIENTS, num_classes=3, batch_size=2, **engine)
    return fed, cls(fed, AveragingOptions())


def frame(rows):
    return pd.DataFrame(rows).drop(columns=["seconds", "client_acc"])


# ------------------------------------------------------------------------- 1. choose_clients

def test_chosen_clients_alone_train_and_the_draws_stay_the_same():
    fed_all, every = build(Recording)
    rows_all = run_rounds(fed_all, every, 3, 0.5)
    fed_one, one = build(KeepOne)
    rows_one = run_rounds(fed_one, one, 3, 0.5)
    rng = np.random.RandomState(fed_all.seed)
    draws = [select_clients(rng, 6, 0.5) for _ in range(4)]
    assert every.proposed == one.proposed == draws  # the RNG stream does not depend on the answer
    played = [min(p) for p in draws[:3]]  # rounds 0..2 train; round 3 only evaluates
    assert fed_one.participations.tolist() == np.bincount(played, minlength=6).tolist()
    assert fed_all.participations.sum() == 3 * 3
    assert [r["clients_up"] for r in rows_one] == [1, 1, 1, 0]
    assert [r["clients_up"] for r in rows_all] == [3, 3, 3, 0]
    assert frame(rows_one)["train_loss"].tolist() != frame(rows_all)["train_loss"].tolist()


def test_chosen_clients_on_the_batched_path_match_the_sequential_one():
    runs = {}
    for mode in ("off", "on"):
        fed, algo = build(KeepTwo, vectorise=mode)
        runs[mode] = (frame(run_rounds(fed, algo, 2, 0.5)), fed.participations.copy(), algo.global_params)
    assert runs["on"][1].tolist() == runs["off"][1].tolist() and runs["on"][1].sum() == 2 * 2
    pd.testing.assert_frame_equal(runs["on"][0], runs["off"][0], rtol=1e-4, atol=1e-5)
    for k, v in runs["off"][2].items():
        torch.testing.assert_close(runs["on"][2][k], v, rtol=1e-4, atol=1e-5)


def test_bad_choice_is_refused():
    class Twice(Recording):
        def choose_clients(self, rnd, proposed):
            return [proposed[0], proposed[0]]

    fed, algo = build(Twice)
    with pytest.raises(ValueError, match="distinct"):
        run_rounds(fed, algo, 2, 0.5)


# --------------------------------------------------- 1 + 2. resume, and total_rounds on every start

def test_resume_with_chosen_clients_is_identical_and_knows_the_total(tmp_path):
    fed, algo = build(KeepOne)
    expected = frame(run_rounds(fed, algo, 5, 0.5))
    assert algo.seen_total == [5] * 6  # rounds 0..5, all with total_rounds = 5

    def stop_after_round_2(row):
        if row["round"] == 2:
            raise Stop

    checkpoint = Checkpoint(tmp_path / "ck.pt", every=1, identity={"run": "keep-one"})
    fed, algo = build(KeepOne)
    with pytest.raises(Stop):
        run_rounds(fed, algo, 5, 0.5, on_round=stop_after_round_2, checkpoint=checkpoint)
    fed, algo = build(KeepOne)  # a new process
    assert fed.total_rounds is None
    resumed = frame(run_rounds(fed, algo, 5, 0.5, checkpoint=checkpoint))
    assert algo.seen_total == [5] * 4  # rounds 2..5 (stopped in round 2, before its checkpoint)
    pd.testing.assert_frame_equal(resumed, expected, check_exact=True)


# ------------------------------------------------------------------- 3. evaluation generators

def test_eval_generator_depends_on_seed_round_client_and_stream_only():
    draw = lambda *args, **kw: torch.rand(8, generator=eval_generator(*args, **kw))  # noqa: E731
    assert torch.equal(draw(0, 3, 5), draw(0, 3, 5))
    others = [draw(1, 3, 5), draw(0, 4, 5), draw(0, 3, 6), draw(0, 5, 3), draw(0, 3, 5, stream=1)]
    assert all(not torch.equal(draw(0, 3, 5), o) for o in others)
    # the documented mixing: h = splitmix64(h ^ v) over the values, halved to 63 bits
    assert splitmix64(0) == 0xE220A8397B1DCDAF  # SplitMix64's first output from state 0
    h = 0
    for v in (7, 2, 1, 0):
        h = splitmix64(h ^ v)
    assert mix_seed(7, 2, 1, 0) == h >> 1 < 2**63
    assert mix_seed(-1) == splitmix64(2**64 - 1) >> 1  # negative values as their 64-bit pattern


class NoisyEval(FedAvg):
    """Evaluates each client's model plus noise drawn from its own evaluation generator."""

    name = "noisy_eval"
    deterministic_eval = False

    def eval_params(self, client):
        gen = eval_generator(self.fed.seed, self.fed.current_round, client)
        head = {k: v + 0.05 * torch.randn(v.shape, generator=gen) for k, v in self.global_params.items() if k.startswith("head.")}
        return {**self.global_params, **head}


def test_evaluation_randomness_never_changes_training():
    runs = {}
    for every in (1, 2):
        fed, algo = build(NoisyEval, eval_every=every)
        runs[every] = (frame(run_rounds(fed, algo, 2, 0.5)).set_index("round"), algo.global_params)
    dense, sparse = runs[1][0], runs[2][0]
    assert sparse.index.tolist() == [0, 2]
    pd.testing.assert_frame_equal(sparse, dense.loc[[0, 2]], check_exact=True)  # the same evaluations too
    for k, v in runs[1][1].items():
        assert torch.equal(runs[2][1][k], v)


# ------------------------------------------------------------------------ 4. weighting option

def test_uniform_weighting_is_the_simple_mean_of_the_trained_clients():
    clients = [[0, 1, 0, 1, 1, 0, 1, 0], [1, 2, 2], [0, 2, 2, 0, 1]]  # 8, 3 and 5 train samples
    averaged = {}
    for weighting in ("size", "uniform"):
        options, _ = resolve_options("fedavg", {"weighting": weighting})
        fed = make_federation(clients, num_classes=3, batch_size=2)
        algo = get_algorithm("fedavg")(fed, options)
        algo.send(0, [0, 1, 2])
        for c in range(3):
            algo.train_client(0, c)
        uploads = {c: dict(u) for c, u in algo.uploads.items()}
        algo.aggregate(0, [0, 1, 2])
        averaged[weighting] = algo.global_params
        weights = [1 / 3] * 3 if weighting == "uniform" else [8 / 16, 3 / 16, 5 / 16]
        for k, v in algo.global_params.items():
            torch.testing.assert_close(v, sum(w * uploads[c][k] for c, w in enumerate(weights)), rtol=1e-6, atol=1e-7)
    assert not torch.allclose(averaged["size"]["head.weight"], averaged["uniform"]["head.weight"])


def test_every_averaging_algorithm_takes_weighting_with_size_by_default():
    averaging = sorted(n for n, cls in algorithm_classes().items() if issubclass(cls, ParameterAveraging) and n != "local")
    assert {"fedavg", "fedprox", "fedper", "lgfedavg", "fedrep", "fedrod", "fedcp", "ditto", "fedavg_lp"} <= set(averaging)
    simple_mean = {"cepfl", "perfedavg"}  # whose papers average with a simple mean (004's eq. 11, Per-FedAvg's)
    for name in averaging:
        assert resolve_options(name, {})[0].weighting == ("uniform" if name in simple_mean else "size"), name
        other = "size" if name in simple_mean else "uniform"
        assert resolve_options(name, {"weighting": other})[0].weighting == other, name
        with pytest.raises(UserError, match="weighting"):
            resolve_options(name, {"weighting": "median"})
    assert resolve_options("perfedavg", {})[0].weighting == "uniform"
    # options of their own are kept beside it
    assert resolve_options("fedprox", {"mu": "0.1", "weighting": "uniform"})[0].mu == 0.1
    assert "weighting" not in {f for f in card("local").options.__dataclass_fields__}  # Local averages nothing


def test_committed_records_keep_their_run_key():
    """A record written before `weighting` existed is the same run as one with weighting=size."""
    record = json.loads((REPO_ROOT / "paper_artifacts/table2_mnist/runs/table2/mnist_c2_a0.5/fedavg/seed0/run.json").read_text())
    assert "weighting" not in record["algorithm_options"]
    newer = {**record, "algorithm_options": {**record["algorithm_options"], "weighting": "size"}}
    assert store.run_key(record) == store.run_key(newer)
    uniform = {**record, "algorithm_options": {**record["algorithm_options"], "weighting": "uniform"}}
    assert store.run_key(record) != store.run_key(uniform)


# ----------------------------------------------------------------------------- 5. clients_up

def test_clients_up_counts_trained_clients_and_extra_uploads():
    class Extra(Recording):
        def aggregate(self, rnd, selected):
            self.extra_uploads += 2  # e.g. a cluster round of two more clients
            super().aggregate(rnd, selected)

    fed, algo = build(Extra)
    rows = run_rounds(fed, algo, 3, 0.5)
    assert [r["clients_up"] for r in rows] == [5, 5, 5, 0]
    assert "extra_uploads" not in algo.state()
    options, _ = resolve_options("local", {})
    fed = make_federation(CLIENTS, num_classes=3, batch_size=2)
    assert [r["clients_up"] for r in run_rounds(fed, get_algorithm("local")(fed, options), 2, 0.5)] == [0, 0, 0]


def test_records_with_and_without_clients_up_are_the_same_results(tmp_path):
    source = REPO_ROOT / "paper_artifacts/table2_mnist/runs/table2/mnist_c2_a0.5/fedavg/seed0"
    old, new = tmp_path / "old", tmp_path / "new"
    shutil.copytree(source, old)
    shutil.copytree(source, new)
    metrics = pd.read_csv(new / "metrics.csv")
    metrics.insert(len(metrics.columns) - 1, "clients_up", 20)
    metrics.to_csv(new / "metrics.csv", index=False)
    assert store.read_record(old).same_results(store.read_record(new))
    metrics.loc[1, "test_acc"] += 0.01
    metrics.to_csv(new / "metrics.csv", index=False)
    assert not store.read_record(old).same_results(store.read_record(new))


# ------------------------------------------------------------------ 7. batched trainable filter

def test_batched_training_trains_only_the_trainable_parameters():
    from fedgmh.model import is_body

    feds = [make_federation(CLIENTS, num_classes=3, batch_size=2) for _ in range(2)]
    start = feds[0].initial_params()
    clients = [0, 2, 4]
    sequential = [local_train(feds[0], start, c, trainable=is_body) for c in clients]
    batched = batched_plain_sgd(feds[1], [start] * len(clients), clients, trainable=is_body)
    for one, many in zip(sequential, batched):
        for k, v in one.params.items():
            torch.testing.assert_close(many.params[k], v, rtol=1e-4, atol=1e-5)
            assert torch.equal(v, start[k]) != is_body(k)  # the head is frozen, the body moved


# -------------------------------------------------------------------- 6. ExDir, alpha -> inf

def test_exdir_with_huge_alpha_splits_each_class_equally_among_its_holders():
    from fedgmh.partition import exdir

    labels = np.repeat(np.arange(10), 100)
    spreads = {}
    for alpha in (1e6, 0.5):
        partition = exdir(labels, 20, 3, alpha, seed=1)
        counts = np.stack([np.bincount(labels[np.concatenate([tr, te])], minlength=10) for tr, te in zip(partition.train, partition.test)])
        assert counts.sum() == len(labels)
        spreads[alpha] = max(int(col[col > 0].max() - col[col > 0].min()) for col in counts.T)
    assert spreads[1e6] <= 2  # every receiving holder of a class gets the same amount (integer cut points)
    assert spreads[0.5] > 10
