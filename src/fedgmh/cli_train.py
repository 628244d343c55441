"""What `fedgmh train` says before its heavy imports: the start-up line and the one-seed rule.

Both use the standard library alone, so that they come within a second of the command."""

from __future__ import annotations

import argparse
import json
import re
import zipfile
from pathlib import Path

from fedgmh.errors import UserError

SEVERAL_SEEDS = ("one `fedgmh train` is one seed: give one --seed and an --out per seed, e.g. "
                 "`for s in 0 1 2; do fedgmh train ... --seed $s --out runs/fedgmh_s$s; done`, or let the workflow "
                 "train them (config key seeds: [0, 1, 2])")


class ParseStop(UserError):
    """A command line refused while it is parsed, said in one line by `prog` (e.g. 'fedgmh train')."""

    def __init__(self, prog: str, message: str) -> None:
        super().__init__(message)
        self.prog = prog


class OneSeed(argparse.Action):
    """--seed N; several seeds (`--seed 0,1,2`, `--seeds 0 1 2`) stop with one line saying how to run them."""

    def __call__(self, parser, namespace, values, option_string=None):
        text = " ".join(values) if isinstance(values, list) else str(values)
        if option_string == "--seed" and re.fullmatch(r"\s*[+-]?\d+\s*", text):
            setattr(namespace, self.dest, int(text))
            return
        if option_string == "--seed" and not re.fullmatch(r"[\d\s,;]+", text):
            raise argparse.ArgumentError(self, f"invalid int value: {text!r}")
        raise ParseStop(parser.prog, f"{option_string} {text}: {SEVERAL_SEEDS}")


def partition_summary(path: str) -> str | None:
    """'mnist ExDir(2, 0.5)' from a partition file's meta, read without numpy; None when it cannot be read."""
    try:
        with zipfile.ZipFile(path) as archive:
            raw = archive.read("meta.npy")
        meta = json.loads(raw[raw.index(b"\n") + 1:].decode("utf-32-le").rstrip("\x00"))
        return f"{meta['dataset']} ExDir({meta['classes_per_client']}, {meta['alpha']:g}), {meta['num_clients']} clients"
    except (OSError, KeyError, ValueError, TypeError, zipfile.BadZipFile):
        return None


def start_line(args: argparse.Namespace) -> str:
    """The line `fedgmh train` prints first: what it trains and where, while torch and the data load."""
    what = partition_summary(args.partition) or (args.dataset or "the partition's dataset")
    return (f"train: {args.algorithm} on {what} ({Path(args.partition).name}), seed {args.seed}, {args.rounds} rounds "
            f"-> {args.out}; loading torch and the data")
