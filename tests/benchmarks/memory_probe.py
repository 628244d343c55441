"""Peak memory of a full-scale federation (100 clients, full-size MNIST/CIFAR-100-shaped data) once
every client holds its state: one round with all clients selected, each training one batch (the
state's size does not depend on how long a client trains). Prints one JSON line.

    python tests/benchmarks/memory_probe.py ALGORITHM SHAPE
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from bench_support import SHAPES, bench_device, synthetic_federation  # noqa: E402
from fedgmh.algorithms import get_algorithm  # noqa: E402
from fedgmh.engine import run_rounds  # noqa: E402
from fedgmh.memory import peak_rss_bytes, tensor_bytes  # noqa: E402
from fedgmh.train import resolve_options  # noqa: E402


def main(algorithm: str, shape: str) -> dict:
    fed = synthetic_federation(SHAPES[shape], local_epochs=1)
    fed.train_idx = [idx[: fed.batch_size] for idx in fed.train_idx]
    baseline = peak_rss_bytes()
    options, _ = resolve_options(algorithm, {})
    algo = get_algorithm(algorithm)(fed, options)
    run_rounds(fed, algo, rounds=1, join_ratio=1.0)
    model = tensor_bytes(fed.initial_params())
    state = tensor_bytes(algo.state())
    record = {
        "algorithm": algorithm,
        "shape": shape,
        "device": str(bench_device()),
        "model_mb": model / 2**20,
        "state_mb": state / 2**20,
        "state_in_models_per_client": state / (fed.num_clients * model),
        "data_mb": tensor_bytes([fed.images, fed.labels]) / 2**20,
        "peak_rss_mb": peak_rss_bytes() / 2**20,
        "peak_rss_before_algorithm_mb": baseline / 2**20,
    }
    if fed.device.type == "cuda":
        import torch

        record["peak_cuda_mb"] = torch.cuda.max_memory_allocated(fed.device) / 2**20
    return record


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2])))
