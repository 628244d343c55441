"""Where the workflow files a run: setting ids, partition ids and run folders, one definition for the
plan (results/), the store (paper_artifacts/) and the report's tables (workflow/rules/common.smk names
its run folders with them). Imports nothing beyond the standard library, so the workflow's plan loads
without numpy's, pandas' or torch's weight.

A setting id is `<dataset>_c<C>_a<alpha>`, plus `_n<N>` when the setting's number of clients N
differs from the config's (`default_clients`; the partition's id has the same part), plus `_chain`
for the chain class assignment, plus one `_<suffix><value>` per dimension an experiment sweeps for
a fixed algorithm and dataset (`_e4` local epochs, `_j0.4` join ratio, `_r300` rounds, `_b32` batch
size, `_lr0.05` learning rate, `_beta0.1` an option), plus `@<variant>` for runs of a named variant
(the audit tables' rows). `parse_setting_id` reads one back into its parts.
"""

from __future__ import annotations

import numbers
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

#: the dimensions (besides dataset, C, alpha) an experiment may sweep: results.csv column -> suffix in setting ids
SWEEP_SUFFIXES: dict[str, str] = {"local_epochs": "e", "join_ratio": "j", "rounds": "r", "batch_size": "b", "lr": "lr"}
DEFAULT_ASSIGNMENT = "random"
#: a partition id, `<dataset>_c<C>_a<alpha>[_n<N>][_chain]`, with a named group per part
_PARTITION = (r"(?P<dataset>[a-z0-9_]+?)_c(?P<classes_per_client>[0-9]+)_a(?P<alpha>[0-9][0-9.e+-]*)"
              r"(?:_n(?P<clients>[0-9]+))?(?:_(?P<assignment>chain))?")
_SETTING = re.compile(rf"(?P<partition>{_PARTITION})(?P<sweeps>(?:_[^@]*)?)(?:@(?P<variant>[^@]+))?")
#: the same grammar as a Snakemake wildcard constraint (its groups unnamed: Snakemake names its own)
PARTITION_WILDCARD = re.sub(r"\?P<\w+>", "?:", _PARTITION)


def format_number(value: Any) -> str:
    """Shortest faithful text for a number: 0.5 -> '0.5', 5 -> '5', 5.0 -> '5', 1e-3 -> '0.001'."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, numbers.Integral):  # numpy's integers too
        return str(int(value))
    if isinstance(value, numbers.Real):
        if float(value).is_integer():
            return str(int(value))
        return f"{float(value):.10g}"
    return str(value)


def freeze(value: Any) -> Any:
    """A whole float as int, so 5.0 and 5 count as one value."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def run_subfolder(experiment: str, setting: str, algorithm: str, seed: int | str) -> str:
    """Where the workflow files a run below a runs folder (results/<name>/runs, paper_artifacts/<name>/runs)."""
    return f"{experiment}/{setting}/{algorithm}/seed{seed}"


def assignment_of(record: dict[str, Any]) -> str:
    """The record's class assignment ('random' when it has none: records made before `chain` existed)."""
    value = record.get("assignment")
    return value if isinstance(value, str) and value else DEFAULT_ASSIGNMENT


def clients_of(record: dict[str, Any]) -> int | None:
    value = record.get("clients")
    try:
        return None if value is None or value != value else int(value)  # NaN read from a CSV: unknown
    except (TypeError, ValueError):
        return None


def partition_id(dataset: str, classes_per_client: int, alpha: float, clients: int | None = None,
                 default_clients: int | None = None, assignment: str = DEFAULT_ASSIGNMENT) -> str:
    """`<dataset>_c<C>_a<alpha>`, plus `_n<N>` when `clients` differs from `default_clients` (both
    given), plus `_chain` for the chain assignment: a partition's file name and the start of the ids
    of its settings."""
    text = f"{dataset}_c{int(classes_per_client)}_a{format_number(alpha)}"
    if clients is not None and default_clients is not None and int(clients) != int(default_clients):
        text += f"_n{int(clients)}"
    if assignment != DEFAULT_ASSIGNMENT:
        text += f"_{assignment}"
    return text


@dataclass(frozen=True)
class SettingParts:
    """A setting id read back: `partition` is its partition id, `sweeps` its swept values as written
    ('_e4_beta0.1', '' for none), `clients` None when the id has no `_n<N>` (the config's number)."""

    dataset: str
    classes_per_client: int
    alpha: float
    clients: int | None
    assignment: str
    partition: str
    sweeps: str
    variant: str

    @property
    def without_variant(self) -> str:
        """The id without its `@<variant>` part: the column of a variant table."""
        return self.partition + self.sweeps


def parse_setting_id(setting: str) -> SettingParts:
    """The parts of a setting id or partition id (as `setting_id` and `partition_id` write them);
    a ValueError for text that is not one."""
    match = _SETTING.fullmatch(setting)
    if not match:
        raise ValueError(f"{setting!r} is not a setting id (<dataset>_c<C>_a<alpha>[_n<N>][_chain][_<swept><value>...][@<variant>])")
    return SettingParts(match["dataset"], int(match["classes_per_client"]), float(match["alpha"]),
                        int(match["clients"]) if match["clients"] else None, match["assignment"] or DEFAULT_ASSIGNMENT,
                        match["partition"], match["sweeps"], match["variant"] or "")


def variant_of(record: dict[str, Any]) -> str:
    """The record's variant name, '' when it has none (a missing value read from a CSV is NaN)."""
    value = record.get("variant")
    return value if isinstance(value, str) else ""


def sweep_dimensions(records: Iterable[dict[str, Any]]) -> list[str]:
    """Fields that vary for a fixed (variant, algorithm, dataset, C, alpha) among `records`.

    `records` are dicts with dataset, classes_per_client, alpha, algorithm, local_epochs,
    join_ratio, rounds, batch_size, lr and options (a dict). Option dimensions are returned as
    'opt:<key>'. Order: SWEEP_SUFFIXES's (local_epochs, join_ratio, rounds, batch_size, lr), then option
    keys alphabetically.
    """
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for rec in records:
        key = (variant_of(rec), rec["algorithm"], rec["dataset"], int(rec["classes_per_client"]), float(rec["alpha"]),
               clients_of(rec), assignment_of(rec))
        groups.setdefault(key, []).append(rec)
    dims: list[str] = []
    for field in SWEEP_SUFFIXES:
        if any(len({freeze(r.get(field)) for r in group}) > 1 for group in groups.values()):
            dims.append(field)
    option_keys = sorted({k for group in groups.values() for r in group for k in (r.get("options") or {})})
    for key in option_keys:
        if any(len({freeze((r.get("options") or {}).get(key)) for r in group}) > 1 for group in groups.values()):
            dims.append(f"opt:{key}")
    return dims


def dim_value(record: dict[str, Any], dim: str) -> Any:
    if dim.startswith("opt:"):
        return (record.get("options") or {}).get(dim[4:])
    return record.get(dim)


def base_id(record: dict[str, Any], default_clients: int | None = None) -> str:
    """The partition part of a record's setting id (`partition_id` of its fields)."""
    return partition_id(record["dataset"], record["classes_per_client"], record["alpha"], clients_of(record), default_clients,
                        assignment_of(record))


def setting_id(record: dict[str, Any], dims: Sequence[str] = (), default_clients: int | None = None) -> str:
    """`base_id` (`<dataset>_c<C>_a<alpha>[_n<N>][_chain]`) plus `_<suffix><value>` for every swept
    dimension in `dims`, plus `@<variant>`."""
    text = base_id(record, default_clients)
    for dim in dims:
        value = dim_value(record, dim)
        suffix = dim[4:] if dim.startswith("opt:") else SWEEP_SUFFIXES[dim]
        text += f"_{suffix}{format_number(value) if value is not None else 'default'}"
    if variant_of(record):
        text += f"@{variant_of(record)}"
    return text


def assign_setting_ids(records: Sequence[dict[str, Any]], default_clients: int | None = None) -> list[str]:
    """Setting id of every record, sweeping the dimensions that vary inside this set of records;
    `default_clients`: the config's number of clients (records with another get `_n<N>`; None: never)."""
    dims = sweep_dimensions(records)
    return [setting_id(rec, dims, default_clients) for rec in records]
