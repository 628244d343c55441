"""How two records of the same run differ, in one of three kinds (docs/store.md):

- IDENTICAL: run.json's results and every table both records have are equal (timing columns and
  the columns only one of them has aside);
- FLOAT_LEVEL: the same, except float columns that are not accuracies (losses, an algorithm's
  weights) differ by at most LOSS_RTOL relative: the rounding of another machine, library or
  thread count (fedgmh.machine). Reported with the largest difference, not a conflict;
- DIFFERENT: anything else (an accuracy, a count, a row, a column, a loss beyond LOSS_RTOL): a
  conflict a person must settle.

A table only one record has (clients.csv of a record made before it existed) is listed in
`one_sided`, not compared.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fedgmh.record import RESULT_FIELDS, is_accuracy, optional_files, read_table

IDENTICAL, FLOAT_LEVEL, DIFFERENT = "identical", "float-level", "different"
#: the largest relative difference of a loss (or another non-accuracy float) that is rounding
LOSS_RTOL = 1e-5
#: metrics.csv columns that measure time, not results: never compared
TIMING_COLUMNS = ("seconds",)
#: metrics.csv columns added after records were written: compared only when both records have them
#: (an older record without one is the same run as a newer one with it)
ADDED_COLUMNS = ("clients_up",)


@dataclass
class Difference:
    kind: str
    detail: str = ""  # DIFFERENT: the first difference; FLOAT_LEVEL: where the largest one is
    max_abs: float = 0.0
    max_rel: float = 0.0
    one_sided: list[str] = field(default_factory=list)

    def describe(self) -> str:
        if self.kind == FLOAT_LEVEL:
            return f"same accuracies, float-level differences (largest {self.max_abs:.3g} absolute, {self.max_rel:.3g} relative, {self.detail})"
        return self.detail if self.kind == DIFFERENT else "identical"


def comparable_table(folder: Path, name: str) -> pd.DataFrame:
    frame = read_table(folder / name)
    return frame.drop(columns=[c for c in TIMING_COLUMNS if c in frame.columns]) if name == "metrics.csv" else frame


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python number it holds (for messages)."""
    return value.item() if hasattr(value, "item") else value


def _compare_frames(name: str, mine: pd.DataFrame, theirs: pd.DataFrame, found: Difference) -> str | None:
    """The first difference that is not rounding (None: none), the largest rounding noted in `found`."""
    if name == "metrics.csv":
        one_sided = [c for c in ADDED_COLUMNS if (c in mine.columns) != (c in theirs.columns)]
        mine, theirs = mine.drop(columns=one_sided, errors="ignore"), theirs.drop(columns=one_sided, errors="ignore")
    if list(mine.columns) != list(theirs.columns):
        return f"{name} has columns {list(mine.columns)} vs {list(theirs.columns)}"
    if len(mine) != len(theirs):
        return f"{name} has {len(mine)} vs {len(theirs)} rows"
    for column in mine.columns:
        a, b = mine[column], theirs[column]
        if a.equals(b):
            continue
        numeric = a.dtype.kind == "f" and b.dtype.kind == "f"
        if not numeric or is_accuracy(column):
            row = int(np.argmax((a != b).to_numpy()))
            return f"{name} column {column} row {row}: {_plain(a.iloc[row])!r} vs {_plain(b.iloc[row])!r}"
        x, y = a.to_numpy(), b.to_numpy()
        same = (x == y) | (np.isnan(x) & np.isnan(y))
        if (np.isnan(x) != np.isnan(y)).any() or not np.isfinite(x[~same]).all() or not np.isfinite(y[~same]).all():
            row = int(np.argmax(~same))
            return f"{name} column {column} row {row}: {_plain(x[row])!r} vs {_plain(y[row])!r}"
        gap = np.abs(x[~same] - y[~same])
        rel = gap / np.maximum(np.abs(x[~same]), np.abs(y[~same]))
        worst = int(np.argmax(rel))
        if rel[worst] > LOSS_RTOL:
            row = int(np.flatnonzero(~same)[worst])
            return f"{name} column {column} row {row}: {_plain(x[row])!r} vs {_plain(y[row])!r} (relative {rel[worst]:.3g} > {LOSS_RTOL:g})"
        if rel[worst] > found.max_rel:
            found.max_rel, found.detail = float(rel[worst]), f"{name} {column}"
        found.max_abs = max(found.max_abs, float(gap.max()))
    return None


def compare(mine: tuple[Path, dict[str, Any]], theirs: tuple[Path, dict[str, Any]]) -> Difference:
    """The kind of difference between two (valid) records of the same run, given as (folder, run.json)."""
    (my_folder, my_record), (their_folder, their_record) = mine, theirs
    found = Difference(IDENTICAL)
    for name in RESULT_FIELDS:
        if name in my_record and name in their_record and my_record[name] != their_record[name]:
            return Difference(DIFFERENT, f"run.json {name}: {my_record[name]!r} vs {their_record[name]!r}")
    my_tables, their_tables = set(optional_files(my_folder)), set(optional_files(their_folder))
    for name in ["metrics.csv", *sorted(my_tables & their_tables)]:
        problem = _compare_frames(name, comparable_table(my_folder, name), comparable_table(their_folder, name), found)
        if problem:
            return Difference(DIFFERENT, problem)
    if found.max_rel > 0:
        found.kind = FLOAT_LEVEL
    found.one_sided = sorted(my_tables ^ their_tables)
    return found

