"""A `fedgmh train` run's sample passes (run.json's `sample_passes` and `evaluation_sample_passes`),
with evaluation in buckets of test-split length (the engine's) or, with --fill 0, in one block padded
to the longest split (what the engine did before the buckets).

    python tools/evaluation_passes.py [--fill F] -- TRAIN-ARGUMENTS...   (those of `fedgmh train`, --out included)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from fedgmh.cli import main as fedgmh
from fedgmh.engine import federation


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fill", type=float, default=federation.EVAL_BUCKET_FILL,
                        help=f"least share of real samples in a bucket (default {federation.EVAL_BUCKET_FILL}; 0: one block)")
    parser.add_argument("train", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    words = args.train[1:] if args.train[:1] == ["--"] else args.train
    federation.EVAL_BUCKET_FILL = args.fill
    if fedgmh(["train", *words]) != 0:
        sys.exit(1)
    record = json.loads((Path(words[words.index("--out") + 1]) / "run.json").read_text())
    for field in ("sample_passes", "evaluation_sample_passes"):
        print(f"{field}: {record.get(field)}")


if __name__ == "__main__":
    main()
