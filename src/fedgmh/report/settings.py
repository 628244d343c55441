"""What a setting id says in the tables' headers and titles (the ids themselves: `fedgmh.filing`)."""

from __future__ import annotations

from typing import Any

from fedgmh.filing import DEFAULT_ASSIGNMENT, assignment_of, clients_of, partition_id
from fedgmh.report.labels import dataset_name, format_number


def base_setting(setting: str) -> str:
    """A setting id without its `@<variant>` part: the column of a variant table."""
    return setting.split("@", 1)[0]


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
