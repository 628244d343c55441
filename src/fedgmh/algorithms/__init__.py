"""Algorithms, found by name through `get_algorithm` (importing this package registers them)."""

from fedgmh.algorithms import averaging, fedgmh  # noqa: F401  (registration side effects)
from fedgmh.algorithms.base import REGISTRY, Algorithm, get_algorithm, register

__all__ = ["REGISTRY", "Algorithm", "get_algorithm", "register"]
