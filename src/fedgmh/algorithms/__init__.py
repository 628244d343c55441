"""Algorithms, found by name through `get_algorithm`.

Every module of this package is imported on first use of the registry (`REGISTRY`,
`get_algorithm`, `Algorithm`, `Exchange`, `register`), so an algorithm registers itself
(`@register`) just by living in a module of this folder. Its class holds its facts: display name,
row in the paper's tables, traffic per round; its options (`fedgmh.algorithms.options`) are read
without torch, so `resolve_options` and `option_rows` do not import the algorithm classes and
importing this package stays light (the workflow checks every run's options while it plans).
"""

import importlib
import pkgutil
from typing import Any

from fedgmh.algorithms import options
from fedgmh.algorithms.options import OPTION_SETS, option_rows, option_set, resolve_options

_REGISTRY_NAMES = ("REGISTRY", "Algorithm", "Exchange", "get_algorithm", "register")


def load_all() -> None:
    """Import every module of this package: each algorithm class registers itself."""
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")


options.load_registry = load_all  # an algorithm name the options do not know: ask the modules


def __getattr__(name: str) -> Any:
    if name not in _REGISTRY_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    load_all()
    from fedgmh.algorithms import base

    for public in _REGISTRY_NAMES:  # found as plain attributes from now on
        globals()[public] = getattr(base, public)
    return globals()[name]


__all__ = ["OPTION_SETS", "REGISTRY", "Algorithm", "Exchange", "get_algorithm", "load_all", "option_rows", "option_set", "register",
           "resolve_options"]
