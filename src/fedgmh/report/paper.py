"""The paper's protocol and its numbers: the reference CSV (one row per cell of Tables 2-7)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from fedgmh.errors import UserError
from fedgmh.report.names import DATASET_NAMES, dataset_name
from fedgmh.report.values import norm_name

REFERENCE_COLUMNS = ("table", "dataset", "C", "alpha", "algorithm", "mean", "std")
# the paper's protocol outside the swept dimensions (protocol.md)
PAPER_ROUNDS = {"mnist": 200, "cifar10": 200, "cifar100": 300}
PAPER_CLIENTS, PAPER_SEEDS = 100, 5
#: the rest of the paper's protocol (section 3.1), and the one dimension each of its sweep tables varies
PAPER_PROTOCOL = {"local_epochs": 2, "join_ratio": 0.2, "batch_size": 100, "lr": 0.01}
PAPER_SWEEPS = {"table3": "local_epochs", "table4": "join_ratio"}
#: what the paper's tables report (section 3.1: "the best test accuracy over all global rounds")
PAPER_ACCURACY = "best"


def reference_dataset(name: str) -> str:
    """The display name of a dataset as the reference spells it ('Cifar100' -> 'CIFAR-100')."""
    by_norm = {norm_name(key): key for key in DATASET_NAMES}
    return dataset_name(by_norm.get(norm_name(name), str(name)))


def read_reference(path: Path | str) -> pd.DataFrame:
    """The reference CSV, checked: a readable text table with the REFERENCE_COLUMNS."""
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
    absent = set(REFERENCE_COLUMNS) - set(reference.columns)
    if absent:
        raise UserError(f"reference table {path} lacks column(s) {', '.join(sorted(absent))}")
    return reference
