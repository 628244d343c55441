"""The numbers of the aggregated tables (results.csv and curves.csv of `fedgmh aggregate`), checked
where they are read (`fedgmh.report.runs.read_results` / `read_curves`), so that no table, figure,
comparison or claim's verdict is made from an impossible number. The first cell that is not what it
must be is one line naming the file, row and column:

- accuracies (a column named *acc*, `fedgmh.record.is_accuracy`): numbers in [0, 1] (fractions, as
  the records hold them), in every row but for OPTIONAL_COLUMNS;
- seeds, rounds and the protocol's counts (WHOLE_COLUMNS): whole numbers >= 0;
- the protocol's other numbers (NUMBER_COLUMNS): finite;
- a curves table holds each round of a run once.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from fedgmh.errors import UserError
from fedgmh.record import is_accuracy
from fedgmh.report.parsing import cell_text

#: whole numbers >= 0 where given
WHOLE_COLUMNS = ("seed", "round", "best_round", "rounds", "rounds_evaluated", "clients", "classes_per_client", "local_epochs",
                 "batch_size", "clients_up")
#: other numbers: finite where given
NUMBER_COLUMNS = ("alpha", "join_ratio", "lr", "wall_time_s")
#: accuracy columns a row may leave empty: a run that has none (no adaptation; a record older than the column)
OPTIONAL_COLUMNS = ("before_adaptation", "test_acc_mean", "test_acc_std", "best_test_acc_mean")
#: what names a run in a curves table (besides its round)
RUN_COLUMNS = ("experiment", "setting", "algorithm", "variant", "seed")


def _problems(column: str, raw: pd.Series) -> list[tuple[np.ndarray, str]]:
    """(rows that break it, what is wrong with them: '{}' the value) for each rule of `column`, in the order they are told."""
    values = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=float)  # text that is no number: NaN
    empty, known = raw.isna().to_numpy(), ~np.isnan(values)
    rules = [(~empty & ~known, "is {}, not a number"), (np.isinf(values), "is {}, not a finite number")]
    if is_accuracy(column):
        if column not in OPTIONAL_COLUMNS:
            rules.append((empty, "is empty (or NaN); every run has an accuracy"))
        rules.append((known & ((values < 0) | (values > 1)), "is {}, outside [0, 1] (accuracies are fractions)"))
    elif column in WHOLE_COLUMNS:
        if column in ("seed", "round"):
            rules.append((empty, f"is empty (or NaN); every row has a {column}"))
        with np.errstate(invalid="ignore"):
            rules.append((known & ((values < 0) | (values % 1 != 0)), "is {}, not a whole number >= 0"))
    return rules


def _check_column(frame: pd.DataFrame, column: str, where: str) -> None:
    raw = frame[column]
    for rows, what in _problems(column, raw):
        if rows.any():
            row = int(rows.argmax())
            raise UserError(f"{where}: row {row + 1} below the header, column {column} {what.format(cell_text(raw.iloc[row]))}")


def _check_rounds(frame: pd.DataFrame, where: str) -> None:
    """Each run's rounds once each (a duplicate would be averaged in silently)."""
    key = [c for c in RUN_COLUMNS if c in frame.columns] + ["round"]
    twice = frame.duplicated(key, keep="first").to_numpy()
    if twice.any():
        second = int(twice.argmax())
        row = frame.iloc[second]
        first = int((frame[key] == row[key]).all(axis=1).to_numpy().argmax())
        run = "/".join(str(row[c]) for c in ("experiment", "setting", "algorithm") if c in frame.columns)
        raise UserError(f"{where}: rows {first + 1} and {second + 1} below the header are both round {cell_text(row['round'])} of "
                        f"run {run} seed {cell_text(row['seed'])}; a run's round is one row (aggregate the runs again)")


def check_aggregate(frame: pd.DataFrame, where: str) -> None:
    """Refuse (UserError naming `where`, the row and the column) an aggregated table with an impossible number."""
    for column in frame.columns:
        if is_accuracy(str(column)) or column in WHOLE_COLUMNS or column in NUMBER_COLUMNS:
            _check_column(frame, str(column), where)
    if "round" in frame.columns and "seed" in frame.columns:
        _check_rounds(frame, where)
