"""Run-level parallelism and memory (see test_speed.py for how to run the suite)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench_support import PAPER_ALGORITHMS, threads_and_precision  # noqa: F401 - the fixture

pytestmark = pytest.mark.benchmark

HERE = Path(__file__).parent

# one process: `batches` bare training batches of 100 on MNIST-shaped data with `threads` threads;
# prints its own samples/s, timed after start-up (interpreter, imports, data) so that only the
# training counts
JOB = """
import sys, time, torch
sys.path.insert(0, {here!r})
torch.set_num_threads({threads})
from bench_support import SHAPES, bare_training
run = bare_training(SHAPES["mnist"], {batches})
start = time.perf_counter()
run()
print({batches} * 100 / (time.perf_counter() - start))
"""


def _jobs(count: int, threads: int, batches: int) -> float:
    """Samples/s of the machine: the sum over `count` simultaneous jobs of each job's own rate."""
    code = JOB.format(here=str(HERE), threads=threads, batches=batches)
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) for _ in range(count)]
    outputs = [p.communicate()[0] for p in procs]
    assert all(p.returncode == 0 for p in procs)
    return sum(float(out.strip().splitlines()[-1]) for out in outputs)


@pytest.mark.parametrize("layout", ["two 1-thread jobs", "one 2-thread job"])
def test_two_cores_run_level_parallelism(benchmark, layout):
    """Two 1-thread training processes at once vs one 2-thread process (MNIST-shaped, 200 batches
    of 100 per process): the machine's training samples/s in extra_info."""
    rates = []
    args = (2, 1, 200) if layout == "two 1-thread jobs" else (1, 2, 200)
    benchmark.pedantic(lambda: rates.append(_jobs(*args)), rounds=2)
    benchmark.extra_info["samples_per_s"] = round(sum(rates) / len(rates), 1)


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
