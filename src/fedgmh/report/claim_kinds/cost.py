"""cost: section 2.3's communication and computation costs, computed from the model (docs/claims.md, "cost").

A cost claim names `datasets`, the datasets whose model it is computed for (each client holding all
its classes, the worst case, as `fedgmh costs` computes them); then `paper` (quantity -> the paper's
figure (KB; local epochs for `.compute`), kept as printed: its precision is the rule's) or `below`
(quantity -> the quantities it is below). It reads no runs: its verdicts are exact.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from fedgmh.report import claims
from fedgmh.report.claim_kinds import ClaimKind, Comparison, Need, check_names, check_number, decided, fail

#: a cost: what one participating client uploads or downloads per round with an algorithm ('fedgmh.up', KB),
#: or FedGMH's extra computation a round in local epochs ('fedgmh.compute': one forward of phi over an epoch)
QUANTITY = re.compile(r"(?P<algorithm>[a-z][a-z0-9_]*)\.(?P<way>up|down|compute)")
UNITS = {"up": "KB", "down": "KB", "compute": "local epochs"}


def _quantity(where: str, value: Any) -> str:
    if not (isinstance(value, str) and QUANTITY.fullmatch(value)):
        raise fail(where, f"{value!r} is not a cost '<algorithm>.up', '<algorithm>.down' or '<algorithm>.compute'")
    return value


def unit(quantity: str) -> str:
    return UNITS[QUANTITY.fullmatch(quantity)["way"]]


def check(where: str, spec: dict[str, Any]) -> dict[str, Any]:
    if not (isinstance(spec["datasets"], list) and spec["datasets"] and all(isinstance(d, str) and d for d in spec["datasets"])):
        raise fail(where, "datasets must be a non-empty list of dataset names")
    if ("paper" in spec) == ("below" in spec):
        raise fail(where, "a cost claim has exactly one of: paper {quantity: KB}; below {quantity: [quantities]}")
    if "paper" in spec:
        if not (isinstance(spec["paper"], dict) and spec["paper"]):
            raise fail(where, "paper must map quantities ('fedgmh.up') to the paper's figures (KB; local epochs for .compute)")
        for quantity, value in spec["paper"].items():
            check_number(where, value, f"paper.{quantity}", positive=True)
        spec["paper"] = {_quantity(where, quantity): str(value) for quantity, value in spec["paper"].items()}
    else:
        if not (isinstance(spec["below"], dict) and spec["below"]):
            raise fail(where, "below must map quantities ('fedgmh.up') to lists of the quantities they are below")
        spec["below"] = {_quantity(where, q): [_quantity(where, o) for o in check_names(where, others, f"below.{q}")]
                         for q, others in spec["below"].items()}
        for q, others in spec["below"].items():
            if any(unit(o) != unit(q) for o in others):
                raise fail(where, f"below.{q}: compares {unit(q)} with another unit")
    return spec


def needs(spec: Mapping[str, Any]) -> list[Need]:
    return []  # computed from the model, not read from runs


def comparisons(spec: Mapping[str, Any], runs: Any, _rules: claims.Rules) -> list[Comparison]:
    """One comparison per dataset and quantity (and quantity it is below), from `fedgmh costs`' table."""
    found = []
    for dataset in spec["datasets"]:
        pairs = [(quantity, printed, None) for quantity, printed in spec.get("paper", {}).items()]
        pairs += [(quantity, None, other) for quantity, others in spec.get("below", {}).items() for other in others]
        for quantity, printed, other in pairs:
            label = f"{quantity} ({dataset}) " + (f"is {printed} {unit(quantity)}" if printed else f"< {other}")
            value, base = runs.cost(quantity, dataset), runs.cost(other, dataset) if other else None
            if value is None or other and base is None:
                found.append(decided(claims.Part(label, claims.NOT_RUN, f"no computed cost of {dataset} (fedgmh claims --costs)")))
                continue
            labels = f"; |S_m| = {value[1]}" if value[1] else ""
            part = (claims.cost_value(label, value[0], printed, unit(quantity)) if printed else
                    claims.cost_below(label, value[0], base[0], unit(quantity)))
            found.append(decided(dataclasses.replace(part, evidence=part.evidence + labels)))
    return found


KINDS = (ClaimKind("cost", frozenset({"datasets"}), frozenset({"paper", "below"}), check, needs, comparisons, exact=True),)
