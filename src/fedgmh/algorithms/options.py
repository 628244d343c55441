"""An algorithm's `--set` options: split between the algorithm and the engine, presets applied, listed."""

from __future__ import annotations

import dataclasses
from typing import Any, get_type_hints

from fedgmh.algorithms.base import get_algorithm
from fedgmh.config import EngineOptions, build_options, option_names
from fedgmh.errors import UserError

PRESETS = ("paper", "official")
PRESET_HELP = "paper text, or every official-code / PFLlib behaviour at once (explicit --set values still win)"


def resolve_options(algorithm: str, overrides: dict[str, Any]) -> tuple[Any, EngineOptions]:
    """Split `--set` values into (algorithm options, engine options), applying `preset` first."""
    cls = get_algorithm(algorithm)
    explicit = dict(overrides)
    preset = explicit.get("preset", "paper")
    if preset not in PRESETS:
        raise UserError(f"option preset={preset!r}: choose one of {', '.join(PRESETS)}")
    values = {**cls.defaults, **(cls.official if preset == "official" else {}), **explicit}
    algo_keys, engine_keys = option_names(cls.Options), option_names(EngineOptions)
    if "preset" not in algo_keys:
        values.pop("preset", None)
    unknown = set(values) - algo_keys - engine_keys
    if unknown:
        known = ", ".join(sorted(algo_keys | engine_keys | {"preset"}))
        raise UserError(f"unknown option(s) {', '.join(sorted(unknown))} for {algorithm}; known: {known}")
    algo = build_options(cls.Options, {k: v for k, v in values.items() if k in algo_keys})
    engine = build_options(EngineOptions, {k: v for k, v in values.items() if k in engine_keys})
    return algo, engine


def option_rows(algorithm: str) -> list[dict[str, Any]]:
    """Every option `--set` takes for `algorithm`: its own (with `preset`) first, then the engine's.

    Each row: name, scope (algorithm / engine), type, default (this algorithm's), official (the
    `preset=official` value when it differs from the default, else None), choices and help.
    """
    cls = get_algorithm(algorithm)
    rows = []
    for scope, options in (("algorithm", cls.Options), ("engine", EngineOptions)):
        hints = get_type_hints(options)
        for f in dataclasses.fields(options):
            default = cls.defaults.get(f.name, f.default) if scope == "algorithm" else f.default
            official = cls.official.get(f.name, default)
            rows.append({"name": f.name, "scope": scope, "type": hints[f.name].__name__, "default": default,
                         "official": None if official == default else official,
                         "choices": f.metadata.get("choices", ()), "help": f.metadata.get("help", "")})
        if scope == "algorithm" and "preset" not in option_names(options):
            rows.append({"name": "preset", "scope": "algorithm", "type": "str", "default": "paper", "official": None,
                         "choices": PRESETS, "help": PRESET_HELP})
    return rows
