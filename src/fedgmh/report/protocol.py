"""How the runs of one of our cells differ from the paper's protocol (`protocol_differences`).

Two kinds of difference, each named with our value and the paper's:

- scale ("reduced protocol"): rounds, clients, local epochs, participation - the dimensions a
  smaller config shrinks (config/mini.yaml: 8 rounds, E = 1);
- recipe ("other protocol"): batch size, learning rate, the class assignment, and every resolved
  option of the engine and of the algorithm: the lr decay and its unit, drop_last, which rounds are
  evaluated, the evaluation prior, the method's own options.

The paper's values come from `fedgmh.report.paper` (the reference row, the rounds and clients, the
training defaults) and, for the options, from resolving the algorithm's defaults under a `reading`:
"paper" (the paper's text: every default) or "official" (PFLlib / the official code, as the
paper's authors ran it: what `--set preset=official` sets). Our runs' options are resolved the same
way from the `--set` values they were trained with. Not part of the protocol: the options that
choose how a run is computed, not what (fedgmh.runspec.EXECUTION_OPTIONS), tf32 and numerics (float
precision on a GPU, which the paper does not fix) and the label `preset` itself (what it sets is compared).
Options a table sweeps (Table 6's beta) are matched with the reference row, not compared here.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedgmh.cards import PRESETS, resolve_options
from fedgmh.errors import UserError
from fedgmh.report.labels import SWEEP_DIMS, format_number
from fedgmh.report.paper import PAPER_BATCH_SIZE, PAPER_CLIENTS, PAPER_LR, PAPER_ROUNDS, PAPER_SEEDS, REFERENCE_DIMS
from fedgmh.filing import DEFAULT_ASSIGNMENT
from fedgmh.report.parsing import norm_name
from fedgmh.runspec import EXECUTION_OPTIONS

#: the readings of the paper's protocol (`--set preset=` values), in words
READINGS: dict[str, str] = {
    "paper": "the paper's text (every option at its default)",
    "official": "PFLlib's and the official code's (`preset=official`: how the paper's authors ran it)",
}
#: resolved options that are not part of the protocol (see the module docstring)
NOT_PROTOCOL = EXECUTION_OPTIONS | {"tf32", "numerics", "preset"}
REDUCED, OTHER = "reduced protocol", "other protocol"


@dataclass(frozen=True)
class Differences:
    """A cell's differences from the paper's protocol, in words, and how many seeds it has if not the paper's."""

    scale: tuple[str, ...] = ()
    recipe: tuple[str, ...] = ()
    seeds: str = ""

    @property
    def status(self) -> str | None:
        """'other protocol' (a recipe difference), 'reduced protocol' (scale only), None (the paper's protocol)."""
        return OTHER if self.recipe else REDUCED if self.scale else None

    def text(self) -> str:
        return ", ".join([*self.scale, *self.recipe, *([self.seeds] if self.seeds else [])])


def check_reading(reading: str) -> None:
    if reading not in READINGS:
        raise UserError(f"reading {reading!r}: choose one of {', '.join(READINGS)}")


def cell_numbers(value: Any) -> list[float]:
    """A cell's value of a run field: one number, several joined by '/' (its runs differ), or none (unknown)."""
    parts = value.split("/") if isinstance(value, str) else [value]
    try:
        numbers = [float(part) for part in parts if part is not None and str(part).strip() != ""]
    except (TypeError, ValueError):
        return []
    return [n for n in numbers if not math.isnan(n)]


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else format_number(value)


def _same(ours: Any, paper: Any) -> bool:
    if isinstance(ours, (bool, str)) or isinstance(paper, (bool, str)):
        return ours == paper
    return bool(np.isclose(float(ours), float(paper), rtol=1e-9, atol=1e-12))


def _field(values: list[float], paper: float, words: str) -> str | None:
    """'<values> <words> (paper <paper>)' where the values differ from the paper's; None where they match.
    `words` holds `{}` where the value goes: '{} rounds', 'E={}'."""
    if not values:
        return f"{words.format('?')} (paper {format_number(paper)}; not recorded)"
    if all(_same(v, paper) for v in values):
        return None
    return f"{words.format('/'.join(format_number(v) for v in values))} (paper {format_number(paper)})"


def resolved_protocol(algorithm: str, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Every protocol option of `algorithm` trained with these `--set` values, resolved as `fedgmh train` does."""
    algo, engine = resolve_options(algorithm, dict(overrides))
    values = {**dataclasses.asdict(algo), **dataclasses.asdict(engine)}
    return {key: value for key, value in values.items() if key not in NOT_PROTOCOL}


def cell_option_sets(cell: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The distinct `--set` values of the cell's runs (`summarize`'s `options`: a JSON list), None when unknown."""
    raw = cell.get("options")
    if not isinstance(raw, str) or not raw:
        return None
    sets = json.loads(raw)
    return sets if isinstance(sets, list) and all(isinstance(s, dict) for s in sets) else None


def _option_differences(cell: Mapping[str, Any], ref: Mapping[str, Any], swept: Sequence[str], reading: str) -> list[str]:
    sets = cell_option_sets(cell)
    if sets is None:
        return ["options not recorded"]
    algorithm = str(cell["algorithm"])
    paper = resolved_protocol(algorithm, {"preset": reading})
    for dim in REFERENCE_DIMS:  # the reference row's beta and eta_h are the paper's values of those options
        if dim in paper and dim not in swept and dim in ref and not _missing(ref[dim]):
            paper[dim] = float(ref[dim])
    ours: dict[str, list[Any]] = {}
    for overrides in sets:
        try:
            resolved = resolved_protocol(algorithm, overrides)
        except UserError as err:
            raise UserError(f"cell {cell.get('experiment', '')} {cell.get('setting', '')} {algorithm}: its runs' options {overrides} "
                            f"do not resolve ({err})") from None
        for key, value in resolved.items():
            if key not in swept and value not in ours.setdefault(key, []):
                ours[key].append(value)
    notes = []
    for key, values in ours.items():
        if key in paper and not all(_same(v, paper[key]) for v in values):
            notes.append(f"{key}={'/'.join(_text(v) for v in values)} (paper {_text(paper[key])})")
    return notes


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or value == ""


def protocol_differences(cell: Mapping[str, Any], ref: Mapping[str, Any], swept: Sequence[str], reading: str = "paper") -> Differences:
    """How `cell` (a row of `summarize`) differs from the paper's protocol of reference row `ref`,
    outside the dimensions `swept` that the row's table varies (the reference's column names)."""
    check_reading(reading)
    dataset = norm_name(cell["dataset"])
    if dataset not in PAPER_ROUNDS:
        raise UserError(f"the paper's number of rounds on {cell['dataset']} is not known (fedgmh.report.paper.PAPER_ROUNDS)")
    scale = [
        _field(cell_numbers(cell.get("rounds")), PAPER_ROUNDS[dataset], "{} rounds"),
        _field(cell_numbers(cell.get("clients")), PAPER_CLIENTS, "{} clients"),
        *(_field(cell_numbers(cell.get(column)), float(ref[column]), f"{SWEEP_DIMS[column][1]}={{}}")
          for column in ("local_epochs", "join_ratio") if column not in swept and column in ref and not _missing(ref[column])),
    ]
    recipe = [
        _field(cell_numbers(cell.get("batch_size")), PAPER_BATCH_SIZE, "batch {}"),
        _field(cell_numbers(cell.get("lr")), PAPER_LR, "lr {}"),
        None if cell.get("assignment", DEFAULT_ASSIGNMENT) == DEFAULT_ASSIGNMENT else f"{cell['assignment']} class assignment (paper ExDir)",
        *_option_differences(cell, ref, swept, reading),
    ]
    n_seeds = int(cell.get("n_seeds") or 0)
    seeds = "" if n_seeds == PAPER_SEEDS else f"{n_seeds} seed{'s' if n_seeds != 1 else ''} (paper {PAPER_SEEDS})"
    return Differences(tuple(n for n in scale if n), tuple(n for n in recipe if n), seeds)
