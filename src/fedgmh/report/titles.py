"""Figure titles of settings in words: 'CIFAR-100 ExDir(5, 0.5), rho = 0.4', 'CIFAR-100 50 classes per
client, IID, 20 clients', from a setting id's parts (`fedgmh.filing.parse_setting_id`)."""

from __future__ import annotations

import re

import pandas as pd

from fedgmh.filing import parse_setting_id
from fedgmh.report.labels import SWEEP_DIMS
from fedgmh.report.settings import setting_label

IID_ALPHA = 1e6  # a Dirichlet this flat gives every client equal shares of its classes
# the word of each swept dimension's suffix in setting ids (`_j0.4` -> 'rho = 0.4')
SUFFIX_WORDS = {"e": "E", "j": "rho", "r": "R", "b": "B", "lr": "lr"}
assert set(SUFFIX_WORDS) == {suffix for suffix, _ in SWEEP_DIMS.values()}
_PART = re.compile(r"_([A-Za-z][A-Za-z_]*?)(-?\d[\d.e+-]*|default)(?=_|$)")


def extra_words(setting: str) -> str:
    """What a setting id adds to its partition, in words: '<partition>_j0.4' -> 'rho = 0.4', '_beta0.1' ->
    'beta = 0.1', '_eta_h0.01@official' -> 'eta_h = 0.01, official', '@hn_lr=2' -> 'hn_lr = 2' ('' for
    none); a swept part it cannot read stays as written. The id is read by `filing.parse_setting_id`."""
    parts = parse_setting_id(setting)
    words, rest, variant = [], parts.sweeps, parts.variant
    while rest:
        match = _PART.match(rest)
        if not match:
            words.append(rest.strip("_"))
            break
        key, value = match.groups()
        words.append(f"{SUFFIX_WORDS.get(key, key)} = {value}")
        rest = rest[match.end():]
    if variant:
        words.append(" = ".join(variant.split("=", 1)))
    return ", ".join(w for w in words if w)


def partition_words(record: dict, setting: str) -> tuple[str, str]:
    """(dataset, partition) as `setting_label`, with 'IID' for alpha >= 1e6 instead of the number."""
    dataset, partition = setting_label(record, setting)
    if float(record["alpha"]) >= IID_ALPHA:
        scheme, _, tail = partition.partition("(")
        classes, _, after = tail.partition(",")
        clients = after.partition(")")[2]  # ', 20 clients' or ''
        partition = (f"chain of {classes} classes, IID" if scheme == "chain" else f"{classes} classes per client, IID") + clients
    return dataset, partition


def setting_title(data: pd.DataFrame, setting: str) -> str:
    """'CIFAR-100 ExDir(5, 0.5)', plus ', rho = 0.4' for a swept value, of a setting's rows."""
    first = data.iloc[0].to_dict()
    dataset, partition = partition_words(first, setting)
    extra = extra_words(setting)
    return f"{dataset} {partition}, {extra}" if extra else f"{dataset} {partition}"
