"""What a setting id says in the tables' headers and titles (the ids themselves: `fedgmh.filing`)."""

from __future__ import annotations

from typing import Any

from fedgmh.filing import DEFAULT_ASSIGNMENT, assignment_of, parse_setting_id
from fedgmh.report.labels import dataset_name, format_number


def base_setting(setting: str) -> str:
    """A setting id without its `@<variant>` part: the column of a variant table."""
    return parse_setting_id(setting).without_variant


def setting_label(record: dict[str, Any], setting: str) -> tuple[str, str]:
    """(dataset, partition text) of a setting for headers and titles: ('Fashion-MNIST', 'ExDir(2, 0.5)'),
    ('Fashion-MNIST', 'chain(4, 1000000), 8 clients'): the number of clients is shown when the setting
    id has its `_n<N>` part. Swept values and the variant are not included (`titles.extra_words`)."""
    scheme = "chain" if assignment_of(record) != DEFAULT_ASSIGNMENT else "ExDir"
    text = f"{scheme}({int(record['classes_per_client'])}, {format_number(record['alpha'])})"
    clients = parse_setting_id(setting).clients
    if clients is not None:
        text += f", {clients} clients"
    return dataset_name(record["dataset"]), text
