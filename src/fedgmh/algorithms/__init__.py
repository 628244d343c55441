"""Algorithm behaviour: one class per algorithm, named by its card.

The card of an algorithm (`fedgmh.cards.<family>`) holds its facts and names its class as
"fedgmh.algorithms.<family>:<Class>"; `get_algorithm` imports that class on first use and binds it
to the card's name (`Algorithm.name`), so a class needs no registration of its own.
"""

from __future__ import annotations

import importlib
import inspect

from fedgmh.algorithms.base import Algorithm, Exchange
from fedgmh.cards import algorithm_names, card


def get_algorithm(name: str) -> type[Algorithm]:
    """The class of algorithm `name` (a `UserError` for an unknown name)."""
    module, _, class_name = card(name).algorithm.partition(":")
    cls = getattr(importlib.import_module(module), class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, Algorithm)):
        raise ValueError(f"the card of {name!r} names {card(name).algorithm!r}, which is not an Algorithm class")
    if inspect.isabstract(cls):
        missing = ", ".join(sorted(cls.__abstractmethods__))
        raise ValueError(f"class {card(name).algorithm} of algorithm {name!r} lacks the hooks every algorithm defines: {missing}")
    bound = vars(cls).get("name")
    if bound is None:
        cls.name = name
    elif bound != name:
        raise ValueError(f"class {card(name).algorithm} is named by the cards of both {bound!r} and {name!r}: give each its own class")
    return cls


def algorithm_classes() -> dict[str, type[Algorithm]]:
    """Every algorithm's class by name (imports every algorithm module)."""
    return {name: get_algorithm(name) for name in algorithm_names()}


__all__ = ["Algorithm", "Exchange", "algorithm_classes", "get_algorithm"]
