"""Shared pieces of the speed benchmarks: synthetic full-scale federations (no dataset files
needed), reference loops, FLOP counts, and the fixtures the benchmark modules import.

(Not named conftest.py: tests/conftest.py is imported under that module name by the other tests.)

FEDGMH_BENCH_TF32=1 allows TensorFloat-32 on CUDA (off by default, as in `fedgmh train`).

The data are random images with the shapes of MNIST and CIFAR-100 and the paper's layout: 100
clients, each holding `total / 100` samples of C classes, 75 % train / 25 % test. Benchmarks run on
FEDGMH_BENCH_DEVICE (default cpu; `cuda` on a GPU machine) with FEDGMH_BENCH_THREADS torch threads
(default 1, the workflow's default per job).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import pytest
import torch

from fedgmh.config import EngineOptions
from fedgmh.engine import Federation
from fedgmh.model import FedAvgCNN


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


@pytest.fixture(scope="session", autouse=True)
def threads_and_precision():
    torch.set_num_threads(int(os.environ.get("FEDGMH_BENCH_THREADS", "1")))
    # as `fedgmh train` by default (engine option tf32=false); FEDGMH_BENCH_TF32=1 measures TF32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = os.environ.get("FEDGMH_BENCH_TF32") == "1"


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
