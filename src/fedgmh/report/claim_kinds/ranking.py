"""ranking: methods `above` are more accurate than methods `below` (docs/claims.md, "ranking")."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

from fedgmh.cards import algorithm_name
from fedgmh.report import claims
from fedgmh.report.claim_kinds import ClaimKind, Comparison, Need, check_cell, check_names, fail, not_run, split_cell

SIDES = ("above", "below")


def check(where: str, spec: dict[str, Any]) -> dict[str, Any]:
    for side in SIDES:
        if not (isinstance(spec[side], dict) and spec[side]):
            raise fail(where, f"{side} must map cells '<experiment>/<setting id>' to lists of algorithms")
        spec[side] = {check_cell(where, cell, side): check_names(where, algs, f"{side}.{cell}") for cell, algs in spec[side].items()}
    both = sorted({(cell, alg) for cell, algs in spec["above"].items() for alg in algs}
                  & {(cell, alg) for cell, algs in spec["below"].items() for alg in algs})
    if both:
        raise fail(where, f"{both[0][1]} in {both[0][0]} is both above and below: a method is not ranked against itself")
    if "minus" in spec:
        check_cell(where, spec["minus"], "minus")
    return spec


def needs(spec: Mapping[str, Any]) -> list[Need]:
    found = [Need(*split_cell(cell), alg) for side in SIDES for cell, algs in spec[side].items() for alg in algs]
    if "minus" in spec:
        found += [Need(*split_cell(spec["minus"]), need.algorithm) for need in list(found)]
    return found


def comparisons(spec: Mapping[str, Any], runs: Any, _rules: claims.Rules) -> list[Comparison]:
    sides = [[Need(*split_cell(cell), alg) for cell, algs in spec[side].items() for alg in algs] for side in SIDES]
    # within each cell both sides name (e.g. per dataset); sides without a common cell: every pair
    common = {a.cell for a in sides[0]} & {b.cell for b in sides[1]}
    pairs = [(a, b) for a in sides[0] for b in sides[1] if a != b and (a.cell == b.cell or not common)]
    found = []
    for a, b in pairs:
        name_a, name_b = algorithm_name(a.algorithm), algorithm_name(b.algorithm)
        label = f"{name_a} > {name_b} ({a.cell})" if a.cell == b.cell else f"{name_a} ({a.cell}) > {name_b} ({b.cell})"
        wanted = [a, b]
        if "minus" in spec:
            label = f"gain over {spec['minus']}: {label}"
            wanted += [Need(*split_cell(spec["minus"]), a.algorithm), Need(*split_cell(spec["minus"]), b.algorithm)]
        missing = [need for need in wanted if not runs.has(need)]
        if missing:
            found.append(not_run(label, missing))
            continue
        values = [runs.cell(need) for need in wanted]
        if "minus" in spec:  # each seed's gain over the same method's accuracy in the `minus` cell
            values = [{s: v[s] - base[s] for s in sorted(set(v) & set(base))} for v, base in zip(values[:2], values[2:])]
        found.append(partial(claims.ranking, label, values[0], values[1]))
    return found


KINDS = (ClaimKind("ranking", frozenset(SIDES), frozenset({"minus"}), check, needs, comparisons),)
