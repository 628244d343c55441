"""The share of a run's wall time spent outside its rounds, from committed records: run.json's
`wall_time_s` (the round loop, from after a snapshot is loaded to the last round) less metrics.csv's
summed `seconds` of the rounds that process played (all of them, or those from `resumed_from_round`).
What is left is mostly snapshots. Only records whose code has the snapshot cadence by time
(`fedgmh.cadence`, commit CADENCE_COMMIT, git's ancestry of the record's `code_version`) count.

    python tools/snapshot_share.py [STORE ...]    (default: paper_artifacts/paper/runs)
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
from collections.abc import Callable
from pathlib import Path

#: the commit that made snapshots follow a cadence by time (at most 3 % of the run's time)
CADENCE_COMMIT = "8949083"
STORES = ("paper_artifacts/paper/runs",)


def has_cadence(code_version: str) -> bool:
    """Whether the commit `code_version` descends from CADENCE_COMMIT (False for one git does not know)."""
    done = subprocess.run(["git", "merge-base", "--is-ancestor", CADENCE_COMMIT, code_version], capture_output=True)
    return done.returncode == 0


def outside_share(record: dict, rows: list[dict]) -> float:
    """The share of `record`'s wall time outside the rounds its process played (`rows`: metrics.csv)."""
    first = record.get("resumed_from_round") or 0
    played = sum(float(row["seconds"]) for row in rows if int(row["round"]) >= first)
    return 1 - played / float(record["wall_time_s"])


def shares(stores: list[Path], counts: Callable[[str], bool] = has_cadence) -> dict[tuple[str, str], list[float]]:
    """(device kind, algorithm) -> the outside shares of the records in `stores` whose code `counts`."""
    found: dict[tuple[str, str], list[float]] = {}
    for store in stores:
        for path in sorted(Path(store).glob("**/run.json")):
            record = json.loads(path.read_text())
            metrics = path.with_name("metrics.csv")
            if not metrics.is_file() or not counts(str(record.get("code_version", ""))):
                continue
            with open(metrics, newline="") as f:
                rows = list(csv.DictReader(f))
            device = "gpu" if str(record.get("device", "")).startswith("cuda") else "cpu"
            found.setdefault((device, record["algorithm"]), []).append(outside_share(record, rows))
    return found


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
    found = shares([Path(store) for store in args.stores])
    print(markdown(found) if found else "no record made with the snapshot cadence by time")


if __name__ == "__main__":
    main()
