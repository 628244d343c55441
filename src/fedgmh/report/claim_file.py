"""The reference file of the paper's claims (reference/fedgmh_paper_claims.yaml): read, checked, and what each claim needs.

A claim names its test kind (`test`, one of TESTS) and that kind's fields; cells are written
`<experiment>/<setting id>` (the workflow's run folders, e.g. `table2/cifar100_c5_a0.5`) with the
algorithms wanted there. The format, field by field: docs/claims.md. No pandas here: the workflow
reads the file while it builds its DAG (`Plan.claim_experiments`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from fedgmh.errors import UserError
from fedgmh.report.parsing import is_percent_target

#: test kind -> (required fields, optional fields), besides id, where, claim, test and note
TESTS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "ranking": (frozenset({"above", "below"}), frozenset({"minus"})),
    "rounds": (frozenset({"target"}), frozenset({"curves", "paper", "earlier", "later", "after", "algorithms", "points", "parameter"})),
    "trend": (frozenset({"points", "algorithms", "direction"}), frozenset({"parameter"})),
    "bound": (frozenset({"points", "algorithms", "tolerance"}), frozenset({"parameter"})),
    "convergence": (frozenset({"curves", "algorithms", "measure", "threshold"}), frozenset({"last", "expect", "reference"})),
    "cost": (frozenset({"datasets"}), frozenset({"paper", "below"})),
}
COMMON = frozenset({"id", "where", "claim", "test", "note"})
#: exactly one per rounds claim (`earlier` with `later`, `after` and `points` with `algorithms`; all but `points` with `curves`)
ROUNDS_FORMS = ("paper", "after", "earlier", "points")
DIRECTIONS = ("increasing", "decreasing")
MEASURES = ("fluctuation", "relative_fluctuation", "not_converged")
RELATIVE = ("relative_fluctuation", "not_converged")  # the measures that need a `reference`
EXPECT = ("above", "below")
DEFAULT_LAST = 20  # evaluated rounds that make "the end of a curve" (convergence)
CELL = re.compile(r"(?P<experiment>[a-z][a-z0-9_]*)/(?P<setting>[^/\s]+)")
#: a cost: what one participating client uploads or downloads per round with an algorithm ('fedgmh.up', KB),
#: or FedGMH's extra computation a round in local epochs ('fedgmh.compute': one forward of phi over an epoch)
QUANTITY = re.compile(r"(?P<algorithm>[a-z][a-z0-9_]*)\.(?P<way>up|down|compute)")
UNITS = {"up": "KB", "down": "KB", "compute": "local epochs"}
ID = re.compile(r"[a-z0-9][a-z0-9.-]*")


class Need(NamedTuple):
    """A cell's runs (`curve` False: their accuracies) or their per-round curves (`curve` True)."""

    experiment: str
    setting: str
    algorithm: str
    curve: bool = False

    @property
    def cell(self) -> str:
        return f"{self.experiment}/{self.setting}"


@dataclass(frozen=True)
class Claim:
    id: str
    where: str
    text: str
    test: str
    spec: Mapping[str, Any]  # the test kind's fields, checked
    note: str = ""

    def needs(self) -> list[Need]:
        """Every cell or curve the claim's test reads, in the file's order, without repeats."""
        spec, found = self.spec, []
        if self.test == "ranking":
            for side in ("above", "below"):
                found += [Need(*split_cell(cell), alg) for cell, algs in spec[side].items() for alg in algs]
            if "minus" in spec:
                found += [Need(*split_cell(spec["minus"]), need.algorithm) for need in list(found)]
        elif self.test in ("trend", "bound"):
            found = [Need(*split_cell(cell), alg) for alg in spec["algorithms"] for cell in spec["points"].values()]
        elif self.test == "rounds" and "points" in spec:
            found = [Need(*split_cell(cell), alg, True) for alg in spec["algorithms"] for cell in spec["points"].values()]
        elif self.test == "rounds":
            found = [Need(*split_cell(spec["curves"]), alg, True) for alg in rounds_algorithms(spec)]
        elif self.test == "convergence":
            found = [Need(*split_cell(cell), alg, True) for cell in spec["curves"] for alg in spec["algorithms"]]
            found += [reference_need(spec, need) for need in list(found) if "reference" in spec]
        return list(dict.fromkeys(found))

    def experiments(self) -> set[str]:
        return {need.experiment for need in self.needs()}


def split_cell(text: str) -> tuple[str, str]:
    match = CELL.fullmatch(text)
    return match["experiment"], match["setting"]


def reference_need(spec: Mapping[str, Any], need: Need) -> Need:
    """The curve a relative convergence measure of `need` is held against: the reference algorithm in
    the same cell, or the same algorithm in the reference cell."""
    reference = spec["reference"]
    if isinstance(reference, str):
        return Need(need.experiment, need.setting, reference, True)
    return Need(*split_cell(reference[need.cell]), need.algorithm, True)


def rounds_algorithms(spec: Mapping[str, Any]) -> list[str]:
    """The algorithms a rounds claim reads, in its order."""
    if "paper" in spec:
        return list(spec["paper"])
    if "after" in spec or "points" in spec:
        return list(spec["algorithms"])
    return list(dict.fromkeys([*spec["earlier"], *spec["later"]]))


def _fail(where: str, message: str) -> UserError:
    return UserError(f"{where}: {message} (format: docs/claims.md)")


def _names(where: str, value: Any, field: str) -> list[str]:
    if not (isinstance(value, list) and value and all(isinstance(v, str) and v for v in value)):
        raise _fail(where, f"{field} must be a non-empty list of algorithm names")
    return value


def _cell(where: str, value: Any, field: str) -> str:
    if not (isinstance(value, str) and CELL.fullmatch(value)):
        raise _fail(where, f"{field} {value!r} is not a cell '<experiment>/<setting id>', e.g. table2/cifar100_c5_a0.5")
    return value


def _number(where: str, value: Any, field: str, positive: bool = False, percent: bool = False) -> float:
    """A finite number (`positive`: > 0; `percent`: an accuracy in percent, in (0, 100]); a NaN target,
    threshold or tolerance would decide every comparison made with it."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not number or positive and value <= 0 or percent and not is_percent_target(value):
        what = "an accuracy in percent, in (0, 100]" if percent else f"a finite {'positive ' if positive else ''}number"
        raise _fail(where, f"{field} must be {what}, got {value!r}")
    return float(value)


def _check_spec(where: str, test: str, spec: dict[str, Any]) -> dict[str, Any]:
    """The test kind's fields, checked and normalised (lists where a list is meant, floats for numbers)."""
    if test == "ranking":
        for side in ("above", "below"):
            if not (isinstance(spec[side], dict) and spec[side]):
                raise _fail(where, f"{side} must map cells '<experiment>/<setting id>' to lists of algorithms")
            spec[side] = {_cell(where, cell, side): _names(where, algs, f"{side}.{cell}") for cell, algs in spec[side].items()}
        both = sorted({(cell, alg) for cell, algs in spec["above"].items() for alg in algs}
                      & {(cell, alg) for cell, algs in spec["below"].items() for alg in algs})
        if both:
            raise _fail(where, f"{both[0][1]} in {both[0][0]} is both above and below: a method is not ranked against itself")
        if "minus" in spec:
            _cell(where, spec["minus"], "minus")
    elif test == "rounds":
        spec["target"] = _number(where, spec["target"], "target", percent=True)
        forms = [form for form in ROUNDS_FORMS if form in spec]
        paired = ("later" in spec) == ("earlier" in spec) and ("algorithms" in spec) == ("after" in spec or "points" in spec)
        if len(forms) != 1 or not paired or ("curves" in spec) == ("points" in spec):
            raise _fail(where, "a rounds claim has exactly one of: curves with paper {algorithm: round}, with earlier + later or "
                               "with after + algorithms; points {value: cell} + algorithms")
        if "curves" in spec:
            _cell(where, spec["curves"], "curves")
        if "paper" in spec:
            if not (isinstance(spec["paper"], dict) and spec["paper"]):
                raise _fail(where, "paper must map algorithms to the paper's rounds")
            spec["paper"] = {str(alg): _number(where, r, f"paper.{alg}", positive=True) for alg, r in spec["paper"].items()}
        elif "after" in spec:
            spec["after"] = _number(where, spec["after"], "after", positive=True)
            _names(where, spec["algorithms"], "algorithms")
        elif "points" in spec:
            spec["points"] = _points(where, spec["points"])
            _names(where, spec["algorithms"], "algorithms")
        else:
            _names(where, spec["earlier"], "earlier")
            _names(where, spec["later"], "later")
    elif test in ("trend", "bound"):
        spec["points"] = _points(where, spec["points"])
        _names(where, spec["algorithms"], "algorithms")
        if test == "trend" and spec["direction"] not in DIRECTIONS:
            raise _fail(where, f"direction must be one of {', '.join(DIRECTIONS)}")
        if test == "bound":
            spec["tolerance"] = _number(where, spec["tolerance"], "tolerance", positive=True)
    elif test == "cost":
        _cost(where, spec)
    else:  # convergence
        curves = spec["curves"] if isinstance(spec["curves"], list) else [spec["curves"]]
        spec["curves"] = [_cell(where, cell, "curves") for cell in curves]
        _names(where, spec["algorithms"], "algorithms")
        if spec["measure"] not in MEASURES:
            raise _fail(where, f"measure must be one of {', '.join(MEASURES)}")
        spec["threshold"] = _number(where, spec["threshold"], "threshold", positive=True)
        last = spec.setdefault("last", DEFAULT_LAST)
        if isinstance(last, bool) or not isinstance(last, int) or last < 2:
            raise _fail(where, f"last must be a whole number of rounds >= 2, got {last!r}")
        if spec.setdefault("expect", "above") not in EXPECT:
            raise _fail(where, f"expect must be one of {', '.join(EXPECT)}")
        _reference(where, spec)
    return spec


def _cost(where: str, spec: dict[str, Any]) -> None:
    """A cost claim: `datasets`, the datasets whose model it is computed for (each client holding all
    its classes, the worst case, as `fedgmh costs` computes them); then `paper` (quantity -> the
    paper's figure (KB; local epochs for `.compute`), kept as printed: its precision is the rule's) or
    `below` (quantity -> the quantities it is below)."""
    if not (isinstance(spec["datasets"], list) and spec["datasets"] and all(isinstance(d, str) and d for d in spec["datasets"])):
        raise _fail(where, "datasets must be a non-empty list of dataset names")
    if ("paper" in spec) == ("below" in spec):
        raise _fail(where, "a cost claim has exactly one of: paper {quantity: KB}; below {quantity: [quantities]}")
    if "paper" in spec:
        if not (isinstance(spec["paper"], dict) and spec["paper"]):
            raise _fail(where, "paper must map quantities ('fedgmh.up') to the paper's figures (KB; local epochs for .compute)")
        for quantity, value in spec["paper"].items():
            _number(where, value, f"paper.{quantity}", positive=True)
        spec["paper"] = {_quantity(where, quantity): str(value) for quantity, value in spec["paper"].items()}
    else:
        if not (isinstance(spec["below"], dict) and spec["below"]):
            raise _fail(where, "below must map quantities ('fedgmh.up') to lists of the quantities they are below")
        spec["below"] = {_quantity(where, q): [_quantity(where, o) for o in _names(where, others, f"below.{q}")]
                         for q, others in spec["below"].items()}
        unit = lambda quantity: UNITS[QUANTITY.fullmatch(quantity)["way"]]  # noqa: E731
        for q, others in spec["below"].items():
            if any(unit(o) != unit(q) for o in others):
                raise _fail(where, f"below.{q}: compares {unit(q)} with another unit")


def _quantity(where: str, value: Any) -> str:
    if not (isinstance(value, str) and QUANTITY.fullmatch(value)):
        raise _fail(where, f"{value!r} is not a cost '<algorithm>.up', '<algorithm>.down' or '<algorithm>.compute'")
    return value


def _points(where: str, points: Any) -> dict[float, str]:
    if not (isinstance(points, dict) and len(points) >= 2):
        raise _fail(where, "points must map at least 2 parameter values to cells '<experiment>/<setting id>'")
    return {_number(where, x, "a points value"): _cell(where, cell, f"points.{x}") for x, cell in points.items()}


def _reference(where: str, spec: dict[str, Any]) -> None:
    """A relative measure's `reference`: an algorithm (on the same cells and seeds), or a mapping of
    each of the claim's `curves` to another cell (the same algorithm there); no reference otherwise."""
    if (spec["measure"] in RELATIVE) != ("reference" in spec):
        raise _fail(where, f"a reference goes with the measures {', '.join(RELATIVE)}, and they need one")
    if "reference" not in spec:
        return
    reference = spec["reference"]
    if isinstance(reference, dict):
        if set(reference) != set(spec["curves"]):
            raise _fail(where, "reference must map each of the claim's curves to a cell, or name an algorithm")
        spec["reference"] = {cell: _cell(where, other, f"reference.{cell}") for cell, other in reference.items()}
    elif not (isinstance(reference, str) and reference):
        raise _fail(where, "reference must name an algorithm or map each of the claim's curves to a cell")


def _claim(path: Path, index: int, entry: Any) -> Claim:
    where = f"claims file {path}, claim {index + 1}"
    if not isinstance(entry, dict):
        raise _fail(where, "each claim is a mapping with id, where, claim, test and the test's fields")
    if isinstance(entry.get("id"), str):
        where = f"claims file {path}, claim {entry['id']!r}"
    missing = [key for key in ("id", "where", "claim", "test") if not (isinstance(entry.get(key), str) and entry[key].strip())]
    if missing:
        raise _fail(where, f"lacks {', '.join(missing)} (each a text)")
    if not ID.fullmatch(entry["id"]):
        raise _fail(where, "id must be lower-case letters, digits, '.' and '-'")
    test = entry["test"]
    if test not in TESTS:
        raise _fail(where, f"test {test!r} is not one of {', '.join(TESTS)}")
    required, optional = TESTS[test]
    absent = sorted(required - set(entry))
    unknown = sorted(set(entry) - required - optional - COMMON)
    if absent or unknown:
        raise _fail(where, "; ".join(filter(None, [f"a {test} claim needs {', '.join(absent)}" if absent else "",
                                                   f"unknown field(s) {', '.join(unknown)}" if unknown else ""])))
    spec = _check_spec(where, test, {key: entry[key] for key in entry if key not in COMMON})
    return Claim(entry["id"], entry["where"].strip(), " ".join(entry["claim"].split()), test, spec, " ".join(str(entry.get("note", "")).split()))


def read_claims(path: Path | str) -> list[Claim]:
    """The claims of the file, checked (a UserError naming the claim and field otherwise)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"claims file {path} not found (the paper's claims: reference/fedgmh_paper_claims.yaml)")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise UserError(f"claims file {path} is not YAML text ({' '.join(str(err).split())[:200]})") from None
    if not (isinstance(data, dict) and isinstance(data.get("claims"), list) and data["claims"]):
        raise _fail(f"claims file {path}", "it needs a non-empty list under `claims:`")
    claims = [_claim(path, i, entry) for i, entry in enumerate(data["claims"])]
    seen: set[str] = set()
    for claim in claims:
        if claim.id in seen:
            raise _fail(f"claims file {path}", f"id {claim.id!r} is used twice")
        seen.add(claim.id)
    return claims
