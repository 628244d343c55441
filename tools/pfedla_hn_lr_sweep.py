"""pFedLA's hypernetwork lr, swept on the embedded digits data: the audit table docs/audits/pfedla_hn_lr.csv.

Usage (from the repository root, the venv's `fedgmh` on PATH):
    python tools/pfedla_hn_lr_sweep.py WORKDIR OUT.csv [--rounds 20] [--hn-lr 0 0.005 0.05 0.5 2]

Trains pfedla on digits, 20 clients, ExDir(2, 0.5), everyone every round, E = 1, lr 0.05, seed 0, once per
hn_lr; hn_lr = 0 (always run) keeps the initial layer weights, so each row's `max_weight_move` and
`mean_weight_move` are measured against it (same seed: the same initial hypernetworks).
"""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

import pandas as pd

from fedgmh.io import write_csv


def train(work: Path, partition: Path, hn_lr: float, rounds: int) -> Path:
    out = work / f"hn_lr={hn_lr:g}"
    if not (out / "metrics.csv").is_file():
        subprocess.run(["fedgmh", "train", "--dataset", "digits", "--root", str(work / "data"), "--partition", str(partition),
                        "--algorithm", "pfedla", "--rounds", str(rounds), "--join-ratio", "1.0", "--local-epochs", "1", "--lr", "0.05",
                        "--device", "cpu", "--threads", "1", "--quiet", "--set", f"hn_lr={hn_lr:g}", "--out", str(out)], check=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("work", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--hn-lr", type=float, nargs="+", default=[0.005, 0.05, 0.5, 2.0])
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    partition = args.work / "digits_c2_a0.5_n20.npz"
    if not partition.is_file():
        subprocess.run(["fedgmh", "download", "digits", "--root", str(args.work / "data")], check=True)
        subprocess.run(["fedgmh", "partition", "--dataset", "digits", "--root", str(args.work / "data"), "--clients", "20",
                        "--classes-per-client", "2", "--alpha", "0.5", "--out", str(partition)], check=True)
    start = pd.read_csv(train(args.work, partition, 0.0, args.rounds) / "layer_weights.csv")["weight"]
    rows = []
    for hn_lr in [0.0, *args.hn_lr]:
        run = train(args.work, partition, hn_lr, args.rounds)
        metrics = pd.read_csv(run / "metrics.csv")
        move = (pd.read_csv(run / "layer_weights.csv")["weight"] - start).abs()
        rows.append({"hn_lr": hn_lr, "rounds": args.rounds, "final_test_acc": metrics["test_acc"].iloc[-1],
                     "best_test_acc": metrics["test_acc"].max(), "final_test_acc_mean": metrics["test_acc_mean"].iloc[-1],
                     "max_weight_move": move.max(), "mean_weight_move": move.mean()})
    write_csv(pd.DataFrame(rows), args.out)


if __name__ == "__main__":
    main()
