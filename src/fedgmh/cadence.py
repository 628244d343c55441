"""How often a run snapshots (`fedgmh train --checkpoint-every`): an execution option, never part of
the run (`runspec`): snapshots change when a run can resume from, not its numbers."""

from __future__ import annotations

import re

from fedgmh.errors import UserError

#: the largest share of a run's time that snapshots by time (`Checkpoint.seconds`) may take: the next one
#: waits until the training since the last is at least its write time / SNAPSHOT_SHARE
SNAPSHOT_SHARE = 0.03

#: `fedgmh train --checkpoint-every`'s default: a snapshot after 60 s of training (1-3 % of a GPU run's
#: time for snapshots of 0.2-0.8 s; `SNAPSHOT_SHARE` stretches it for larger ones)
DEFAULT_CADENCE = "60s"


def snapshot_cadence(text: str | int) -> tuple[int, float]:
    """A `--checkpoint-every` value as (rounds, seconds): K (every K rounds), Ss (after S seconds of
    training since the last snapshot, e.g. 60s) or 0 (never)."""
    value = str(text).strip()
    if re.fullmatch(r"\d+", value):
        return int(value), 0.0
    if re.fullmatch(r"\d+(\.\d+)?s", value) and float(value[:-1]) > 0:
        return 0, float(value[:-1])
    raise UserError(f"--checkpoint-every {text}: expected K >= 0 rounds (e.g. 10; 0: never) or S > 0 seconds of training (e.g. 60s)")


def describe_cadence(rounds: int, seconds: float) -> str:
    """How often a run snapshots, in words (for messages)."""
    if rounds:
        return f"one every {rounds} rounds"
    return f"one after every {seconds:g} s of training" if seconds else "none"

