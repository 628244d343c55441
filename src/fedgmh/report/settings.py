"""Setting ids and run folders, shared with the workflow (workflow/rules/common.smk names its run folders with them).

`<dataset>_c<C>_a<alpha>`, plus `_n<N>` when the setting's number of clients N differs from the
config's (`default_clients`; the partition's id has the same part), plus `_chain` for the chain
class assignment, plus one `_<suffix><value>` per dimension an experiment sweeps for a
fixed algorithm and dataset (`_e4` local epochs, `_j0.4` join ratio, `_r300` rounds, `_b32` batch
size, `_lr0.05` learning rate, `_beta0.1` an option), plus `@<variant>` for runs of a named variant
(the audit tables' rows).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from fedgmh.report.labels import SWEEP_DIMS, dataset_name, format_number
from fedgmh.report.parsing import freeze

DEFAULT_ASSIGNMENT = "random"


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


def variant_of(record: dict[str, Any]) -> str:
    """The record's variant name, '' when it has none (a missing value read from a CSV is NaN)."""
    value = record.get("variant")
    return value if isinstance(value, str) else ""


def sweep_dimensions(records: Iterable[dict[str, Any]]) -> list[str]:
    """Fields that vary for a fixed (variant, algorithm, dataset, C, alpha) among `records`.

    `records` are dicts with dataset, classes_per_client, alpha, algorithm, local_epochs,
    join_ratio, rounds, batch_size, lr and options (a dict). Option dimensions are returned as
    'opt:<key>'. Order: SWEEP_DIMS's (local_epochs, join_ratio, rounds, batch_size, lr), then option
    keys alphabetically.
    """
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for rec in records:
        key = (variant_of(rec), rec["algorithm"], rec["dataset"], int(rec["classes_per_client"]), float(rec["alpha"]),
               clients_of(rec), assignment_of(rec))
        groups.setdefault(key, []).append(rec)
    dims: list[str] = []
    for field in SWEEP_DIMS:
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
        suffix = dim[4:] if dim.startswith("opt:") else SWEEP_DIMS[dim][0]
        text += f"_{suffix}{format_number(value) if value is not None else 'default'}"
    if variant_of(record):
        text += f"@{variant_of(record)}"
    return text


def base_setting(setting: str) -> str:
    """A setting id without its `@<variant>` part: the column of a variant table."""
    return setting.split("@", 1)[0]


def assign_setting_ids(records: Sequence[dict[str, Any]], default_clients: int | None = None) -> list[str]:
    """Setting id of every record, sweeping the dimensions that vary inside this set of records;
    `default_clients`: the config's number of clients (records with another get `_n<N>`; None: never)."""
    dims = sweep_dimensions(records)
    return [setting_id(rec, dims, default_clients) for rec in records]


def _split(record: dict[str, Any], setting: str) -> tuple[bool, str]:
    """Whether `setting` (an id of `record`'s setting) carries the `_n<N>` part, and what follows the
    partition part ('_e4', '_beta0.1@official', ...)."""
    args = (record["dataset"], record["classes_per_client"], record["alpha"])
    clients, assignment = clients_of(record), assignment_of(record)
    if clients is not None:
        with_n = partition_id(*args, clients, -1, assignment)  # -1: never the default, so `_n<N>` is there
        if setting.startswith(with_n) and setting[len(with_n):len(with_n) + 1] in ("", "_", "@"):
            return True, setting[len(with_n):]
    plain = partition_id(*args, assignment=assignment)
    return False, setting[len(plain):] if setting.startswith(plain) else ""


def setting_label(record: dict[str, Any], setting: str) -> tuple[str, str]:
    """(dataset, partition text) of a setting for headers and titles: ('Fashion-MNIST', 'ExDir(2, 0.5)'),
    ('Fashion-MNIST', 'chain(4, 1000000), 8 clients'): the number of clients is shown when the setting
    id has its `_n<N>` part. Swept values and the variant are not included (`setting_extra`)."""
    scheme = "chain" if assignment_of(record) != DEFAULT_ASSIGNMENT else "ExDir"
    text = f"{scheme}({int(record['classes_per_client'])}, {format_number(record['alpha'])})"
    if _split(record, setting)[0]:
        text += f", {clients_of(record)} clients"
    return dataset_name(record["dataset"]), text


def setting_extra(record: dict[str, Any], setting: str) -> str:
    """What a setting id adds after its partition part: '_e4', '_beta0.1@official', ... ('' for none)."""
    return _split(record, setting)[1]
