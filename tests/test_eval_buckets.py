"""Batched evaluation by buckets of test-split length (`Federation.test_buckets`): little padding, the
same numbers as one bucket of all clients, and the sample passes it executes counted."""

import pandas as pd
import pytest
from conftest import make_federation

from fedgmh.algorithms import get_algorithm
from fedgmh.engine import batched_evaluation, evaluate_clients, federation, run_rounds
from fedgmh.engine.eval_buckets import bucket_by_length
from fedgmh.train import resolve_options

# test splits of 8, 3, 7, 1, 5, 6, 8, 2 samples (each client's first 8 labels)
CLIENTS = [[0, 1, 0, 1, 2, 2, 1, 0, 1], [1, 2, 2], [0, 2, 2, 1, 0, 0, 1], [2], [0, 0, 2, 1, 1],
           [2, 1, 0, 0, 1, 2], [1, 1, 0, 2, 0, 2, 1, 0, 2, 2], [0, 2]]


def fed_of(**engine):
    return make_federation(CLIENTS, num_classes=3, batch_size=3, local_epochs=2, lr=0.1, test_per_client=8,
                           eval_batched=True, **engine)


@pytest.mark.parametrize("lengths", [[8, 3, 7, 1, 5, 6, 8, 2], [279, 154, 154, 16, 0, 0, 200, 190, 33], [5] * 7, []])
@pytest.mark.parametrize("fill", [0.0, 0.5, 0.95, 1.0])
def test_buckets_hold_each_client_once_and_at_least_their_share_of_real_samples(lengths, fill):
    buckets = bucket_by_length(lengths, fill)
    assert sorted(c for bucket in buckets for c in bucket) == list(range(len(lengths)))
    for bucket in buckets:
        width = max(lengths[c] for c in bucket)
        assert sum(lengths[c] for c in bucket) >= fill * width * len(bucket)
    if fill == 0.0 and lengths:
        assert len(buckets) == 1  # today's one padded block of all clients
    assert bucket_by_length(lengths, fill) == buckets  # from the lengths alone


@pytest.mark.parametrize("name", ["fedavg", "fedgmh", "ditto", "fedrod"])
def test_a_run_evaluated_by_buckets_has_the_metrics_of_one_bucket_of_all_clients(name, monkeypatch):
    """float32, as runs train; one bucket of all clients (fill 0) is the evaluation padded to the longest
    split. The two evaluate in passes of other shapes, whose per-sample losses may differ in their last
    bits on some CPUs (an AMD EPYC's kernels do, for every algorithm): the accuracies are the same, the
    losses the same to float tolerance. That a client's sums do not depend on its pass mates, bit for
    bit, is tests/test_batched_evaluation.py's."""
    runs = []
    for fill in (0.0, federation.EVAL_BUCKET_FILL):
        monkeypatch.setattr(federation, "EVAL_BUCKET_FILL", fill)
        options, _ = resolve_options(name, {})
        fed = fed_of()
        assert (len(fed.test_buckets) == 1) is (fill == 0.0)
        runs.append(pd.DataFrame(run_rounds(fed, get_algorithm(name)(fed, options), rounds=3, join_ratio=0.6)).drop(columns="seconds"))
    losses = ["test_loss"]
    pd.testing.assert_frame_equal(runs[1].drop(columns=losses), runs[0].drop(columns=losses), check_exact=True)
    pd.testing.assert_frame_equal(runs[1][losses], runs[0][losses], check_exact=False, rtol=1e-6)


def test_evaluation_counts_its_sample_passes_and_buckets_keep_them_useful(monkeypatch):
    name = "fedgmh"
    options, _ = resolve_options(name, {})
    fed = fed_of()
    algorithm = get_algorithm(name)(fed, options)
    lengths = [len(idx) for idx in fed.test_idx]
    evaluate_clients(fed, algorithm.eval_params, algorithm.forward, many=batched_evaluation.evaluate_many)
    useful, executed = fed.evaluation_passes.state()
    assert useful == sum(lengths)
    assert useful / executed >= federation.EVAL_BUCKET_FILL  # every client evaluated: no filled-up model
    client_by_client = fed_of()
    evaluate_clients(client_by_client, get_algorithm(name)(client_by_client, options).eval_params)
    assert client_by_client.evaluation_passes.state() == (sum(lengths), sum(lengths))
    monkeypatch.setattr(federation, "EVAL_BUCKET_FILL", 0.0)
    padded = fed_of()
    evaluate_clients(padded, get_algorithm(name)(padded, options).eval_params, many=batched_evaluation.evaluate_many)
    assert padded.evaluation_passes.state() == (sum(lengths), max(lengths) * len(lengths))


def test_a_trained_run_records_its_evaluation_passes(tmp_path):
    from conftest import prepare_digits, train_args

    from fedgmh.cli import main
    from fedgmh.record import load_record

    setup = prepare_digits(tmp_path / "data")
    assert main(train_args(setup, tmp_path / "run", "--set", "eval_batched=on", rounds=2)) == 0
    record = load_record(tmp_path / "run")[0]
    passes = record["evaluation_sample_passes"]
    assert 0 < passes["useful"] <= passes["executed"] and passes["useful_share"] == passes["useful"] / passes["executed"]
