"""Algorithm cards: every fact about an algorithm except its behaviour, read without torch.

A card names an algorithm (`--algorithm NAME`), its display name and row in the paper's tables, its
`--set` options (an options dataclass: the paper's text is every default; ranges and choices are
field metadata, checked when the options are built), the values its variant changes (`defaults`,
e.g. GMH-o's one head), its presets, and the class that holds its behaviour, as the string
"fedgmh.algorithms.<family>:<Class>". Each module `fedgmh/cards/<family>.py` holds the cards of one
family in `CARDS`, beside `fedgmh/algorithms/<family>.py` (matched by file name), so adding an
algorithm is one card and one class. The workflow plans, the CLI parses and the reports name
algorithms from the cards alone; only training and the cost model import the classes
(`fedgmh.algorithms.get_algorithm`). What each option means: docs/fedgmh.md and docs/baselines.md.

A preset (`--set preset=NAME`) sets several options at once, before the explicit `--set` values:
`paper` sets none, `official` the official code's / PFLlib's values (keys may be engine options,
e.g. drop_last; none where no such code exists), and a card may name others (pFedLA's `anchor`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, get_type_hints

from fedgmh.config import EngineOptions, RangedOptions, build_options, option_names
from fedgmh.declarations import collect, module_names
from fedgmh.errors import UserError, did_you_mean

#: the presets every algorithm takes
PRESETS = ("paper", "official")
PRESET_HELP = "paper text, or every official-code / PFLlib behaviour at once (explicit --set values still win)"

#: PFLlib's DataLoader drops each client's last partial batch (part of most `official` presets)
PFLLIB_LOADER = MappingProxyType({"drop_last": True})


@dataclass(frozen=True)
class NoOptions(RangedOptions):
    """An algorithm without options of its own."""


@dataclass(frozen=True)
class Card:
    """One algorithm's facts; `algorithm` is "fedgmh.algorithms.<family>:<Class>"."""

    name: str
    display_name: str
    algorithm: str
    #: position of its row in the paper's tables (None: after those that have one, by name)
    paper_row: int | None = None
    options: type = NoOptions
    #: the values this variant changes from the options' defaults
    defaults: Mapping[str, Any] = field(default_factory=dict)
    #: what each preset other than `paper` sets (`official` may be absent: it then sets nothing)
    presets: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def preset_names(self) -> tuple[str, ...]:
        return (*PRESETS, *(name for name in self.presets if name not in PRESETS))

    def preset(self, name: str) -> Mapping[str, Any]:
        """The values preset `name` sets."""
        if name not in self.preset_names():
            raise UserError(f"option preset={name!r}: choose one of {', '.join(self.preset_names())}")
        return self.presets.get(name, {})

    def resolve(self, overrides: Mapping[str, Any]) -> tuple[Any, EngineOptions]:
        """Split `--set` values into (algorithm options, engine options): the variant's defaults,
        then the preset's values, then the explicit ones."""
        explicit = dict(overrides)
        values = {**self.defaults, **self.preset(explicit.get("preset", "paper")), **explicit}
        algo_keys, engine_keys = option_names(self.options), option_names(EngineOptions)
        if "preset" not in algo_keys:  # recorded only where the options have it (run keys of committed records)
            values.pop("preset", None)
        unknown = set(values) - algo_keys - engine_keys
        if unknown:
            known = ", ".join(sorted(algo_keys | engine_keys | {"preset"}))
            hints = "".join(did_you_mean(name, algo_keys | engine_keys | {"preset"}) for name in sorted(unknown))
            raise UserError(f"unknown option(s) {', '.join(sorted(unknown))} for {self.name}{hints}; known: {known}")
        algo = build_options(self.options, {k: v for k, v in values.items() if k in algo_keys})
        engine = build_options(EngineOptions, {k: v for k, v in values.items() if k in engine_keys})
        return algo, engine

    def option_rows(self) -> list[dict[str, Any]]:
        """Every option `--set` takes: the algorithm's own (with `preset`) first, then the engine's.

        Each row: name, scope (algorithm / engine), type, default (this variant's), official (the
        `preset=official` value when it differs from the default, else None), choices, range (in
        words, '' when none) and help.
        """
        official = self.preset("official")
        rows = []
        for scope, fields_of in (("algorithm", self.options), ("engine", EngineOptions)):
            hints = get_type_hints(fields_of)
            for f in dataclasses.fields(fields_of):
                default = self.defaults.get(f.name, f.default) if scope == "algorithm" else f.default
                value = official.get(f.name, default)
                limits = f.metadata.get("range")
                rows.append({"name": f.name, "scope": scope, "type": hints[f.name].__name__, "default": default,
                             "official": None if value == default else value, "choices": f.metadata.get("choices", ()),
                             "range": limits.requirement(hints[f.name] is int) if limits else "",
                             "help": f.metadata.get("help", "")})
            if scope == "algorithm" and "preset" not in option_names(fields_of):
                rows.append({"name": "preset", "scope": "algorithm", "type": "str", "default": "paper", "official": None,
                             "choices": self.preset_names(), "range": "", "help": PRESET_HELP})
        return rows


def family_names() -> list[str]:
    """The card modules of this package (one per algorithm family)."""
    return module_names(__path__)


def _check_family(family: str, card: Card) -> None:
    if not card.algorithm.startswith(f"fedgmh.algorithms.{family}:"):
        raise ValueError(f"card {card.name!r} in {__name__}.{family} names {card.algorithm!r}: its class belongs in "
                         f"fedgmh.algorithms.{family}")


@functools.cache
def _cards_on(path: tuple[str, ...]) -> dict[str, Card]:
    return collect(__name__, path, "CARDS", Card, "algorithm card", _check_family)


def all_cards() -> dict[str, Card]:
    """Every card by algorithm name, found in the modules of this package."""
    return _cards_on(tuple(__path__))


def card(name: str) -> Card:
    cards = all_cards()
    if name not in cards:
        raise UserError(f"unknown algorithm {name!r}{did_you_mean(name, cards)}; available: {', '.join(sorted(cards))}")
    return cards[name]


def algorithm_names() -> list[str]:
    return sorted(all_cards())


def algorithm_order() -> list[str]:
    """The algorithms in the paper's row order (their `paper_row`; those without one after the others, by name)."""
    cards = all_cards()
    return sorted(cards, key=lambda name: (cards[name].paper_row is None, cards[name].paper_row or 0, name))


def algorithm_name(algorithm: str) -> str:
    """The display name of an algorithm; any other name unchanged."""
    found = all_cards().get(algorithm)
    return found.display_name if found else algorithm


def resolve_options(algorithm: str, overrides: Mapping[str, Any]) -> tuple[Any, EngineOptions]:
    """`--set` values of a run of `algorithm` -> (algorithm options, engine options)."""
    return card(algorithm).resolve(overrides)


def option_rows(algorithm: str) -> list[dict[str, Any]]:
    return card(algorithm).option_rows()
