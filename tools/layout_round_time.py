"""CPU seconds of paper-protocol rounds in the default image layout against channels_last, interleaved
(engine option memory_format: an execution option, not part of the run key). Two federations of the
same run (real data from the offline mirror, the paper's ExDir partition of 100 clients, 20 %
participation, E = 2, every client evaluated), one per layout, play the same rounds in turns, 1 torch
thread; CPU time, so a busy machine disturbs it less than wall time. Prints one JSON line per round
pair, then a summary: the median ratio channels_last / contiguous, a digest of each layout's metrics
(equal digests from two calls: deterministic) and the largest difference of their test accuracies.

    python tools/layout_round_time.py --mirror ../shared/data --work /tmp/layout --dataset cifar100 --rounds 4
"""

import argparse
import hashlib
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from fedgmh.algorithms import get_algorithm
from fedgmh.cards import resolve_options
from fedgmh.cli import main as fedgmh_main
from fedgmh.config import TrainConfig
from fedgmh.engine import make_eval_cache, play_round, select_clients
from fedgmh.train import build_federation

#: the paper's partition of each dataset: classes per client, alpha
SETTINGS = {"mnist": (2, 0.5), "cifar100": (5, 0.5)}
LAYOUTS = ("contiguous", "channels_last")


def prepare(mirror: str, work: Path, dataset: str) -> tuple[Path, Path]:
    """The dataset from the offline mirror and the paper's ExDir partition of 100 clients, made once."""
    data, partition = work / "data", work / f"{dataset}.npz"
    if not partition.is_file():
        classes, alpha = SETTINGS[dataset]
        fedgmh_main(["download", dataset, "--root", str(data), "--mirror", mirror])
        fedgmh_main(["partition", "--dataset", dataset, "--root", str(data), "--clients", "100", "--classes-per-client",
                     str(classes), "--alpha", str(alpha), "--seed", "1", "--out", str(partition)])
    return data, partition


def digest(rows: list[dict]) -> str:
    """A digest of the rounds' metrics (every value's bytes: arrays compare whole)."""
    h = hashlib.sha256()
    for row in rows:
        for key in sorted(row):
            h.update(key.encode() + np.asarray(row[key]).tobytes())
    return h.hexdigest()[:16]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirror", required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--dataset", choices=sorted(SETTINGS), default="cifar100")
    parser.add_argument("--algorithm", default="fedavg")
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    torch.set_num_threads(1)
    data, partition = prepare(args.mirror, args.work, args.dataset)
    config = TrainConfig(dataset=args.dataset, root=str(data), partition=str(partition), algorithm=args.algorithm,
                         rounds=300, seed=0, device="cpu")
    runs = {}
    for layout in LAYOUTS:
        options, engine = resolve_options(args.algorithm, {"memory_format": layout})
        fed, _ = build_federation(config, engine, torch.device("cpu"))
        algorithm = get_algorithm(args.algorithm)(fed, options)
        runs[layout] = {"fed": fed, "algorithm": algorithm, "cache": make_eval_cache(fed, algorithm),
                        "rng": np.random.RandomState(0), "seconds": [], "rows": []}
    for rnd in range(args.rounds):
        order = LAYOUTS if rnd % 2 == 0 else LAYOUTS[::-1]  # neither layout always goes first
        for layout in order:
            run = runs[layout]
            selected = select_clients(run["rng"], run["fed"].num_clients, 0.2)
            start = time.process_time()
            row = play_round(run["fed"], run["algorithm"], rnd, selected, cache=run["cache"])
            run["seconds"].append(time.process_time() - start)
            run["rows"].append({key: value for key, value in row.items() if key != "seconds"})
        print(json.dumps({"round": rnd, **{layout: round(runs[layout]["seconds"][-1], 3) for layout in LAYOUTS}}), flush=True)
    ratios = [b / a for a, b in zip(runs["contiguous"]["seconds"], runs["channels_last"]["seconds"])]
    print(json.dumps({"dataset": args.dataset, "algorithm": args.algorithm, "pairs": args.rounds,
                      "median_ratio_channels_last": round(statistics.median(ratios), 3),
                      "min_ratio": round(min(ratios), 3), "max_ratio": round(max(ratios), 3),
                      "metrics": {layout: digest(runs[layout]["rows"]) for layout in LAYOUTS},
                      "max_test_acc_difference": max(abs(a["test_acc"] - b["test_acc"]) for a, b in
                                                     zip(runs["contiguous"]["rows"], runs["channels_last"]["rows"]))}))


if __name__ == "__main__":
    main()
