"""convergence: a measure of how a curve ends, against a threshold (docs/claims.md, "convergence")."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

from fedgmh.cards import algorithm_name
from fedgmh.report import claims
from fedgmh.report.claim_kinds import ClaimKind, Comparison, Need, check_cell, check_names, check_number, fail, not_run, split_cell

MEASURES = ("fluctuation", "relative_fluctuation", "not_converged")
RELATIVE = ("relative_fluctuation", "not_converged")  # the measures that need a `reference`
EXPECT = ("above", "below")
DEFAULT_LAST = 20  # evaluated rounds that make "the end of a curve"


def check(where: str, spec: dict[str, Any]) -> dict[str, Any]:
    curves = spec["curves"] if isinstance(spec["curves"], list) else [spec["curves"]]
    spec["curves"] = [check_cell(where, cell, "curves") for cell in curves]
    check_names(where, spec["algorithms"], "algorithms")
    if spec["measure"] not in MEASURES:
        raise fail(where, f"measure must be one of {', '.join(MEASURES)}")
    spec["threshold"] = check_number(where, spec["threshold"], "threshold", positive=True)
    last = spec.setdefault("last", DEFAULT_LAST)
    if isinstance(last, bool) or not isinstance(last, int) or last < 2:
        raise fail(where, f"last must be a whole number of rounds >= 2, got {last!r}")
    if spec.setdefault("expect", "above") not in EXPECT:
        raise fail(where, f"expect must be one of {', '.join(EXPECT)}")
    _check_reference(where, spec)
    return spec


def _check_reference(where: str, spec: dict[str, Any]) -> None:
    """A relative measure's `reference`: an algorithm (on the same cells and seeds), or a mapping of
    each of the claim's `curves` to another cell (the same algorithm there); no reference otherwise."""
    if (spec["measure"] in RELATIVE) != ("reference" in spec):
        raise fail(where, f"a reference goes with the measures {', '.join(RELATIVE)}, and they need one")
    if "reference" not in spec:
        return
    reference = spec["reference"]
    if isinstance(reference, dict):
        if set(reference) != set(spec["curves"]):
            raise fail(where, "reference must map each of the claim's curves to a cell, or name an algorithm")
        spec["reference"] = {cell: check_cell(where, other, f"reference.{cell}") for cell, other in reference.items()}
    elif not (isinstance(reference, str) and reference):
        raise fail(where, "reference must name an algorithm or map each of the claim's curves to a cell")


def reference_need(spec: Mapping[str, Any], need: Need) -> Need:
    """The curve a relative measure of `need` is held against: the reference algorithm in the same
    cell, or the same algorithm in the reference cell."""
    reference = spec["reference"]
    if isinstance(reference, str):
        return Need(need.experiment, need.setting, reference, True)
    return Need(*split_cell(reference[need.cell]), need.algorithm, True)


def needs(spec: Mapping[str, Any]) -> list[Need]:
    found = [Need(*split_cell(cell), alg, True) for cell in spec["curves"] for alg in spec["algorithms"]]
    return found + [reference_need(spec, need) for need in list(found) if "reference" in spec]


def _not_converged(label: str, curve: claims.Curve, reference: claims.Curve, last: int, factor: float, rise_last: int,
                   level: float) -> claims.Part:
    return claims.not_converged(label, curve, reference, last, factor, rise_last, against_alpha=level)


def comparisons(spec: Mapping[str, Any], runs: Any, rules: claims.Rules) -> list[Comparison]:
    found = []
    for cell in spec["curves"]:
        for alg in spec["algorithms"]:
            need = Need(*split_cell(cell), alg, True)
            other = reference_need(spec, need) if "reference" in spec else None
            label = f"{algorithm_name(need.algorithm)} ({need.cell})" + (
                f" against {algorithm_name(other.algorithm)} ({other.cell})" if other else "")
            missing = [n for n in (need, other) if n is not None and not runs.has(n)]
            if missing:
                found.append(not_run(label, missing))
            elif spec["measure"] == "not_converged":
                found.append(partial(_not_converged, label, runs.seed_curves(need), runs.seed_curves(other),
                                     rules.window or spec["last"], spec["threshold"], rules.rise_window))
            else:
                found.append(partial(
                    claims.convergence, label, runs.seed_curves(need), spec["measure"], rules.window or spec["last"], spec["threshold"],
                    spec["expect"] == "above", reference=runs.seed_curves(other) if other else None))
    return found


def rules(spec: Mapping[str, Any]) -> frozenset[str]:
    """A curve's end is its last rounds (`window`); "not converged" also tests the rise over `rise_window`."""
    return frozenset({"window", "rise_window"} if spec["measure"] == "not_converged" else {"window"})


KINDS = (ClaimKind("convergence", frozenset({"curves", "algorithms", "measure", "threshold"}),
                   frozenset({"last", "expect", "reference"}), check, needs, comparisons, rules),)
