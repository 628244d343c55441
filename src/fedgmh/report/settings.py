"""Setting ids, shared with the workflow (workflow/rules/common.smk names its run folders with them).

`<dataset>_c<C>_a<alpha>`, plus one `_<suffix><value>` per dimension an experiment sweeps for a
fixed algorithm and dataset (`_e4` local epochs, `_j0.4` join ratio, `_r300` rounds, `_beta0.1`
an option), plus `@<variant>` for runs of a named variant (the audit tables' rows).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from fedgmh.report.names import SWEEP_DIMS, format_number
from fedgmh.report.values import freeze


def variant_of(record: dict[str, Any]) -> str:
    """The record's variant name, '' when it has none (a missing value read from a CSV is NaN)."""
    value = record.get("variant")
    return value if isinstance(value, str) else ""


def sweep_dimensions(records: Iterable[dict[str, Any]]) -> list[str]:
    """Fields that vary for a fixed (variant, algorithm, dataset, C, alpha) among `records`.

    `records` are dicts with dataset, classes_per_client, alpha, algorithm, local_epochs,
    join_ratio, rounds and options (a dict). Option dimensions are returned as 'opt:<key>'.
    Order: local_epochs, join_ratio, rounds, then option keys alphabetically.
    """
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for rec in records:
        key = (variant_of(rec), rec["algorithm"], rec["dataset"], int(rec["classes_per_client"]), float(rec["alpha"]))
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


def setting_id(record: dict[str, Any], dims: Sequence[str] = ()) -> str:
    """`<dataset>_c<C>_a<alpha>` plus `_<suffix><value>` for every swept dimension in `dims`, plus `@<variant>`."""
    text = f"{record['dataset']}_c{int(record['classes_per_client'])}_a{format_number(record['alpha'])}"
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


def assign_setting_ids(records: Sequence[dict[str, Any]]) -> list[str]:
    """Setting id of every record, sweeping the dimensions that vary inside this set of records."""
    dims = sweep_dimensions(records)
    return [setting_id(rec, dims) for rec in records]

