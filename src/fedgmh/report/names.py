"""Names, orders and small helpers shared by the reporting modules (no pandas needed)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from fedgmh.errors import UserError


def algorithm_order() -> list[str]:
    """The registered algorithms in the paper's row order (their `paper_row`; those without one
    after the others, by name)."""
    from fedgmh.algorithms import REGISTRY  # imported when used: importing fedgmh.report stays light

    return sorted(REGISTRY, key=lambda name: (REGISTRY[name].paper_row is None, REGISTRY[name].paper_row or 0, name))


class _AlgorithmNames(Mapping[str, str]):
    """Registered name -> display name, in the paper's row order, read from the registry when used."""

    def __getitem__(self, name: str) -> str:
        from fedgmh.algorithms import REGISTRY

        return REGISTRY[name].display_name or name

    def __iter__(self) -> Iterator[str]:
        return iter(algorithm_order())

    def __len__(self) -> int:
        return len(algorithm_order())


class _AlgorithmOrder(Sequence[str]):
    """`algorithm_order()` as a sequence that reads the registry when used."""

    def __getitem__(self, index):
        return algorithm_order()[index]

    def __iter__(self) -> Iterator[str]:
        return iter(algorithm_order())

    def __len__(self) -> int:
        return len(algorithm_order())


# Both come from the algorithm classes (`display_name`, `paper_row`), an algorithm registered late included.
ALGORITHM_NAMES: Mapping[str, str] = _AlgorithmNames()
ALGORITHM_ORDER: Sequence[str] = _AlgorithmOrder()

DATASET_NAMES: dict[str, str] = {
    "mnist": "MNIST",
    "fashion_mnist": "Fashion-MNIST",
    "cifar10": "CIFAR-10",
    "cifar100": "CIFAR-100",
    "digits": "Digits",
}
DATASET_ORDER = list(DATASET_NAMES)

STD_DDOF = 0  # population std over seeds, like numpy.std / PFLlib's average_data

RUN_JSON_KEYS = ("algorithm", "dataset", "seed", "config", "best_test_acc", "best_round", "final_test_acc", "wall_time_s")
METRICS_COLUMNS = ("round", "test_acc")
PARTITION_FIELDS = ("classes_per_client", "alpha")
# algorithm options that get a results.csv column even when a run did not set them (--set), taken
# from run.json's resolved `algorithm_options`
REPORTED_OPTIONS = ("beta", "eta_h", "preset")

# Dimensions (besides dataset, C, alpha) that an experiment may sweep: results.csv column ->
# (suffix in setting ids, label in CSV tables, label in LaTeX tables).
SWEEP_DIMS: dict[str, tuple[str, str, str]] = {
    "local_epochs": ("e", "E", "$E$"),
    "join_ratio": ("j", "ρ", r"$\rho$"),
    "rounds": ("r", "R", "$R$"),
}
OPTION_LABELS: dict[str, tuple[str, str]] = {
    "beta": ("β", r"$\beta$"),
    "eta_h": ("η_h", r"$\eta_h$"),
    "mu": ("μ", r"$\mu$"),
}

BASE_COLUMNS = [
    "experiment", "setting", "dataset", "classes_per_client", "alpha", "clients", "algorithm", "variant", "seed",
    "rounds", "local_epochs", "join_ratio", "batch_size", "lr", "options",
]
RESULT_COLUMNS = ["best_test_acc", "best_round", "final_test_acc", "rounds_evaluated", "wall_time_s", "run_dir"]


def format_number(value: Any) -> str:
    """Shortest faithful text for a number: 0.5 -> '0.5', 5 -> '5', 5.0 -> '5', 1e-3 -> '0.001'."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        if float(value).is_integer():
            return str(int(value))
        return f"{float(value):.10g}"
    return str(value)


def algorithm_name(algorithm: str) -> str:
    """The display name of a registered algorithm; any other name unchanged."""
    return ALGORITHM_NAMES.get(algorithm, algorithm)


def dataset_name(dataset: str) -> str:
    return DATASET_NAMES.get(dataset, dataset)


def _order_key(order: Sequence[str]):
    position = {name: i for i, name in enumerate(order)}
    return lambda name: (position.get(name, len(position)), str(name))


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    return value


def parse_options(raw: Any) -> dict[str, Any]:
    """The `overrides` of a run's config: a dict, or a list of 'key=value' strings."""
    if raw is None:
        return {}
    if isinstance(raw, dict):  # `fedgmh train` keeps the --set values as strings: '0.5' -> 0.5
        return {str(k): _parse_scalar(v) if isinstance(v, str) else _jsonable(v) for k, v in raw.items()}
    if isinstance(raw, (list, tuple)):
        out: dict[str, Any] = {}
        for item in raw:
            key, sep, value = str(item).partition("=")
            if not sep:
                raise UserError(f"option {item!r} is not of the form key=value")
            out[key.strip()] = _parse_scalar(value.strip())
        return out
    raise UserError(f"options must be a mapping or a list of key=value strings, got {raw!r}")


def _parse_scalar(text: str) -> Any:
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def _freeze(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _sort_value(value: Any) -> tuple:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return (1, 0, "")
    if isinstance(value, (int, float, np.number)):
        return (0, float(value), "")
    return (0, 0, str(value))


def _norm_name(text: Any) -> str:
    return "".join(ch for ch in str(text).lower() if ch.isalnum())

