"""`fedgmh plan`'s estimates on synthetic records: nearest records, --jobs, runs sharing a GPU."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from fedgmh.plan import CPU_MINUTES_PER_ROUND_EPOCH
from fedgmh.plan_cost import estimate_lines
from fedgmh.plan_estimate import PAPER_ROUND_WORK, estimate, gpu_measurements, shared_rate, slots_end

REPO = Path(__file__).resolve().parents[1]


def run(algorithm="fedavg", dataset="mnist", rounds=200, local_epochs=2, join_ratio=0.2):
    return SimpleNamespace(algorithm=algorithm, dataset=dataset, rounds=rounds, local_epochs=local_epochs, join_ratio=join_ratio)


def record(algorithm="fedavg", dataset="mnist", wall=800.0, device="cpu", resumed=None, rounds=200):
    return {"device": device, "wall_time_s": wall, "resumed_from_round": resumed,
            "config": {"dataset": dataset, "algorithm": algorithm, "rounds": rounds, "local_epochs": 2, "join_ratio": 0.2}}


GPU = [{"dataset": "mnist", "device": "H100", "runs_at_once": 12, "rounds_per_s": 6.0},
       {"dataset": "cifar100", "device": "H200", "runs_at_once": 4, "rounds_per_s": 4.0},
       {"dataset": "cifar100", "device": "H200", "runs_at_once": 12, "rounds_per_s": 7.5}]


def test_a_run_takes_its_own_records_time_scaled_by_its_work():
    records = [record(wall=800.0), record(wall=1000.0), record(wall=1.0, resumed=50), record(wall=5.0, device="cuda:0 (H200)")]
    found = estimate([run(), run(rounds=100)], records, gpu_rows=GPU)
    assert found.cpu_seconds == pytest.approx(900.0 + 450.0) and found.cpu_records == 2 and found.cpu_nearest == {}


def test_jobs_two_halves_the_time_of_equal_runs():
    runs, records = [run() for _ in range(4)], [record(wall=600.0)]
    one, two = estimate(runs, records, jobs=1, gpu_rows=GPU), estimate(runs, records, jobs=2, gpu_rows=GPU)
    assert one.cpu_seconds == pytest.approx(2400.0) and two.cpu_seconds == pytest.approx(one.cpu_seconds / 2)
    assert slots_end([3.0, 1.0, 1.0, 1.0], 2) == 3.0  # the longest first: the short ones fill the other slot


def test_a_method_without_records_takes_the_nearest_and_says_so():
    records = [record("fedavg", "mnist", 400.0), record("fedgmh", "mnist", 800.0), record("fedgmh", "cifar100", 3000.0)]
    found = estimate([run("cepfl"), run("fedgmh", "cifar10"), run("cepfl", "cifar10"), run("local", "fashion_mnist")],
                     records, gpu_rows=GPU)
    assert found.cpu_nearest == {"the other methods on mnist": ["cepfl on mnist"],
                                 "their method on cifar100": ["fedgmh on cifar10"],
                                 "every method on cifar100": ["cepfl on cifar10"],
                                 "every method on mnist": ["local on fashion_mnist"]}
    assert found.cpu_seconds == pytest.approx(600.0 + 3000.0 + 3000.0 + 600.0)
    line = estimate_lines(found)[0]
    assert "without records of their own, 1 run(s) (cepfl on mnist) at the rate of the other methods on mnist" in line


def test_a_dataset_without_any_record_uses_the_plan_s_rate():
    found = estimate([run("fedavg", "cifar10", rounds=10, local_epochs=1)], [], gpu_rows=GPU)
    assert found.cpu_seconds == pytest.approx(60 * CPU_MINUTES_PER_ROUND_EPOCH[3] / 0.2 * 10 * 1 * 0.2)
    assert list(found.cpu_nearest) == ["the 3-channel rate of fedgmh.plan (CPU_MINUTES_PER_ROUND_EPOCH)"]


def test_runs_sharing_a_gpu_go_at_the_measured_rate():
    twelve = [run("fedavg", "cifar100", rounds=300) for _ in range(12)]
    found = estimate(twelve, [], gpu_rows=GPU)
    assert found.gpu_seconds == pytest.approx(12 * 300 / 7.5)  # the paper's protocol: a round is a measured round
    assert found.gpu_used["cifar100"]["runs_at_once"] == 12
    # two runs: 4 at once gave 4.0 rounds/s, so two get 2.0; 12 at once gave 7.5, so two 1.25: the better counts
    assert shared_rate(GPU, "cifar100", 2)["rate"] == pytest.approx(2.0)
    found = estimate([run("fedavg", "cifar10", rounds=100, local_epochs=1)] * 2, [], gpu_rows=GPU)
    assert found.gpu_seconds == pytest.approx(2 * 100 * 1 * 0.2 / PAPER_ROUND_WORK / 2.0)  # half the work of a paper round
    assert "cifar10 at cifar100's rate" in estimate_lines(found)[1]
    assert estimate([run("fedavg", "cifar10")], [], gpu_rows=GPU[:1]).gpu_missing == ["cifar10"]


def test_the_committed_gpu_measurements_are_read():
    rows = gpu_measurements(REPO / "benchmarks" / "gpu_throughput.csv")
    assert rows and {"mnist", "cifar100"} <= {row["dataset"] for row in rows}
    assert all(row["runs_at_once"] >= 1 and row["rounds_per_s"] > 0 for row in rows)


def test_plan_with_nothing_to_train_says_what_training_everything_again_would_take(capsys, monkeypatch):
    from fedgmh.cli import main

    monkeypatch.chdir(REPO)
    assert main(["plan", "--configfile", "config/mini.yaml", "--jobs", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    if out[0].endswith(", 0 to train"):
        assert out[1].startswith("nothing to train; training all ") and out[1].endswith(" again (without the records) would take:")
    assert out[-2].startswith("on a CPU: about ") and "2 at a time (--jobs 2)" in out[-2]
    assert out[-1].startswith("on one GPU: about ") and "benchmarks/gpu_throughput.csv" in out[-1]
    assert main(["plan", "--configfile", "config/mini.yaml", "--jobs", "0"]) == 2
