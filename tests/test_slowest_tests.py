"""tools/slowest_tests.py: the slowest tests from pytest's --durations report, as docs/testing.md's table."""

from __future__ import annotations

import pytest
from conftest import REPO_ROOT, load_script

SCRIPT = REPO_ROOT / "tools" / "slowest_tests.py"
REPORT = """\
============================= slowest durations ==============================
30.50s call     tests/test_a.py::test_slow[x]
12.00s setup    tests/test_b.py::test_first
2.00s call     tests/test_b.py::test_first
0.50s teardown tests/test_b.py::test_first
1.25s call     tests/test_a.py::test_quick

(12 durations < 1s hidden.  Use -vv to show these durations.)
3 passed in 50.00s
"""


@pytest.fixture(scope="module")
def tool():
    return load_script(SCRIPT)


def test_a_tests_time_is_its_setup_call_and_teardown(tool):
    assert tool.durations(REPORT) == {"tests/test_a.py::test_slow[x]": 30.5, "tests/test_b.py::test_first": 14.5,
                                      "tests/test_a.py::test_quick": 1.25}


def test_the_table_lists_the_slowest_first_and_replaces_only_its_block(tool, tmp_path):
    block = tool.table(tool.durations(REPORT), "`pytest`", top=2)
    assert block.splitlines()[-3:] == ["| 30.5 | `tests/test_a.py::test_slow[x]` |", "| 14.5 | `tests/test_b.py::test_first` |",
                                       tool.END]
    doc = tmp_path / "testing.md"
    doc.write_text(f"before\n{tool.BEGIN}\nold\n{tool.END}\nafter\n")
    log = tmp_path / "pytest.log"
    log.write_text(REPORT)
    assert tool.main(["--from", str(log), "--source", "`pytest`", "--top", "2", "--out", str(doc)]) == 0
    assert doc.read_text() == f"before\n{block}\nafter\n"


def test_docs_testing_md_holds_a_table_of_at_most_20_tests(tool):
    text = (REPO_ROOT / "docs" / "testing.md").read_text()
    block = text[text.index(tool.BEGIN):text.index(tool.END)]
    rows = [line for line in block.splitlines() if line.startswith("| ") and "::" in line]
    assert 0 < len(rows) <= 20
