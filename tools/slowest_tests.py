#!/usr/bin/env python3
"""The slowest tests as a markdown table, from pytest's `--durations` report, written into
docs/testing.md between its `durations` markers.

    python tools/slowest_tests.py                      # runs `python -m pytest --durations=0` (the default selection)
    python tools/slowest_tests.py -- tests/test_cli.py # runs pytest on these arguments
    python tools/slowest_tests.py --from a.log b.log --source "what made the logs"

A test's time is its setup, call and teardown together (a module fixture's work counts in the setup
of the first test that uses it). `--print` prints the table instead of writing it.
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BEGIN = "<!-- durations: written by tools/slowest_tests.py -->"
END = "<!-- /durations -->"
LINE = re.compile(r"^(\d+(?:\.\d+)?)s (setup|call|teardown)\s+(\S.*?)\s*$")


def durations(report: str) -> dict[str, float]:
    """Seconds per test (setup + call + teardown) from the report's `slowest durations` lines."""
    seconds: dict[str, float] = defaultdict(float)
    for line in report.splitlines():
        match = LINE.match(line.strip())
        if match:
            seconds[match.group(3)] += float(match.group(1))
    return dict(seconds)


def table(seconds: dict[str, float], source: str, top: int = 20) -> str:
    slowest = sorted(seconds.items(), key=lambda item: (-item[1], item[0]))[:top]
    rows = [f"| {value:,.1f} | `{test}` |" for test, value in slowest]
    return "\n".join([BEGIN, f"The slowest {len(rows)} tests (setup, call and teardown) of {source}:", "",
                      "| seconds | test |", "| ---: | --- |", *rows, END])


def replace_block(text: str, block: str) -> str:
    """TEXT with the part between the markers (the markers included) replaced by BLOCK."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise SystemExit(f"the markers {BEGIN!r} ... {END!r} are not in the file")
    return text[:start] + block + text[end + len(END):]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="logs", nargs="+", type=Path, help="pytest outputs to read instead of running pytest")
    parser.add_argument("--source", help="what the table is of (default: the pytest command run)")
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "testing.md")
    parser.add_argument("--print", action="store_true", help="print the table, write nothing")
    parser.add_argument("pytest_args", nargs="*", help="after --: pytest's arguments")
    args = parser.parse_args(argv)
    if args.logs:
        reports = [path.read_text() for path in args.logs]
        source = args.source or ", ".join(map(str, args.logs))
    else:
        command = [sys.executable, "-m", "pytest", "--durations=0", "-q", *args.pytest_args]
        reports = [subprocess.run(command, cwd=REPO, capture_output=True, text=True).stdout]
        source = args.source or "`" + shlex.join(["python", *command[1:]]) + "`"
    seconds: dict[str, float] = {}
    for report in reports:  # a test in several reports: its longest time
        for test, value in durations(report).items():
            seconds[test] = max(value, seconds.get(test, 0.0))
    if not seconds:
        print("no durations found (run pytest with --durations=0)", file=sys.stderr)
        return 1
    block = table(seconds, source, args.top)
    if args.print:
        print(block)
    else:
        args.out.write_text(replace_block(args.out.read_text(), block))
    return 0


if __name__ == "__main__":
    sys.exit(main())
