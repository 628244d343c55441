"""Runs per GPU-hour for a slice of Table 2 (see test_speed.py for how to run the suite):

    FEDGMH_BENCH_DEVICE=cuda FEDGMH_BENCH_JOBS=1,4,8 python -m pytest tests/benchmarks/test_throughput.py \
        -o addopts="" -m benchmark --benchmark-json throughput.json
    python tests/benchmarks/summarise.py throughput.json     # + the extrapolated Table 2 and paper times

Full-protocol-shaped rounds (100 clients, 20 % participation, E = 2, batch 100, every client
evaluated; synthetic data of MNIST's and CIFAR-100's shapes) of FedAvg and FedGMH (or of the methods
in FEDGMH_BENCH_ALGORITHMS: "table2" for all twelve, which summarise.py then costs each at its own
rate), with `jobs` runs
training at once on the device, each in its own process as `jobs_per_gpu` runs share a GPU in the
workflow. extra_info: rounds/s of all runs together, seconds per round of one run, the share of a
round spent evaluating, minutes per run at the paper's 200 / 300 rounds, runs per hour, and the
hours the 120 Table 2 runs of that dataset would take if every method cost like this one.

pytest-benchmark writes its JSON only when the whole session ends, so a session cut short (a device
call's time limit) keeps nothing: with FEDGMH_BENCH_PARTIAL=FILE each measurement is also appended
to FILE as one JSON line the moment it is taken, and `summarise.py FILE` reads those lines.
"""

from __future__ import annotations

import os

import pytest

from bench_support import RunWorkers, bench_algorithms, bench_jobs, bench_rounds_per_call, keep_partial, threads_and_precision  # noqa: F401 - fixture

pytestmark = pytest.mark.benchmark


@pytest.mark.parametrize("jobs", bench_jobs())
@pytest.mark.parametrize("shape", ["mnist", "cifar100"])
@pytest.mark.parametrize("algorithm", bench_algorithms())
def test_table2_runs_per_hour(benchmark, algorithm, shape, jobs):
    with RunWorkers(algorithm, shape, jobs, bench_rounds_per_call()) as workers:
        benchmark.pedantic(workers, rounds=1, warmup_rounds=1)  # the warm-up call fills the evaluation cache
        benchmark.extra_info.update(workers.summary(benchmark.stats.stats.mean, shape))
        if os.environ.get("FEDGMH_BENCH_LABEL"):  # a setting's name: summarise.py tabulates each apart
            benchmark.extra_info["label"] = os.environ["FEDGMH_BENCH_LABEL"]
    keep_partial(f"test_table2_runs_per_hour[{algorithm}-{shape}-{jobs}]", {"algorithm": algorithm, "shape": shape, "jobs": jobs},
                 benchmark.stats.stats.mean, benchmark.extra_info)
