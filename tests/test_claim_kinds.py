"""A claim kind is one module of fedgmh.report.claim_kinds: collected there, read by the claims file,
evaluated on runs, re-decided by the robustness check, and found in the places docs/claims.md's
"Adding a claim kind" names (as tests/test_registry.py checks them for algorithms)."""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
import yaml

import fedgmh.report.claim_kinds
from fedgmh.report import claims
from fedgmh.report.claim_file import read_claims
from fedgmh.report.claim_kinds import COMMON, ClaimKind, claim_kinds
from fedgmh.report.claims_report import Runs, evaluate_claims
from fedgmh.report.robustness import RULE_VARIANTS, applies

REPO = Path(__file__).resolve().parents[1]
SETTING = "cifar100_c5_a0.5"

#: a new kind: every seed of each method above a floor, in percent
FLOOR = '''
from fedgmh.report import claims
from fedgmh.report.claim_kinds import ClaimKind, Need, check_cell, check_names, check_number, decided, not_run, split_cell


def check(where, spec):
    check_cell(where, spec["cell"], "cell")
    check_names(where, spec["algorithms"], "algorithms")
    spec["floor"] = check_number(where, spec["floor"], "floor", percent=True)
    return spec


def needs(spec):
    return [Need(*split_cell(spec["cell"]), alg) for alg in spec["algorithms"]]


def comparisons(spec, runs, rules):
    found = []
    for need in needs(spec):
        label = f"{need.algorithm} above {spec['floor']:g} %"
        if not runs.has(need):
            found.append(not_run(label, [need]))
            continue
        low = min(runs.cell(need).values())
        verdict = claims.HOLDS if low > spec["floor"] else claims.FAILS
        found.append(decided(claims.Part(label, verdict, f"lowest seed {low:.1f} %", n_seeds=len(runs.cell(need)))))
    return found


KINDS = (ClaimKind("floor", frozenset({"cell", "algorithms", "floor"}), frozenset(), check, needs, comparisons),)
'''


def add_module(monkeypatch, tmp_path: Path, name: str, text: str) -> None:
    """Put `claim_kinds/<name>.py` in a folder the package searches, as a new file of the source tree would be."""
    folder = tmp_path / "claim_kinds"
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.py").write_text(textwrap.dedent(text))
    package = fedgmh.report.claim_kinds
    monkeypatch.setattr(package, "__path__", [*package.__path__, str(folder)])
    monkeypatch.delitem(sys.modules, f"{package.__name__}.{name}", raising=False)


@pytest.fixture
def floor_kind(monkeypatch, tmp_path):
    add_module(monkeypatch, tmp_path, "floor", FLOOR)
    yield
    sys.modules.pop("fedgmh.report.claim_kinds.floor", None)


def test_a_kind_of_one_module_is_read_evaluated_and_re_decided(floor_kind, tmp_path):
    assert "floor" in claim_kinds()
    path = tmp_path / "claims.yaml"
    entry = {"id": "above-60", "where": "Table 2", "claim": "Both above 60 %.", "test": "floor",
             "cell": f"table2/{SETTING}", "algorithms": ["fedgmh", "fedavg"], "floor": 60}
    path.write_text(yaml.safe_dump({"claims": [entry]}))
    claim, = read_claims(path)
    assert claim.spec["floor"] == 60.0 and [need.algorithm for need in claim.needs()] == ["fedgmh", "fedavg"]
    results = pd.DataFrame([{"experiment": "table2", "setting": SETTING, "dataset": "cifar100", "algorithm": alg, "seed": s,
                             "best_test_acc": acc + 0.01 * s} for s in range(3) for alg, acc in (("fedgmh", 0.7), ("fedavg", 0.55))])
    frame, parts = evaluate_claims([claim], Runs(results, None))
    assert frame.loc[0, "verdict"] == claims.FAILS and [p.verdict for p in parts["above-60"]] == [claims.HOLDS, claims.FAILS]
    assert not any(applies(claim, variant) for variant in RULE_VARIANTS)  # it reads none of the rules' open choices
    path.write_text(yaml.safe_dump({"claims": [entry | {"floor": 0}]}))
    with pytest.raises(Exception, match=r"claim 'above-60': floor must be an accuracy in percent"):
        read_claims(path)


def test_without_its_module_the_kind_is_unknown(tmp_path):
    path = tmp_path / "claims.yaml"
    path.write_text(yaml.safe_dump({"claims": [{"id": "x", "where": "w", "claim": "c", "test": "floor"}]}))
    with pytest.raises(Exception, match="test 'floor' is not one of bound, convergence, cost, ranking, rounds, trend"):
        read_claims(path)


@pytest.mark.parametrize(("text", "message"), [
    ("X = 1\n", "fedgmh.report.claim_kinds.broken declares no KINDS"),
    (FLOOR.replace("check, needs, comparisons)", "check, needs, None)"), "claim kind 'floor' lacks comparisons"),
    (FLOOR.replace('frozenset({"cell", "algorithms", "floor"}), frozenset()', 'frozenset({"cell"}), frozenset({"cell", "note"})'),
     "claim kind 'floor': field(s) cell, note declared twice"),
    (FLOOR.replace('ClaimKind("floor"', 'ClaimKind("ranking"'), "claim kind 'ranking' is declared twice"),
])
def test_a_kind_missing_a_part_is_refused(monkeypatch, tmp_path, text, message):
    add_module(monkeypatch, tmp_path, "broken", text)
    try:
        with pytest.raises(ValueError, match=re.escape(message)):
            claim_kinds()
    finally:
        sys.modules.pop("fedgmh.report.claim_kinds.broken", None)


def test_a_claim_field_of_every_claim_is_not_a_kind_field():
    assert all(not (kind.required | kind.optional) & COMMON for kind in claim_kinds().values())
    with pytest.raises(TypeError):
        ClaimKind("floor", frozenset(), frozenset(), lambda where, spec: spec, lambda spec: [])  # no comparisons


# ------------------------------------------- a new kind: the places docs/claims.md's "Adding a claim kind" lists


def documented_kinds() -> set[str]:
    """The kinds with a section under docs/claims.md's "The test kinds"."""
    text = (REPO / "docs" / "claims.md").read_text()
    section = text.split("\n## The test kinds", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^### (\w+):", section, flags=re.M))


def missing_places(name: str) -> list[str]:
    """The places of docs/claims.md's "Adding a claim kind" that lack kind NAME."""
    tests = [path for path in sorted((REPO / "tests").glob("test_*.py")) if path.name != Path(__file__).name
             and re.search(rf"""["']test["']: ["']{name}["']|test: {name}\b""", path.read_text())]
    used = {entry["test"] for entry in yaml.safe_load((REPO / "reference" / "fedgmh_paper_claims.yaml").read_text())["claims"]}
    return ([] if name in documented_kinds() else ["docs/claims.md"]) + ([] if tests else ["tests/test_claims.py"]) + (
        [] if name in used else ["reference/fedgmh_paper_claims.yaml"])


def test_every_kind_is_in_every_place_docs_claims_md_lists():
    assert {name: missing for name in claim_kinds() if (missing := missing_places(name))} == {}
    assert documented_kinds() == set(claim_kinds())  # no section of a kind that is gone


def test_a_new_kind_of_one_module_is_missing_from_the_other_places(floor_kind):
    assert missing_places("floor") == ["docs/claims.md", "tests/test_claims.py", "reference/fedgmh_paper_claims.yaml"]
