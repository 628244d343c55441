"""Claim kinds: what a claim's `test` names, each declared in one module of this package.

A module `fedgmh/report/claim_kinds/<family>.py` declares its kinds in `KINDS` (a `ClaimKind` each;
trend and bound share `sweep.py`): the fields a claim of the kind takes and their check, the cells
and curves it reads (`needs`), and the comparisons it makes on the runs, each decided by a rule of
`fedgmh.report.claims`. `claim_kinds()` collects them as `fedgmh.cards` collects the algorithm
cards, so a new kind is one module (docs/claims.md, "Adding a claim kind"). Here too the building
blocks the kinds share: cells, the field checks, the not-run comparison. No pandas: the workflow
reads the claims file while it builds its DAG (`fedgmh.report.artifacts.paper.claim_experiments`).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, NamedTuple

from fedgmh.declarations import collect, module_names
from fedgmh.errors import UserError
from fedgmh.report.claims import MIN_SEEDS, NOT_RUN, Part, Rules
from fedgmh.report.parsing import is_percent_target

#: the fields every claim has, besides its kind's
COMMON = frozenset({"id", "where", "claim", "test", "note"})
CELL = re.compile(r"(?P<experiment>[a-z][a-z0-9_]*)/(?P<setting>[^/\s]+)")
NAME = re.compile(r"[a-z][a-z0-9_]*")
#: one comparison of a claim, made at the level that refutes it
Comparison = Callable[[float], Part]


class Need(NamedTuple):
    """A cell's runs (`curve` False: their accuracies) or their per-round curves (`curve` True)."""

    experiment: str
    setting: str
    algorithm: str
    curve: bool = False

    @property
    def cell(self) -> str:
        return f"{self.experiment}/{self.setting}"


def split_cell(text: str) -> tuple[str, str]:
    match = CELL.fullmatch(text)
    return match["experiment"], match["setting"]


def _reads_no_rule(spec: Mapping[str, Any]) -> frozenset[str]:
    return frozenset()


def _fewest_seeds(spec: Mapping[str, Any]) -> int:
    return MIN_SEEDS


@dataclass(frozen=True)
class ClaimKind:
    """One kind of claim (`test: <name>` in the claims file) and everything it does."""

    name: str
    #: the fields a claim of this kind must have, and those it may have, besides COMMON
    required: frozenset[str]
    optional: frozenset[str]
    #: (where, fields) -> the fields checked and normalised (lists where a list is meant, floats for
    #: numbers); a `fail(where, ...)` naming the field otherwise
    check: Callable[[str, dict[str, Any]], dict[str, Any]]
    #: checked fields -> every cell or curve the claim reads, in the file's order (`Claim.needs` drops repeats)
    needs: Callable[[Mapping[str, Any]], list[Need]]
    #: (checked fields, runs, rules) -> the claim's comparisons, on the runs of
    #: `fedgmh.report.claims_report.Runs` under the rules' open choices
    comparisons: Callable[[Mapping[str, Any], Any, Rules], list[Comparison]]
    #: checked fields -> the `Rules` fields its verdicts read (the rule alternatives the robustness
    #: check re-decides it under)
    rules: Callable[[Mapping[str, Any]], frozenset[str]] = _reads_no_rule
    #: checked fields -> the fewest seeds per cell at which its comparisons can be decided (what
    #: `fedgmh campaign status` waits for before it counts the claim as decidable)
    seeds: Callable[[Mapping[str, Any]], int] = _fewest_seeds
    #: a computation, not a measurement: its verdicts have no alternative (robustness: exact)
    exact: bool = False

    def __post_init__(self) -> None:
        where = f"claim kind {self.name!r}"
        if not (isinstance(self.name, str) and NAME.fullmatch(self.name)):
            raise ValueError(f"{where}: a name is lower-case letters, digits and _")
        if not all(isinstance(f, frozenset) for f in (self.required, self.optional)):
            raise ValueError(f"{where}: required and optional are frozensets of field names")
        shared = sorted((self.required & self.optional) | ((self.required | self.optional) & COMMON))
        if shared:
            raise ValueError(f"{where}: field(s) {', '.join(shared)} declared twice (required, optional or common to every claim)")
        missing = [f.name for f in fields(self) if f.name in ("check", "needs", "comparisons", "rules", "seeds")
                   and not callable(getattr(self, f.name))]
        if missing:
            raise ValueError(f"{where} lacks {', '.join(missing)} (each a function)")


def family_names() -> list[str]:
    """The kind modules of this package."""
    return module_names(__path__)


@functools.cache
def _kinds_on(path: tuple[str, ...]) -> dict[str, ClaimKind]:
    return dict(sorted(collect(__name__, path, "KINDS", ClaimKind, "claim kind").items()))


def claim_kinds() -> dict[str, ClaimKind]:
    """Every claim kind by name (sorted), found in the modules of this package."""
    return _kinds_on(tuple(__path__))


# ----------------------------------------------------------------------------- the field checks


def fail(where: str, message: str) -> UserError:
    return UserError(f"{where}: {message} (format: docs/claims.md)")


def check_names(where: str, value: Any, field: str) -> list[str]:
    if not (isinstance(value, list) and value and all(isinstance(v, str) and v for v in value)):
        raise fail(where, f"{field} must be a non-empty list of algorithm names")
    return value


def check_cell(where: str, value: Any, field: str) -> str:
    if not (isinstance(value, str) and CELL.fullmatch(value)):
        raise fail(where, f"{field} {value!r} is not a cell '<experiment>/<setting id>', e.g. table2/cifar100_c5_a0.5")
    return value


def check_number(where: str, value: Any, field: str, positive: bool = False, percent: bool = False) -> float:
    """A finite number (`positive`: > 0; `percent`: an accuracy in percent, in (0, 100]); a NaN target,
    threshold or tolerance would decide every comparison made with it."""
    finite = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not finite or positive and value <= 0 or percent and not is_percent_target(value):
        what = "an accuracy in percent, in (0, 100]" if percent else f"a finite {'positive ' if positive else ''}number"
        raise fail(where, f"{field} must be {what}, got {value!r}")
    return float(value)


def check_points(where: str, value: Any) -> dict[float, str]:
    """`points`: at least 2 parameter values, each mapped to a cell."""
    if not (isinstance(value, dict) and len(value) >= 2):
        raise fail(where, "points must map at least 2 parameter values to cells '<experiment>/<setting id>'")
    return {check_number(where, x, "a points value"): check_cell(where, c, f"points.{x}") for x, c in value.items()}


# ----------------------------------------------------------------------------- comparisons


def decided(part: Part) -> Comparison:
    """A comparison whose verdict no level changes (not run; rounds to a target: a rule, not a test)."""
    return lambda _level: part


def not_run(label: str, needs: Sequence[Need]) -> Comparison:
    return decided(Part(label, NOT_RUN, "no runs of " + "; ".join(f"{n.cell} {n.algorithm}" for n in needs)))
