"""Names, orders and small helpers shared by the reporting modules (no pandas needed)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np



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

PARTITION_FIELDS = ("classes_per_client", "alpha")
# algorithm options that get a results.csv column even when a run did not set them (--set), taken
# from run.json's resolved `algorithm_options`
REPORTED_OPTIONS = ("beta", "eta_h", "preset")

# Dimensions (besides dataset, C, alpha) that an experiment may sweep: results.csv column ->
# (suffix in setting ids, label in table headers; the LaTeX writer translates the symbols).
SWEEP_DIMS: dict[str, tuple[str, str]] = {
    "local_epochs": ("e", "E"),
    "join_ratio": ("j", "ρ"),
    "rounds": ("r", "R"),
    "batch_size": ("b", "B"),
    "lr": ("lr", "η"),
}
OPTION_LABELS: dict[str, str] = {"beta": "β", "eta_h": "η_h", "mu": "μ"}

BASE_COLUMNS = [
    "experiment", "setting", "dataset", "classes_per_client", "alpha", "clients", "assignment", "algorithm", "variant", "seed",
    "rounds", "local_epochs", "join_ratio", "batch_size", "lr", "options",
]
RESULT_COLUMNS = ["best_test_acc", "best_round", "final_test_acc", "last10_test_acc", "rounds_evaluated", "wall_time_s", "run_dir"]


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
