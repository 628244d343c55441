"""The paper's protocol and its numbers: the reference CSV (one row per cell of Tables 2-7).

Where the protocol lives: the reference CSV's columns give each cell's local epochs, participation
and FedGMH's beta and eta_h; the rounds, clients and seeds are below; the batch size and learning
rate are `fedgmh train`'s defaults (`TrainConfig`) and the lr decay, the evaluation and every
algorithm option are the options' defaults (`fedgmh.cards`: the paper's text is every
default; `preset=official` is PFLlib's reading, also the official FedGMH code's) - the code's defaults are the
paper's protocol (protocol.md), so they are read, not copied.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pandas as pd

from fedgmh.config import TrainConfig
from fedgmh.errors import UserError
from fedgmh.report.labels import DATASET_NAMES, dataset_name, format_number
from fedgmh.report.parsing import cell_text, norm_name

REFERENCE_COLUMNS = ("table", "dataset", "C", "alpha", "algorithm", "mean", "std")
#: the reference's columns that place a cell: a table varies some of them (its swept dimensions)
REFERENCE_DIMS = ("local_epochs", "join_ratio", "beta", "eta_h")
# the paper's protocol outside the swept dimensions (protocol.md)
PAPER_ROUNDS = {"mnist": 200, "cifar10": 200, "cifar100": 300}
PAPER_CLIENTS, PAPER_SEEDS = 100, 5
#: the paper's std over its 5 seeds is the population std (PFLlib's np.std)
PAPER_STD_DDOF = 0
_TRAIN_DEFAULTS = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
PAPER_BATCH_SIZE, PAPER_LR = _TRAIN_DEFAULTS["batch_size"], _TRAIN_DEFAULTS["lr"]
#: the rest of the paper's protocol (section 3.1), and the one dimension each of its sweep tables varies
PAPER_PROTOCOL = {"local_epochs": 2, "join_ratio": 0.2, "batch_size": PAPER_BATCH_SIZE, "lr": PAPER_LR}
PAPER_SWEEPS = {"table3": "local_epochs", "table4": "join_ratio"}
#: what the paper's tables report (section 3.1: "the best test accuracy over all global rounds")
PAPER_ACCURACY = "best"


def reference_dataset(name: str) -> str:
    """The display name of a dataset as the reference spells it ('Cifar100' -> 'CIFAR-100')."""
    by_norm = {norm_name(key): key for key in DATASET_NAMES}
    return dataset_name(by_norm.get(norm_name(name), str(name)))


def read_reference(path: Path | str) -> pd.DataFrame:
    """The reference CSV, checked: a readable text table with the REFERENCE_COLUMNS (`check_reference`)."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"reference table {path} is a folder; pass the CSV file (e.g. reference/fedgmh_paper_tables.csv)")
    if not path.is_file():
        raise UserError(f"reference table {path} not found")
    hint = "pass the paper's numbers as CSV (e.g. reference/fedgmh_paper_tables.csv)"
    try:
        with open(path, "rb") as handle:
            if b"\x00" in handle.read(8192):
                raise UserError(f"reference table {path} is a binary file, not a CSV table; {hint}")
        reference = pd.read_csv(path, encoding="utf-8")
    except (UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as err:
        reason = "not UTF-8 text" if isinstance(err, UnicodeDecodeError) else " ".join(str(err).split())[:200]
        raise UserError(f"reference table {path} is not a CSV table ({reason}); {hint}") from None
    except OSError as err:
        raise UserError(f"reference table {path} cannot be read ({err.strerror or err}); make it readable") from None
    check_reference(reference, f"reference table {path}")
    return reference


def reference_cell(row: pd.Series | dict) -> str:
    """A reference row in words: 'table2 MNIST ExDir(2, 0.5) FedAvg'."""
    partition = f"ExDir({format_number(row['C'])}, {format_number(row['alpha'])})"
    return f"{row['table']} {reference_dataset(row['dataset'])} {partition} {row['algorithm']}"


def _key_part(value: object) -> str:
    """A number as its shortest text (2 and 2.0 alike), anything else as text, empty for none."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    try:
        return format_number(float(value))
    except (TypeError, ValueError):
        return str(value)


def reference_key(row: pd.Series | dict) -> tuple:
    """What places a reference row: table, dataset, C, alpha, algorithm (names normalised) and REFERENCE_DIMS."""
    return (str(row["table"]), norm_name(row["dataset"]), *(_key_part(row.get(column)) for column in ("C", "alpha")),
            norm_name(row["algorithm"]), *(_key_part(row.get(column)) for column in REFERENCE_DIMS))


def check_reference(reference: pd.DataFrame, name: str = "reference table") -> None:
    """Refuse a reference whose mean or std is not a percentage in [0, 100] (empty is allowed: 'no reference'), or
    that holds one cell twice (two rows with the same REFERENCE_COLUMNS placement and dimensions)."""
    absent = set(REFERENCE_COLUMNS) - set(reference.columns)
    if absent:
        raise UserError(f"{name} lacks column(s) {', '.join(sorted(absent))}")
    if reference.empty:
        raise UserError(f"{name} has no rows; give one row per cell of the paper's tables (e.g. reference/fedgmh_paper_tables.csv)")
    for column in ("mean", "std"):
        values = pd.to_numeric(reference[column], errors="coerce")
        bad = reference[column].notna() & ~(values.ge(0) & values.le(100))  # percent
        if bad.any():
            row = int(bad.to_numpy().argmax())
            raise UserError(f"{name}: row {row + 1} below the header ({reference_cell(reference.iloc[row])}) has {column} "
                            f"{cell_text(reference[column].iloc[row])}; give a percentage in [0, 100], or leave it empty "
                            "(no reference)")
    seen: dict[tuple, int] = {}
    for position, row in enumerate(reference.to_dict("records")):
        key = reference_key(row)
        if key in seen:
            raise UserError(f"{name}: rows {seen[key] + 1} and {position + 1} below the header are the same cell "
                            f"({reference_cell(row)}); keep one")
        seen[key] = position
