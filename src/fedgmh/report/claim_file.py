"""The reference file of the paper's claims (reference/fedgmh_paper_claims.yaml): read, checked, and what each claim needs.

A claim names its kind (`test`, one of `claim_kinds()`: the kind's module checks its fields and says
what it reads); cells are written `<experiment>/<setting id>` (the workflow's run folders, e.g.
`table2/cifar100_c5_a0.5`) with the algorithms wanted there. The format, field by field:
docs/claims.md. No pandas here: the workflow reads the file while it builds its DAG
(`fedgmh.report.artifacts.paper.claim_experiments`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from fedgmh.errors import UserError
from fedgmh.report.claim_kinds import COMMON, Need, claim_kinds, fail

ID = re.compile(r"[a-z0-9][a-z0-9.-]*")


@dataclass(frozen=True)
class Claim:
    id: str
    where: str
    text: str
    test: str
    spec: Mapping[str, Any]  # the kind's fields, checked
    note: str = ""

    def needs(self) -> list[Need]:
        """Every cell or curve the claim's test reads, in the file's order, without repeats."""
        return list(dict.fromkeys(claim_kinds()[self.test].needs(self.spec)))

    def fewest_seeds(self) -> int:
        """The seeds each needed cell must have before the claim's test can decide it."""
        return claim_kinds()[self.test].seeds(self.spec)

    def experiments(self) -> set[str]:
        return {need.experiment for need in self.needs()}


def _claim(path: Path, index: int, entry: Any) -> Claim:
    where = f"claims file {path}, claim {index + 1}"
    if not isinstance(entry, dict):
        raise fail(where, "each claim is a mapping with id, where, claim, test and the test's fields")
    if isinstance(entry.get("id"), str):
        where = f"claims file {path}, claim {entry['id']!r}"
    missing = [key for key in ("id", "where", "claim", "test") if not (isinstance(entry.get(key), str) and entry[key].strip())]
    if missing:
        raise fail(where, f"lacks {', '.join(missing)} (each a text)")
    if not ID.fullmatch(entry["id"]):
        raise fail(where, "id must be lower-case letters, digits, '.' and '-'")
    test, kinds = entry["test"], claim_kinds()
    if test not in kinds:
        raise fail(where, f"test {test!r} is not one of {', '.join(kinds)}")
    required, optional = kinds[test].required, kinds[test].optional
    absent = sorted(required - set(entry))
    unknown = sorted(set(entry) - required - optional - COMMON)
    if absent or unknown:
        raise fail(where, "; ".join(filter(None, [f"a {test} claim needs {', '.join(absent)}" if absent else "",
                                                   f"unknown field(s) {', '.join(unknown)}" if unknown else ""])))
    spec = kinds[test].check(where, {key: entry[key] for key in entry if key not in COMMON})
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
        raise fail(f"claims file {path}", "it needs a non-empty list under `claims:`")
    claims = [_claim(path, i, entry) for i, entry in enumerate(data["claims"])]
    seen: set[str] = set()
    for claim in claims:
        if claim.id in seen:
            raise fail(f"claims file {path}", f"id {claim.id!r} is used twice")
        seen.add(claim.id)
    return claims
