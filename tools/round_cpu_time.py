"""CPU seconds of FedAvg rounds on real MNIST ExDir(2, 0.5) at the paper's protocol (1 thread), with
whichever `fedgmh` is importable: run it with PYTHONPATH=<a checkout>/src to compare two commits on the
same rounds (CPU time, so a busy machine disturbs it less than wall time). Prints one JSON line: the
seconds per round and a digest of the rounds' metrics (equal digests: the same numbers).

    python tools/round_cpu_time.py --mirror ../shared/data --work /tmp/rounds --rounds 4 --label head
"""

import argparse
import hashlib
import json
import time
from pathlib import Path

import numpy as np
import torch

from fedgmh.algorithms import get_algorithm
from fedgmh.cli import main as fedgmh_main
from fedgmh.config import TrainConfig
from fedgmh.engine import make_eval_cache, play_round, select_clients
from fedgmh.train import build_federation

try:
    from fedgmh.train import resolve_options
except ImportError:  # newer checkouts keep it with the algorithm cards
    from fedgmh.cards import resolve_options


def prepare(mirror: str, work: Path) -> tuple[Path, Path]:
    """MNIST from the offline mirror and the paper's ExDir(2, 0.5) partition of 100 clients, made once."""
    data, partition = work / "data", work / "part.npz"
    if not partition.is_file():
        fedgmh_main(["download", "mnist", "--root", str(data), "--mirror", mirror])
        fedgmh_main(["partition", "--dataset", "mnist", "--root", str(data), "--clients", "100", "--classes-per-client", "2",
                     "--alpha", "0.5", "--seed", "1", "--out", str(partition)])
    return data, partition


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirror", required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--label", default="")
    args = parser.parse_args()
    torch.set_num_threads(1)
    data, partition = prepare(args.mirror, args.work)
    options, engine = resolve_options("fedavg", {})
    config = TrainConfig(dataset="mnist", root=str(data), partition=str(partition), algorithm="fedavg", rounds=200,
                         seed=0, device="cpu")
    fed, _ = build_federation(config, engine, torch.device("cpu"))
    algorithm = get_algorithm("fedavg")(fed, options)
    cache, rng = make_eval_cache(fed, algorithm), np.random.RandomState(0)
    seconds, rows = [], []
    for rnd in range(args.rounds):
        start = time.process_time()
        row = play_round(fed, algorithm, rnd, select_clients(rng, fed.num_clients, 0.2), cache=cache)
        seconds.append(round(time.process_time() - start, 3))
        rows.append({key: value for key, value in row.items() if key != "seconds"})
    digest = hashlib.sha256(repr(rows).encode()).hexdigest()[:16]
    print(json.dumps({"label": args.label, "cpu_seconds": seconds, "total": round(sum(seconds), 3), "metrics": digest}))


if __name__ == "__main__":
    main()
