"""The controls `local` and `fedavg_lp` (../shared/spec/more/local.md, label_prior.md)."""

from __future__ import annotations

import dataclasses
import math

import pandas as pd
import pytest
import torch
from conftest import make_federation

from fedgmh.algorithms import get_algorithm
from fedgmh.algorithms.controls import PRIOR_KEY
from fedgmh.engine import predict, run_rounds
from fedgmh.priors import label_prior
from fedgmh.train import resolve_options

# 6 clients of 2 labels out of 5 (label skew), one client of a single label
CLIENTS = [[0, 1, 0, 1, 1, 0], [1, 2, 2, 1], [2, 3, 3, 2, 3], [3, 4, 4, 3], [4, 0, 0, 4, 4], [2, 2, 2, 2]]


def run(name, rounds=3, seed=0, **overrides):
    algo_options, engine = resolve_options(name, overrides)
    fed = make_federation(CLIENTS, num_classes=5, batch_size=2, test_per_client=6, seed=seed, **dataclasses.asdict(engine))
    algo = get_algorithm(name)(fed, algo_options)
    rows = pd.DataFrame(run_rounds(fed, algo, rounds, 0.5)).drop(columns="seconds")
    return fed, algo, rows


def test_local_equals_fedamp_with_a_detached_proximal_term_round_by_round():
    _, _, local = run("local", rounds=4)
    _, _, fedamp = run("fedamp", rounds=4, proximal="detached")
    metrics = ["round", "test_acc", "test_acc_mean", "test_acc_std", "test_loss", "train_loss"]
    pd.testing.assert_frame_equal(local[metrics], fedamp[metrics])
    assert (local["bytes_up"] == 0).all() and (local["bytes_down"] == 0).all()
    assert (fedamp["bytes_up"] > 0).any()  # the two differ in what they send, not in what they learn


def test_local_client_never_selected_keeps_the_initial_model():
    fed, algo, _ = run("local", rounds=2)
    trained = set(algo.local)
    initial = fed.initial_params()
    for client in set(range(fed.num_clients)) - trained:
        assert all(torch.equal(algo.eval_params(client)[k], initial[k]) for k in initial)
    assert trained and all(not torch.equal(algo.eval_params(c)["head.weight"], initial["head.weight"]) for c in trained)


def test_label_prior_trains_exactly_fedavg():
    _, fedavg, plain = run("fedavg")
    _, lp, prior = run("fedavg_lp")
    pd.testing.assert_frame_equal(plain[["train_loss", "bytes_up", "bytes_down"]], prior[["train_loss", "bytes_up", "bytes_down"]])
    assert (prior["test_acc"] != plain["test_acc"]).any()  # only the evaluation differs
    assert all(torch.equal(fedavg.global_params[k], lp.global_params[k]) for k in fedavg.global_params)


def test_label_prior_never_predicts_a_label_the_client_has_not_seen():
    fed, algo, _ = run("fedavg_lp", rounds=1)
    for client in range(fed.num_clients):
        seen = set(fed.labels[fed.train_idx[client]].tolist())
        logits = algo.forward(algo.eval_params(client), fed.images[fed.test_idx[client]])
        assert set(logits.argmax(1).tolist()) <= seen
        if len(seen) == 1:  # a single-label client is right on every test sample of that label
            hits, _ = predict(fed, algo.eval_params(client), fed.test_idx[client], algo.forward)
            on_its_label = fed.labels[fed.test_idx[client]] == next(iter(seen))
            assert bool(hits[on_its_label].all())


def test_label_prior_only_helps_on_reachable_samples():
    """A reachable sample (its label in the client's set) right without the mask is right with it."""
    fed, algo, _ = run("fedavg_lp", rounds=2)
    for client in range(fed.num_clients):
        idx = fed.test_idx[client]
        plain, _ = predict(fed, algo.global_params, idx)
        masked, _ = predict(fed, algo.eval_params(client), idx, algo.forward)
        reachable = torch.isin(fed.labels[idx], fed.labels[fed.train_idx[client]])
        assert bool((masked | ~(plain & reachable)).all())
        assert not bool(masked[~reachable].any())  # unreachable samples are never right


def test_prior_kinds():
    labels = torch.tensor([0, 0, 2, 2])
    pooled = torch.tensor([4.0, 4.0, 2.0])
    mask = label_prior(labels, 3, "mask", pooled)
    assert mask.tolist() == [0.0, -math.inf, 0.0]
    freq = label_prior(labels, 3, "log_freq", pooled)
    assert freq[1] == -math.inf and freq[0] == freq[2]  # equal counts: the same argmax as the mask
    ratio = label_prior(labels, 3, "log_ratio", pooled)
    assert ratio[2] - ratio[0] == pytest.approx(math.log(2.0))  # label 2 is rarer in the pool


def test_prior_rides_along_without_touching_the_model():
    fed, algo, _ = run("fedavg_lp", rounds=1, prior="log_freq")
    params = algo.eval_params(0)
    assert params[PRIOR_KEY] is algo.eval_params(0)[PRIOR_KEY]  # same object: the eval cache can hit
    x = fed.images[fed.test_idx[0]]
    torch.testing.assert_close(algo.forward(params, x), fed.forward(algo.global_params, x) + params[PRIOR_KEY])


def test_eval_prior_mask_on_fedavg_equals_the_label_prior_control():
    _, _, control = run("fedavg_lp")
    _, _, masked = run("fedavg", eval_prior="mask")
    _, _, plain = run("fedavg")
    columns = ["test_acc", "test_acc_mean", "test_acc_std", "train_loss"]
    pd.testing.assert_frame_equal(control[columns], masked[columns])
    assert (masked["test_acc"] != plain["test_acc"]).any()


def test_eval_prior_applies_to_any_algorithm_and_changes_no_training():
    _, _, plain = run("fedper")
    _, _, masked = run("fedper", eval_prior="mask")
    pd.testing.assert_frame_equal(plain[["train_loss", "bytes_up"]], masked[["train_loss", "bytes_up"]])
    assert (masked["test_acc"] >= 0).all() and not masked["test_acc"].equals(plain["test_acc"])


def test_partition_statistics_count_prior_only_and_unreachable_test_samples():
    import numpy as np

    from fedgmh.partition import Partition, client_statistics

    labels = np.array([0, 0, 1, 2, 0, 1, 2, 2])
    part = Partition(train=[np.array([0, 1, 2]), np.array([3])], test=[np.array([4, 5, 6]), np.array([7])])
    stats = client_statistics(part, labels, 3)
    # client 0 trains on 0, 0, 1: predicting 0 gets test sample 4 right; its test label 2 is unseen
    assert stats["prior_only_correct"].tolist() == [1, 1]
    assert stats["unreachable_test"].tolist() == [1, 0]


def test_control_summary_shares_of_gain(tmp_path):
    import json

    from fedgmh.report.controls import control_summary

    def row(algorithm, acc, mask=False, seed=0):
        return {"setting": "mnist_c2_a0.5" + ("@eval_prior=mask" if mask else ""), "dataset": "mnist", "classes_per_client": 2,
                "alpha": 0.5, "algorithm": algorithm, "seed": seed, "best_test_acc": acc,
                "options": json.dumps({"eval_prior": "mask"} if mask else {})}

    results = pd.DataFrame([row("fedavg", 0.80), row("fedavg", 0.90, seed=1), row("fedavg", 0.95, mask=True),
                            row("fedgmh", 0.99), row("fedgmh", 0.99, mask=True), row("local", 0.96)])
    stats = tmp_path / "mnist_c2_a0.5.stats.csv"
    pd.DataFrame({"client": [0, 1], "num_test": [10, 30], "prior_only_correct": [6, 18], "unreachable_test": [1, 3]}).to_csv(stats, index=False)
    summary = control_summary(results, [stats]).set_index("algorithm")
    assert summary.loc["fedavg", "acc"] == pytest.approx(85.0)  # mean over seeds
    assert summary.loc["fedgmh", "gain_over_fedavg"] == pytest.approx(14.0)
    assert summary.loc["fedgmh", "prior_share_of_gain"] == pytest.approx(100 * 10 / 14)  # (95 - 85) / (99 - 85)
    assert summary.loc["local", "prior_share_of_gain"] == pytest.approx(100 * 10 / 11)
    assert math.isnan(summary.loc["fedavg", "prior_share_of_gain"]) and math.isnan(summary.loc["local", "acc_with_mask"])
    assert summary.loc["fedgmh", "prior_only"] == pytest.approx(60.0) and summary.loc["fedgmh", "unreachable"] == pytest.approx(10.0)


def test_control_summary_names_partitions_of_their_own_clients_and_chained_ones_apart(tmp_path):
    """Three partitions of one dataset, C and alpha: the config's, one of 8 clients, a chained one of 8
    clients; each is a row group of its own, labelled and matched to its statistics by its setting id."""
    import json

    from fedgmh.report.controls import control_summary

    partitions = {"fashion_mnist_c4_a1000000": 0.50, "fashion_mnist_c4_a1000000_n8": 0.60, "fashion_mnist_c4_a1000000_n8_chain": 0.70}
    results = pd.DataFrame([
        {"setting": partition + ("@eval_prior=mask" if mask else ""), "dataset": "fashion_mnist", "classes_per_client": 4,
         "alpha": 1e6, "clients": 100 if partition.endswith("a1000000") else 8, "assignment": "chain" if "chain" in partition else "random",
         "algorithm": "fedavg", "seed": 0, "best_test_acc": acc + (0.1 if mask else 0.0),
         "options": json.dumps({"eval_prior": "mask"} if mask else {})}
        for partition, acc in partitions.items() for mask in (False, True)])
    stats = []
    for i, partition in enumerate(partitions):
        stats.append(tmp_path / f"{partition}.stats.csv")
        pd.DataFrame({"client": [0], "num_test": [10], "prior_only_correct": [i + 1], "unreachable_test": [0]}).to_csv(stats[-1], index=False)
    summary = control_summary(results, stats)
    assert summary["setting"].tolist() == ["ExDir(4, 1000000)", "ExDir(4, 1000000), 8 clients", "chain(4, 1000000), 8 clients"]
    assert summary["acc"].tolist() == pytest.approx([50.0, 60.0, 70.0])
    assert summary["acc_with_mask"].tolist() == pytest.approx([60.0, 70.0, 80.0])
    assert summary["prior_only"].tolist() == pytest.approx([10.0, 20.0, 30.0])


def test_control_summary_refuses_results_without_setting_ids():
    from fedgmh.errors import UserError
    from fedgmh.report.controls import control_summary

    with pytest.raises(UserError, match="no setting column"):
        control_summary(pd.DataFrame([{"dataset": "mnist", "algorithm": "fedavg", "best_test_acc": 0.5, "options": ""}]), [])
