"""Declarations collected from the modules of a package: the algorithm cards (`fedgmh.cards`), the
claim kinds (`fedgmh.report.claim_kinds`) and the report artifacts (`fedgmh.report.artifacts`) are
each a tuple in one module per family, found by listing the package, so that adding one is adding a
module."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterable
from typing import Any


def module_names(path: Iterable[str]) -> list[str]:
    """The modules of a package's `__path__`, those starting with _ left out."""
    return sorted(module.name for module in pkgutil.iter_modules(list(path)) if not module.name.startswith("_"))


def collect(package: str, path: Iterable[str], attribute: str, kind: type, what: str,
            check: Callable[[str, Any], None] | None = None) -> dict[str, Any]:
    """name -> declaration, from `attribute` (a non-empty tuple of `kind`) of every module of `package`,
    in module order; `check(module name, declaration)` raises on a misplaced one. A name declared
    twice is refused."""
    found: dict[str, Any] = {}
    for family in module_names(path):
        module = importlib.import_module(f"{package}.{family}")
        declared = getattr(module, attribute, None)
        if not (isinstance(declared, tuple) and declared and all(isinstance(item, kind) for item in declared)):
            raise ValueError(f"{module.__name__} declares no {attribute}: a non-empty tuple of {kind.__name__}")
        for item in declared:
            if check is not None:
                check(family, item)
            if item.name in found:
                raise ValueError(f"{what} {item.name!r} is declared twice")
            found[item.name] = item
    return found
