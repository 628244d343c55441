"""Algorithms, found by name through `get_algorithm`.

Every module of this package is imported here, so an algorithm registers itself (`@register`)
just by living in a module of this folder.
"""

import importlib
import pkgutil

from fedgmh.algorithms.base import REGISTRY, Algorithm, get_algorithm, register

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["REGISTRY", "Algorithm", "get_algorithm", "register"]
