"""trend and bound: accuracy over a swept parameter's `points` (docs/claims.md, "trend" and "bound").

A trend claims accuracy rises (falls) with the parameter; a bound, that the parameter has little
effect. Both make one comparison per algorithm over the points, tested on the points run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from fedgmh.cards import algorithm_name
from fedgmh.report import claims
from fedgmh.report.claim_kinds import (
    ClaimKind, Comparison, Need, check_names, check_number, check_points, fail, not_run, split_cell,
)

DIRECTIONS = ("increasing", "decreasing")


def _check_points(where: str, spec: dict[str, Any]) -> dict[str, Any]:
    spec["points"] = check_points(where, spec["points"])
    check_names(where, spec["algorithms"], "algorithms")
    return spec


def check_trend(where: str, spec: dict[str, Any]) -> dict[str, Any]:
    _check_points(where, spec)
    if spec["direction"] not in DIRECTIONS:
        raise fail(where, f"direction must be one of {', '.join(DIRECTIONS)}")
    return spec


def check_bound(where: str, spec: dict[str, Any]) -> dict[str, Any]:
    _check_points(where, spec)
    spec["tolerance"] = check_number(where, spec["tolerance"], "tolerance", positive=True)
    return spec


def needs(spec: Mapping[str, Any]) -> list[Need]:
    return [Need(*split_cell(cell), alg) for alg in spec["algorithms"] for cell in spec["points"].values()]


def _partly_run(compare: Comparison, run: int, points: int, level: float) -> claims.Part:
    """A trend or bound tested on `run` of its `points`: at best inconclusive."""
    part = compare(level)
    verdict = claims.INCONCLUSIVE if part.verdict == claims.HOLDS else part.verdict
    return dataclasses.replace(part, verdict=verdict, evidence=f"{run} of {points} points run: {part.evidence}")


def _over_points(rule: Callable[[str, list], Comparison], spec: Mapping[str, Any], runs: Any) -> list[Comparison]:
    """One comparison per algorithm over the claim's points; `rule(label, points run)` makes it."""
    parameter = spec.get("parameter", "the parameter")
    found: list[Comparison] = []
    for alg in spec["algorithms"]:
        label = f"{algorithm_name(alg)} over {parameter}"
        wanted = {x: Need(*split_cell(cell), alg) for x, cell in spec["points"].items()}
        present = [(x, runs.cell(need)) for x, need in wanted.items() if runs.has(need)]
        missing = [need for need in wanted.values() if not runs.has(need)]
        # the claim's own table: the experiment most of its points are in (a point borrowed from Table 2 is not it)
        experiments = [need.experiment for need in wanted.values()]
        own = max(dict.fromkeys(experiments), key=experiments.count)
        if not any(runs.has(need) for need in wanted.values() if need.experiment == own) or len(present) < 2:
            found.append(not_run(label, missing))
            continue
        compare = rule(label, present)
        found.append(partial(_partly_run, compare, len(present), len(wanted)) if missing else compare)
    return found


def trend_comparisons(spec: Mapping[str, Any], runs: Any, _rules: claims.Rules) -> list[Comparison]:
    increasing = spec["direction"] == "increasing"
    return _over_points(lambda label, present: partial(claims.trend, label, present, increasing), spec, runs)


def bound_comparisons(spec: Mapping[str, Any], runs: Any, _rules: claims.Rules) -> list[Comparison]:
    return _over_points(lambda label, present: partial(claims.bound, label, present, spec["tolerance"]), spec, runs)


KINDS = (
    ClaimKind("trend", frozenset({"points", "algorithms", "direction"}), frozenset({"parameter"}), check_trend, needs,
              trend_comparisons),
    ClaimKind("bound", frozenset({"points", "algorithms", "tolerance"}), frozenset({"parameter"}), check_bound, needs,
              bound_comparisons),
)
