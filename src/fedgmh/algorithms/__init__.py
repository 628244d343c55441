"""Algorithms, found by name through `get_algorithm`.

Every module of this package is imported here, so an algorithm registers itself (`@register`)
just by living in a module of this folder. The registry is the only source of an algorithm's facts:
its options, display name, row in the paper's tables and traffic per round live on its class.
"""

import importlib
import pkgutil

from fedgmh.algorithms.base import REGISTRY, Algorithm, Exchange, get_algorithm, register
from fedgmh.algorithms.options import option_rows, resolve_options

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["REGISTRY", "Algorithm", "Exchange", "get_algorithm", "option_rows", "register", "resolve_options"]
