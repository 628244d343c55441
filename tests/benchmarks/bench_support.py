"""Shared pieces of the speed benchmarks: synthetic full-scale federations (no dataset files
needed), reference loops, FLOP counts, and the fixtures the benchmark modules import.

(Not named conftest.py: tests/conftest.py is imported under that module name by the other tests.)

FEDGMH_BENCH_TF32=1 allows TensorFloat-32 on CUDA (off by default, as in `fedgmh train`);
FEDGMH_BENCH_DETERMINISTIC=0 uses cuDNN's benchmark mode instead of the deterministic algorithms
`fedgmh train` uses (before 2026-11-25 the in-process benchmarks ran with neither: cuDNN's
heuristics). In the runs-per-hour benchmark (`RunWorkers`) also: FEDGMH_BENCH_MEMORY_FORMAT=channels_last
FEDGMH_BENCH_CONV=unfold and FEDGMH_BENCH_EVAL_BATCHED=1 (the engine options). Each changes results in the last digits, so each
is a measurement of a lever, not a default.
`Rounds` plays full-scale rounds of one algorithm; `RunWorkers` plays them in several processes at
once (the runs-per-GPU-hour benchmark, with the workload of Table 2 and of the paper config below).

The data are random images with the shapes of MNIST and CIFAR-100 and the paper's layout: 100
clients, each holding `total / 100` samples of C classes, 75 % train / 25 % test. Benchmarks run on
FEDGMH_BENCH_DEVICE (default cpu; `cuda` on a GPU machine) with FEDGMH_BENCH_THREADS torch threads
(default 1, the workflow's default per job).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import time
import traceback
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from fedgmh import engine as fedgmh_engine
from fedgmh.algorithms import get_algorithm
from fedgmh.config import EngineOptions, TrainConfig
from fedgmh.engine import Federation, make_eval_cache, play_round, select_clients
from fedgmh.model import FedAvgCNN
from fedgmh.train import build_federation, resolve_options


@dataclass(frozen=True)
class Shape:
    channels: int
    side: int
    num_classes: int
    total: int  # samples over all clients (train + test splits of the pooled data set)
    classes_per_client: int


SHAPES = {"mnist": Shape(1, 28, 10, 70_000, 2), "cifar100": Shape(3, 32, 100, 60_000, 5)}
BATCH = 100


def bench_device() -> torch.device:
    return torch.device(os.environ.get("FEDGMH_BENCH_DEVICE", "cpu"))


def set_threads_and_numerics() -> None:
    """Threads and numerics as `fedgmh train` sets them (1 thread, TF32 off, deterministic cuDNN),
    unless FEDGMH_BENCH_THREADS / _TF32=1 / _DETERMINISTIC=0 measure otherwise. cuDNN's benchmark
    mode, which _DETERMINISTIC=0 selects, is never used by `fedgmh train`: runs would no longer
    repeat bit for bit."""
    torch.set_num_threads(int(os.environ.get("FEDGMH_BENCH_THREADS", "1")))
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = os.environ.get("FEDGMH_BENCH_TF32") == "1"
    deterministic = os.environ.get("FEDGMH_BENCH_DETERMINISTIC", "1") != "0"
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = deterministic, not deterministic


@pytest.fixture(scope="session", autouse=True)
def threads_and_precision():
    set_threads_and_numerics()


def synchronize() -> None:
    if bench_device().type == "cuda":
        torch.cuda.synchronize()


def synthetic_federation(shape: Shape, *, clients: int = 100, local_epochs: int = 2, seed: int = 0, **engine) -> Federation:
    device = bench_device()
    gen = torch.Generator().manual_seed(seed)
    per_client = shape.total // clients
    images = torch.randn(clients * per_client, shape.channels, shape.side, shape.side, generator=gen)
    labels, train_idx, test_idx = [], [], []
    for client in range(clients):
        classes = torch.randperm(shape.num_classes, generator=gen)[: shape.classes_per_client]
        labels.append(classes[torch.randint(len(classes), (per_client,), generator=gen)])
        start, cut = client * per_client, client * per_client + int(0.75 * per_client)
        train_idx.append(torch.arange(start, cut, device=device))
        test_idx.append(torch.arange(cut, start + per_client, device=device))
    torch.manual_seed(seed)
    return Federation(
        model=FedAvgCNN(shape.channels, shape.num_classes, shape.side).to(device),
        images=images.to(device),
        labels=torch.cat(labels).to(device),
        train_idx=train_idx,
        test_idx=test_idx,
        num_classes=shape.num_classes,
        batch_size=BATCH,
        local_epochs=local_epochs,
        lr=0.01,
        options=EngineOptions(**engine),
        seed=seed,
    )


def train_flops_per_sample(shape: Shape) -> float:
    """Forward + backward FLOPs of one training sample (torch's FLOP counter on one batch)."""
    from torch.utils.flop_counter import FlopCounterMode

    model = FedAvgCNN(shape.channels, shape.num_classes, shape.side)
    x = torch.randn(BATCH, shape.channels, shape.side, shape.side)
    y = torch.randint(shape.num_classes, (BATCH,))
    with FlopCounterMode(display=False) as counter:
        torch.nn.functional.cross_entropy(model(x), y).backward()
    return counter.get_total_flops() / BATCH


def inference_flops_per_sample(shape: Shape) -> float:
    from torch.utils.flop_counter import FlopCounterMode

    model = FedAvgCNN(shape.channels, shape.num_classes, shape.side)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(torch.randn(BATCH, shape.channels, shape.side, shape.side))
    return counter.get_total_flops() / BATCH


def bare_training(shape: Shape, batches: int, memory_format=torch.contiguous_format):
    """A plain single-model loop (nn.Module + torch.optim.SGD) over `batches` batches of 100
    (data laid out in `memory_format` beforehand, as the engine does)."""
    device = bench_device()
    model = FedAvgCNN(shape.channels, shape.num_classes, shape.side).to(device).to(memory_format=memory_format)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = [torch.randn(BATCH, shape.channels, shape.side, shape.side, device=device).contiguous(memory_format=memory_format) for _ in range(batches)]
    y = torch.randint(shape.num_classes, (batches, BATCH), device=device)

    def run():
        for i in range(batches):
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(model(x[i]), y[i]).backward()
            opt.step()
        synchronize()

    return run


def bare_inference(shape: Shape, samples: int, batch: int = 1000, memory_format=torch.contiguous_format):
    """Plain batched inference (argmax) over `samples` samples."""
    device = bench_device()
    model = FedAvgCNN(shape.channels, shape.num_classes, shape.side).to(device).to(memory_format=memory_format)
    x = torch.randn(samples, shape.channels, shape.side, shape.side, device=device).contiguous(memory_format=memory_format)

    @torch.no_grad()
    def run():
        for start in range(0, samples, batch):
            model(x[start : start + batch]).argmax(dim=1)
        synchronize()

    return run


def _best_time(run, repeats: int = 3) -> float:
    run()  # warm-up
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


@pytest.fixture(scope="session")
def bare_rates():
    """Samples/s of the bare training loop and of bare inference (batch 1000), per shape: the best
    of 3 repetitions, measured once per session."""
    cache: dict[str, tuple[float, float]] = {}

    def rates(name: str) -> tuple[float, float]:
        if name not in cache:
            shape = SHAPES[name]
            cache[name] = (20 * BATCH / _best_time(bare_training(shape, 20)), 10_000 / _best_time(bare_inference(shape, 10_000)))
        return cache[name]

    return rates


# ------------------------------------------------------------------------------ full-scale rounds


class Rounds:
    """Plays successive full-scale rounds (100 clients, 20 % selected, E = 2, all evaluated)
    of one algorithm, counting the samples that go through training and inference."""

    def __init__(self, algorithm: str, shape: str, seed: int = 0, **engine) -> None:
        self.fed = synthetic_federation(SHAPES[shape], seed=seed, **engine)
        options, _ = resolve_options(algorithm, {})
        self.algorithm = get_algorithm(algorithm)(self.fed, options)
        self.cache = make_eval_cache(self.fed, self.algorithm)
        self.rng, self.rnd, self.counts = np.random.RandomState(seed), 0, []
        # training samples from what local training reports (the vectorised path bypasses
        # fed.forward); inference samples from the gradient-free forward passes
        forward, features, finish = self.fed.forward, self.fed.features, self.algorithm.finish_training
        self.fed.forward = lambda p, x: self._count_inference(len(x)) or forward(p, x)
        self.fed.features = lambda p, x: self._count_inference(len(x)) or features(p, x)
        # every trained client's result passes through finish_training, on either training path
        self.algorithm.finish_training = lambda *args: self._count_training(finish(*args))

    def _count_inference(self, n: int) -> None:
        if not torch.is_grad_enabled():
            self.counts[-1]["infer"] += n

    def _count_training(self, result):
        self.counts[-1]["train"] += result.num_samples
        return result

    def __call__(self) -> None:
        self.counts.append({"train": 0, "infer": 0})
        selected = [int(c) for c in self.rng.choice(self.fed.num_clients, self.fed.num_clients // 5, replace=False)]
        play_round(self.fed, self.algorithm, self.rnd, selected, cache=self.cache)
        self.rnd += 1
        synchronize()


# ------------------------------------------------------------------- runs per GPU-hour (Table 2)

#: Table 2's twelve methods, in the paper's row order
PAPER_ALGORITHMS = ["fedavg", "fedprox", "ditto", "fedamp", "fedcp", "fedfomo", "fedgh", "fedper", "fedrep", "fedrod", "lgfedavg", "fedgmh"]
#: rounds of a run at the paper's protocol, per dataset shape
PROTOCOL_ROUNDS = {"mnist": 200, "cifar100": 300}
#: Table 2's offline columns (no CIFAR-10): 12 methods x 2 settings x 5 seeds per dataset
TABLE2_RUNS = {"mnist": 120, "cifar100": 120}
#: the paper config (config/config.yaml) without CIFAR-10: (shape, join ratio, runs), counted from
#: the plan of tests/test_workflow.py (1065 runs, runs shared by experiments trained once), all E = 2:
#: MNIST 120 (Table 2) + 15 (Table 5's ablations) + 35 (audit); CIFAR-100 at rho 0.2: 120 (Table 2)
#: + 15 (Table 5) + 45 (Table 6) + 20 (Table 7) + 35 (audit) + 10 (audit_beta); Table 4: 60 runs at
#: each of rho 0.4, 0.6, 0.8, 1.0. 655 runs; Table 3 and the other CIFAR-10 runs (410) are left out.
PAPER_WORKLOAD = [("mnist", 0.2, 170), ("cifar100", 0.2, 245), ("cifar100", 0.4, 60), ("cifar100", 0.6, 60),
                  ("cifar100", 0.8, 60), ("cifar100", 1.0, 60)]


def bench_jobs() -> list[int]:
    """FEDGMH_BENCH_JOBS: how many runs to train at once on the device, e.g. "1,4,8" (default 1)."""
    return [int(j) for j in os.environ.get("FEDGMH_BENCH_JOBS", "1").split(",") if j.strip()]


def bench_algorithms() -> list[str]:
    """FEDGMH_BENCH_ALGORITHMS: the methods of the runs-per-hour benchmark, comma-separated, or
    "table2" for all twelve (default "fedavg,fedgmh")."""
    chosen = os.environ.get("FEDGMH_BENCH_ALGORITHMS", "fedavg,fedgmh").strip()
    return list(PAPER_ALGORITHMS) if chosen == "table2" else [a.strip() for a in chosen.split(",") if a.strip()]


def bench_rounds_per_call() -> int:
    """FEDGMH_BENCH_ROUNDS: rounds each run plays per timed call (default 10 on CUDA, 1 on CPU)."""
    return int(os.environ.get("FEDGMH_BENCH_ROUNDS") or (10 if bench_device().type == "cuda" else 1))


def keep_partial(name: str, params: dict, mean_s: float, extra_info: dict) -> None:
    """Append one measurement, as an entry of pytest-benchmark's JSON, to FEDGMH_BENCH_PARTIAL (if
    set) at once, so that what was measured survives a session that is cut short."""
    path = os.environ.get("FEDGMH_BENCH_PARTIAL")
    if path:
        with open(path, "a") as out:
            out.write(json.dumps({"name": name, "params": params, "stats": {"mean": mean_s}, "extra_info": extra_info}) + "\n")


def run_worker(conn, algorithm: str, shape: str, seed: int) -> None:
    """One run in its own process, set up as `fedgmh train` sets up a run (threads, TF32 off,
    deterministic cuDNN); plays the number of rounds it is sent and answers (seconds, seconds of
    evaluation) until it is sent None."""
    try:
        set_threads_and_numerics()
        rounds = Rounds(algorithm, shape, seed=seed, memory_format=os.environ.get("FEDGMH_BENCH_MEMORY_FORMAT", "contiguous"),
                        conv=os.environ.get("FEDGMH_BENCH_CONV", "direct"),
                        eval_batched=os.environ.get("FEDGMH_BENCH_EVAL_BATCHED") == "1")
        spent = {"eval": 0.0}
        evaluate = fedgmh_engine.evaluate_clients

        def timed_evaluation(*args, **kwargs):  # play_round calls the engine's module-level function
            synchronize()
            start = time.perf_counter()
            metrics = evaluate(*args, **kwargs)
            synchronize()
            spent["eval"] += time.perf_counter() - start
            return metrics

        fedgmh_engine.evaluate_clients = timed_evaluation
        conn.send("ready")
        while (count := conn.recv()) is not None:
            spent["eval"], start = 0.0, time.perf_counter()
            for _ in range(count):
                rounds()
            conn.send((time.perf_counter() - start, spent["eval"]))
    except Exception:  # noqa: BLE001 - the parent reports it
        conn.send(("error", traceback.format_exc()))


class RunWorkers:
    """`jobs` runs of one algorithm and shape (seeds 0..jobs-1), each in its own process on the
    benchmark device, as `jobs_per_gpu` runs share a GPU. Calling it plays `rounds_per_call`
    rounds in every run at once and returns when all are done; process start-up, data and model set-up
    are not part of a call. Use as a context manager (the processes end on exit)."""

    def __init__(self, algorithm: str, shape: str, jobs: int, rounds_per_call: int, timeout_s: float = 1800) -> None:
        self.rounds_per_call, self.timeout_s, self.answers = rounds_per_call, timeout_s, []
        context = multiprocessing.get_context("spawn")  # no fork of a process that may hold CUDA
        self.conns, self.procs = [], []
        for seed in range(jobs):
            parent, child = context.Pipe()
            proc = context.Process(target=run_worker, args=(child, algorithm, shape, seed), daemon=True)
            proc.start()
            self.conns.append(parent)
            self.procs.append(proc)
        for conn in self.conns:
            self._receive(conn)

    def _receive(self, conn):
        if not conn.poll(self.timeout_s):
            raise RuntimeError(f"a benchmark run gave no answer within {self.timeout_s:g} s")
        answer = conn.recv()
        if isinstance(answer, tuple) and answer[0] == "error":
            raise RuntimeError(f"a benchmark run failed:\n{answer[1]}")
        return answer

    def __call__(self) -> None:
        for conn in self.conns:
            conn.send(self.rounds_per_call)
        self.answers = [self._receive(conn) for conn in self.conns]

    def __enter__(self) -> "RunWorkers":
        return self

    def __exit__(self, *exc) -> None:
        for conn in self.conns:
            try:
                conn.send(None)
            except OSError:
                pass
        for proc in self.procs:
            proc.join(30)
            if proc.is_alive():
                proc.kill()
                proc.join(10)

    def summary(self, call_s: float, shape: str) -> dict:
        """What one timed call of `call_s` seconds says about runs per hour (in extra_info)."""
        jobs, per_call = len(self.procs), self.rounds_per_call
        rounds_per_s = jobs * per_call / call_s  # all runs together
        return {
            "device": str(bench_device()),
            "jobs": jobs,
            "rounds_per_call": per_call,
            "s_per_round_per_run": round(call_s / per_call, 4),
            "rounds_per_s": round(rounds_per_s, 4),
            "eval_share": round(float(np.mean([e / t for t, e in self.answers])), 3),
            "run_minutes": round(PROTOCOL_ROUNDS[shape] * call_s / per_call / 60, 2),
            "runs_per_hour": round(3600 * rounds_per_s / PROTOCOL_ROUNDS[shape], 2),
            "table2_runs_hours": round(TABLE2_RUNS[shape] * PROTOCOL_ROUNDS[shape] / rounds_per_s / 3600, 3),
        }


def table2_hours_per_method(rates: dict[str, dict[str, float]]) -> float | None:
    """Hours for Table 2's offline runs from each method's own measured rounds/s ({method: {shape:
    rate}}, all concurrent runs of that method together): each of the twelve methods has
    TABLE2_RUNS / 12 runs per shape. None unless all twelve were measured on both shapes."""
    if any(set(rates.get(m, {})) < set(TABLE2_RUNS) for m in PAPER_ALGORITHMS):
        return None
    per_method = {s: TABLE2_RUNS[s] // len(PAPER_ALGORITHMS) for s in TABLE2_RUNS}
    return sum(per_method[s] * PROTOCOL_ROUNDS[s] / rates[m][s] for m in PAPER_ALGORITHMS for s in TABLE2_RUNS) / 3600


def extrapolate(rates: dict[str, float], eval_share: dict[str, float]) -> dict[str, float]:
    """Hours for Table 2's offline runs and for the paper config without CIFAR-10, from measured
    rounds/s (all concurrent runs together) and evaluation shares per shape, if every method cost
    like the measured ones. A round at join ratio rho trains rho / 0.2 times the clients of the
    measured round; its evaluation (every client) stays the same."""
    table2 = sum(TABLE2_RUNS[s] * PROTOCOL_ROUNDS[s] / rates[s] for s in TABLE2_RUNS) / 3600
    paper = sum(
        runs * PROTOCOL_ROUNDS[s] / rates[s] * (eval_share[s] + (1 - eval_share[s]) * rho / 0.2)
        for s, rho, runs in PAPER_WORKLOAD
    ) / 3600
    return {"table2_offline_hours": table2, "paper_without_cifar10_hours": paper}


# ------------------------------------------------------------- real data at the paper's protocol


@pytest.fixture(scope="session")
def mnist_exdir(shared_data, tmp_path_factory):
    """Real MNIST (from the offline mirror) and its paper partition, ExDir(2, 0.5) over 100 clients
    (partition seed 1, 75 % train): (data root, partition file), prepared once per session."""
    from fedgmh.cli import main

    root = tmp_path_factory.mktemp("mnist_exdir")
    assert main(["download", "mnist", "--root", str(root / "data"), "--mirror", str(shared_data)]) == 0
    assert main(["partition", "--dataset", "mnist", "--root", str(root / "data"), "--clients", "100",
                 "--classes-per-client", "2", "--alpha", "0.5", "--seed", "1", "--out", str(root / "part.npz")]) == 0
    return root / "data", root / "part.npz"


class ProtocolRounds:
    """Successive rounds of one algorithm on a real partition at the paper's protocol (20 % of the
    clients per round, E = 2, batch 100, lr 0.01, every client evaluated), the clients drawn as
    `run_rounds` draws them: two instances with the same seed play the same rounds."""

    def __init__(self, algorithm: str, dataset: str, root, partition, seed: int = 0, **engine) -> None:
        options, engine_options = resolve_options(algorithm, {k: str(v) for k, v in engine.items()})
        config = TrainConfig(dataset=dataset, root=str(root), partition=str(partition), algorithm=algorithm, rounds=200,
                             seed=seed, device=str(bench_device()))
        self.fed, _ = build_federation(config, engine_options, bench_device())
        self.algorithm = get_algorithm(algorithm)(self.fed, options)
        self.cache = make_eval_cache(self.fed, self.algorithm)
        self.rng, self.rnd = np.random.RandomState(seed), 0

    def __call__(self) -> None:
        selected = select_clients(self.rng, self.fed.num_clients, 0.2)
        play_round(self.fed, self.algorithm, self.rnd, selected, cache=self.cache)
        self.rnd += 1
        synchronize()
