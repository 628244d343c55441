"""A `fedgmh train` run's sample passes (run.json's `sample_passes` and `evaluation_sample_passes`),
with evaluation in buckets of test-split length (the engine's) or, with --fill 0, in one block padded
to the longest split (what the engine did before the buckets). With --seeds, those seeds' runs
trained alone and then together (`fedgmh train-group`), their evaluation passes summed per way.

    python tools/evaluation_passes.py [--fill F] -- TRAIN-ARGUMENTS...   (those of `fedgmh train`, --out included)
    python tools/evaluation_passes.py --seeds 0 1 2 -- TRAIN-ARGUMENTS...  (--out: a folder for the runs; no --seed)
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from fedgmh.cli import main as fedgmh
from fedgmh.engine import federation


def _record(out: Path) -> dict:
    return json.loads((out / "run.json").read_text())


def _alone_and_together(words: list[str], seeds: list[int]) -> None:
    at = words.index("--out")
    base, rest = Path(words[at + 1]), words[:at] + words[at + 2 :]
    lines = []
    for seed in seeds:
        if fedgmh(["train", *rest, "--seed", str(seed), "--out", str(base / f"alone{seed}")]) != 0:
            sys.exit(1)
        lines.append(shlex.join([*rest, "--seed", str(seed), "--out", str(base / f"together{seed}")]))
    (base / "runs.txt").write_text("\n".join(lines) + "\n")
    if fedgmh(["train-group", str(base / "runs.txt")]) != 0:
        sys.exit(1)
    for way in ("alone", "together"):
        counts = [_record(base / f"{way}{seed}")["evaluation_sample_passes"] for seed in seeds]
        useful, executed = sum(c["useful"] for c in counts), sum(c["executed"] for c in counts)
        print(f"{way}: evaluation useful {useful}, executed {executed}, useful share {useful / executed:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fill", type=float, default=federation.EVAL_BUCKET_FILL,
                        help=f"least share of real samples in a bucket (default {federation.EVAL_BUCKET_FILL}; 0: one block)")
    parser.add_argument("--seeds", type=int, nargs="+", help="train these seeds alone, then together (fedgmh train-group)")
    parser.add_argument("train", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    words = args.train[1:] if args.train[:1] == ["--"] else args.train
    federation.EVAL_BUCKET_FILL = args.fill
    if args.seeds:
        _alone_and_together(words, args.seeds)
        return
    if fedgmh(["train", *words]) != 0:
        sys.exit(1)
    record = _record(Path(words[words.index("--out") + 1]))
    for field in ("sample_passes", "evaluation_sample_passes"):
        print(f"{field}: {record.get(field)}")


if __name__ == "__main__":
    main()
