"""rounds: the rounds a method takes to reach a target accuracy (docs/claims.md, "rounds")."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

from fedgmh.cards import algorithm_name
from fedgmh.report import claims
from fedgmh.report.claim_kinds import (
    ClaimKind, Comparison, Need, check_cell, check_names, check_number, check_points, decided, fail, not_run, split_cell,
)
from fedgmh.report.labels import format_number

#: exactly one per rounds claim (`earlier` with `later`, `after` and `points` with `algorithms`; all but `points` with `curves`)
FORMS = ("paper", "after", "earlier", "points")


def check(where: str, spec: dict[str, Any]) -> dict[str, Any]:
    spec["target"] = check_number(where, spec["target"], "target", percent=True)
    forms = [form for form in FORMS if form in spec]
    paired = ("later" in spec) == ("earlier" in spec) and ("algorithms" in spec) == ("after" in spec or "points" in spec)
    if len(forms) != 1 or not paired or ("curves" in spec) == ("points" in spec):
        raise fail(where, "a rounds claim has exactly one of: curves with paper {algorithm: round}, with earlier + later or "
                          "with after + algorithms; points {value: cell} + algorithms")
    if "curves" in spec:
        check_cell(where, spec["curves"], "curves")
    if "paper" in spec:
        if not (isinstance(spec["paper"], dict) and spec["paper"]):
            raise fail(where, "paper must map algorithms to the paper's rounds")
        spec["paper"] = {str(alg): check_number(where, r, f"paper.{alg}", positive=True) for alg, r in spec["paper"].items()}
    elif "after" in spec:
        spec["after"] = check_number(where, spec["after"], "after", positive=True)
        check_names(where, spec["algorithms"], "algorithms")
    elif "points" in spec:
        spec["points"] = check_points(where, spec["points"])
        check_names(where, spec["algorithms"], "algorithms")
    else:
        check_names(where, spec["earlier"], "earlier")
        check_names(where, spec["later"], "later")
    return spec


def algorithms(spec: Mapping[str, Any]) -> list[str]:
    """The algorithms a rounds claim reads, in its order."""
    if "paper" in spec:
        return list(spec["paper"])
    if "after" in spec or "points" in spec:
        return list(spec["algorithms"])
    return list(dict.fromkeys([*spec["earlier"], *spec["later"]]))


def needs(spec: Mapping[str, Any]) -> list[Need]:
    if "points" in spec:
        return [Need(*split_cell(cell), alg, True) for alg in spec["algorithms"] for cell in spec["points"].values()]
    return [Need(*split_cell(spec["curves"]), alg, True) for alg in algorithms(spec)]


def comparisons(spec: Mapping[str, Any], runs: Any, rules: claims.Rules) -> list[Comparison]:
    target = spec["target"]
    if "points" in spec:
        return _over_points(spec, runs)
    experiment, setting = split_cell(spec["curves"])
    need = {alg: Need(experiment, setting, alg, True) for alg in algorithms(spec)}
    reached = {alg: runs.first_rounds(need[alg], target) for alg in need}
    found, at = [], f"{format_number(target)} %"
    if "paper" in spec:
        for alg, paper in spec["paper"].items():
            label = f"{algorithm_name(alg)} reaches {at} at round {format_number(paper)}"
            found.append(not_run(label, [need[alg]]) if reached[alg] is None else
                         decided(claims.rounds_value(label, *reached[alg], paper, rules.prediction, rules.tolerance)))
    elif "after" in spec:
        for alg in spec["algorithms"]:
            label = f"{algorithm_name(alg)} reaches {at} only after round {format_number(spec['after'])}"
            found.append(not_run(label, [need[alg]]) if reached[alg] is None else
                         partial(claims.rounds_after, label, *reached[alg], spec["after"]))
    else:
        for a in spec["earlier"]:
            for b in (b for b in spec["later"] if b != a):
                label = f"{algorithm_name(a)} reaches {at} before {algorithm_name(b)}"
                missing = [need[alg] for alg in (a, b) if reached[alg] is None]
                found.append(not_run(label, missing) if missing else partial(claims.rounds_order, label, reached[a], reached[b]))
    return found


def _over_points(spec: Mapping[str, Any], runs: Any) -> list[Comparison]:
    """rounds with `points`: per algorithm, the target reached sooner at the last point than at the first."""
    (x0, first), (x1, last) = min(spec["points"].items()), max(spec["points"].items())
    parameter = spec.get("parameter", "the parameter")
    found = []
    for alg in spec["algorithms"]:
        label = (f"{algorithm_name(alg)} reaches {format_number(spec['target'])} % sooner at {parameter} = {format_number(x1)} "
                 f"than at {format_number(x0)}")
        wanted = [Need(*split_cell(last), alg, True), Need(*split_cell(first), alg, True)]
        reached = [runs.first_rounds(need, spec["target"]) for need in wanted]
        missing = [need for need, r in zip(wanted, reached) if r is None]
        found.append(not_run(label, missing) if missing else partial(claims.rounds_order, label, *reached))
    return found


def rules(spec: Mapping[str, Any]) -> frozenset[str]:
    """A paper's round is held against a prediction interval and a tolerance."""
    return frozenset({"prediction", "tolerance"}) if "paper" in spec else frozenset()


def seeds(spec: Mapping[str, Any]) -> int:
    """Which comes first (`earlier`, `points`) and only after a round (`after`) are sign tests: they
    cannot decide on fewer than SIGN_SEEDS."""
    return claims.SIGN_SEEDS if "earlier" in spec or "points" in spec or "after" in spec else claims.MIN_SEEDS


KINDS = (ClaimKind("rounds", frozenset({"target"}),
                   frozenset({"curves", "paper", "earlier", "later", "after", "algorithms", "points", "parameter"}),
                   check, needs, comparisons, rules, seeds),)
