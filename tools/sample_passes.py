"""The useful share of a batched round's training sample passes on a partition, counted without
training: every selected client padded to the longest one's steps (the batched step before it
trained only the clients that still have a batch) against the step that does, both padding each
client's partial last batch. Rounds drawn as `fedgmh train` draws them (RandomState(seed)).

    python tools/sample_passes.py PARTITION.npz [--rounds 200] [--join-ratio 0.2] [--epochs 2] [--batch-size 100]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from fedgmh.config import TrainConfig
from fedgmh.engine import select_clients
from fedgmh.errors import UserError
from fedgmh.partition import load_partition


def passes(sizes: np.ndarray, epochs: int, batch_size: int) -> tuple[int, int, int]:
    """One round's (useful, executed padded to the longest client, executed without padded steps)."""
    steps = epochs * -(-sizes // batch_size)
    return int(epochs * sizes.sum()), int(steps.max(initial=0) * len(sizes) * batch_size), int(steps.sum() * batch_size)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("partition")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--join-ratio", type=float, default=0.2)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    try:  # the checks `fedgmh train` makes of the same flags, and of the partition file
        TrainConfig(dataset="", root="", partition=args.partition, algorithm="", rounds=args.rounds, join_ratio=args.join_ratio,
                    local_epochs=args.epochs, batch_size=args.batch_size, seed=args.seed)
        partition, _ = load_partition(Path(args.partition))
    except UserError as err:
        parser.exit(2, f"{parser.prog}: error: {err}\n")
    sizes = np.array([len(train) for train in partition.train])
    rng, totals = np.random.RandomState(args.seed), np.zeros(3)
    for _ in range(args.rounds):
        totals += passes(sizes[select_clients(rng, len(sizes), args.join_ratio)], args.epochs, args.batch_size)
    useful, padded, unpadded = totals
    print(f"{args.partition}: useful share {useful / padded:.3f} padded to the longest client, {useful / unpadded:.3f} "
          f"without padded steps ({unpadded / padded:.3f} of the padded passes executed)")


if __name__ == "__main__":
    main()
