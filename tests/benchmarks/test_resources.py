"""Run-level parallelism and memory (see test_speed.py for how to run the suite)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import BATCH

pytestmark = pytest.mark.benchmark

HERE = Path(__file__).parent
PAPER_ALGORITHMS = ["fedavg", "fedprox", "ditto", "fedamp", "fedcp", "fedfomo", "fedgh", "fedper", "fedrep", "fedrod", "lgfedavg", "fedgmh"]

# one process: `batches` bare training batches of 100 on MNIST-shaped data with `threads` threads
JOB = """
import sys, torch
sys.path.insert(0, {here!r})
torch.set_num_threads({threads})
from conftest import SHAPES, bare_training
run = bare_training(SHAPES["mnist"], {batches})
run()
"""


def _jobs(count: int, threads: int, batches: int) -> None:
    code = JOB.format(here=str(HERE), threads=threads, batches=batches)
    procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(count)]
    assert all(p.wait() == 0 for p in procs)


@pytest.mark.parametrize("layout", ["two 1-thread jobs", "one 2-thread job"])
def test_two_cores_run_level_parallelism(benchmark, layout):
    """The same work (2 x 60 batches of MNIST-shaped training) as two 1-thread processes at once
    or one 2-thread process doing both halves in turn: samples/s of the machine in extra_info."""
    if layout == "two 1-thread jobs":
        benchmark.pedantic(_jobs, args=(2, 1, 60), rounds=2)
    else:
        benchmark.pedantic(_jobs, args=(1, 2, 120), rounds=2)
    benchmark.extra_info["samples_per_s"] = round(120 * BATCH / benchmark.stats.stats.mean, 1)


@pytest.mark.parametrize("shape", ["mnist", "cifar100"])
@pytest.mark.parametrize("algorithm", PAPER_ALGORITHMS)
def test_peak_memory(benchmark, algorithm, shape):
    """Peak RSS of a full-scale federation once every client holds its state (memory_probe.py)."""
    out = {}

    def probe():
        result = subprocess.run([sys.executable, str(HERE / "memory_probe.py"), algorithm, shape], capture_output=True, text=True, check=True)
        out.update(json.loads(result.stdout.strip().splitlines()[-1]))

    benchmark.pedantic(probe, rounds=1)
    benchmark.extra_info.update({k: round(v, 2) if isinstance(v, float) else v for k, v in out.items()})
    assert out["state_in_models_per_client"] <= 2.5  # 100 clients: a small multiple of 100 models
