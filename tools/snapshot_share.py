"""The share of a run's wall time spent outside its rounds, from committed records: run.json's
`wall_time_s` (the round loop, from after a snapshot is loaded to the last round) less metrics.csv's
summed `seconds` of the rounds that process played (all of them, or those from `resumed_from_round`).
What is left is mostly snapshots. Only valid records (`fedgmh.record.load_record`; each one that is not
is named on stderr) whose code has the snapshot cadence by time (`fedgmh.cadence`, commit CADENCE_COMMIT,
git's ancestry of the record's `code_version`) count.

    python tools/snapshot_share.py [STORE ...]    (default: paper_artifacts/paper/runs)
"""

from __future__ import annotations

import argparse
import functools
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from fedgmh.errors import UserError
from fedgmh.record import load_record

#: the commit that made snapshots follow a cadence by time (at most 3 % of the run's time)
CADENCE_COMMIT = "8949083"
STORES = ("paper_artifacts/paper/runs",)


@functools.cache
def has_cadence(code_version: str) -> bool:
    """Whether the commit `code_version` descends from CADENCE_COMMIT (False for one git does not know)."""
    done = subprocess.run(["git", "merge-base", "--is-ancestor", CADENCE_COMMIT, code_version], capture_output=True)
    return done.returncode == 0


def outside_share(record: dict, metrics: pd.DataFrame) -> float | None:
    """The share of `record`'s wall time outside the rounds its process played (None: no wall time or
    no round seconds to measure it by)."""
    first = record.get("resumed_from_round") or 0
    wall = record.get("wall_time_s") or 0
    if wall <= 0 or "seconds" not in metrics.columns:
        return None
    return 1 - float(metrics.loc[metrics["round"] >= first, "seconds"].sum()) / wall


def shares(stores: list[Path], counts: Callable[[str], bool] = has_cadence) -> tuple[dict[tuple[str, str], list[float]], list[str]]:
    """(device kind, algorithm) -> the outside shares of the valid records in `stores` whose code
    `counts`, and a line for each record that is not valid (left out)."""
    found: dict[tuple[str, str], list[float]] = {}
    problems = []
    for store in stores:
        for path in sorted(Path(store).glob("**/run.json")):
            try:
                record, metrics = load_record(path.parent)
            except UserError as err:
                problems.append(str(err))
                continue
            share = outside_share(record, metrics)
            if share is None or not counts(str(record.get("code_version", ""))):
                continue
            device = "gpu" if str(record.get("device", "")).startswith("cuda") else "cpu"
            found.setdefault((device, record["algorithm"]), []).append(share)
    return found, problems


def markdown(found: dict[tuple[str, str], list[float]]) -> str:
    lines = ["| device | method | records | median | largest |", "| --- | --- | ---: | ---: | ---: |"]
    for (device, algorithm), values in sorted(found.items()):
        lines.append(f"| {device} | {algorithm} | {len(values)} | {100 * statistics.median(values):.2f} % "
                     f"| {100 * max(values):.2f} % |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("stores", nargs="*", default=list(STORES))
    args = parser.parse_args()
    found, problems = shares([Path(store) for store in args.stores])
    for problem in problems:
        print(f"left out: {problem}", file=sys.stderr)
    print(markdown(found) if found else "no record made with the snapshot cadence by time")


if __name__ == "__main__":
    main()
