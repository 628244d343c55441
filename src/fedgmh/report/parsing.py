"""Small value helpers shared by the reporting modules: parsing, ordering and comparing values."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from fedgmh.errors import UserError


def order_key(order: Sequence[str]) -> Callable[[str], tuple[int, str]]:
    """Sort key: names in `order` first, in that order, then the rest alphabetically."""
    position = {name: i for i, name in enumerate(order)}
    return lambda name: (position.get(name, len(position)), str(name))


def jsonable(value: Any) -> Any:
    """A numpy scalar as the plain Python value (anything else unchanged)."""
    if isinstance(value, np.generic):
        return value.item()
    return value


def parse_scalar(text: str) -> Any:
    """'true' -> True, '5' -> 5, '0.5' -> 0.5, anything else stays text."""
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def parse_options(raw: Any) -> dict[str, Any]:
    """The `overrides` of a run's config: a dict, or a list of 'key=value' strings."""
    if raw is None:
        return {}
    if isinstance(raw, dict):  # `fedgmh train` keeps the --set values as strings: '0.5' -> 0.5
        return {str(k): parse_scalar(v) if isinstance(v, str) else jsonable(v) for k, v in raw.items()}
    if isinstance(raw, (list, tuple)):
        out: dict[str, Any] = {}
        for item in raw:
            key, sep, value = str(item).partition("=")
            if not sep:
                raise UserError(f"option {item!r} is not of the form key=value")
            out[key.strip()] = parse_scalar(value.strip())
        return out
    raise UserError(f"options must be a mapping or a list of key=value strings, got {raw!r}")


def sort_value(value: Any) -> tuple:
    """Sort key for mixed values: numbers by size, then text, missing values last."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return (1, 0, "")
    if isinstance(value, (int, float, np.number)):
        return (0, float(value), "")
    return (0, 0, str(value))


def cell_text(value: Any) -> str:
    """A table cell's value as an error message shows it: text quoted, a number as written ('3.5', 'nan')."""
    return repr(value) if isinstance(value, str) else str(value)


def is_percent_target(value: Any) -> bool:
    """Whether `value` is a target accuracy in percent: a finite number in (0, 100] (`bool` is not one)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and 0 < value <= 100


def check_targets(targets: Sequence[Any]) -> None:
    """Raise UserError unless `targets` are target accuracies in percent (`is_percent_target`), each given once."""
    for i, target in enumerate(targets):
        if not is_percent_target(target):
            raise UserError(f"target accuracy {target} is not a percentage in (0, 100]")
        if target in targets[:i]:
            raise UserError(f"target accuracy {target:g} is given twice; give each target once")


def norm_name(text: Any) -> str:
    """Lower case, letters and digits only: 'LG-FedAvg' and 'lgfedavg' match."""
    return "".join(ch for ch in str(text).lower() if ch.isalnum())
