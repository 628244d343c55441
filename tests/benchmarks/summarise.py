"""Markdown tables of a pytest-benchmark JSON file (as in BENCHMARKS.md).

    python tests/benchmarks/summarise.py bench.json
"""

from __future__ import annotations

import json
import sys


def main(path: str) -> None:
    data = json.load(open(path))
    machine = data["machine_info"]
    cpu = machine.get("cpu", {})
    print(f"machine: {cpu.get('brand_raw', '?')}, {cpu.get('count', '?')} cores, Python {machine.get('python_version')}; {data['datetime'][:16]} UTC")
    print("\n| benchmark | mean (s) | measured |\n| --- | ---: | --- |")
    for bench in data["benchmarks"]:
        info = ", ".join(f"{k} {v}" for k, v in bench["extra_info"].items())
        print(f"| `{bench['name'].removeprefix('test_')}` | {bench['stats']['mean']:.4g} | {info} |")


if __name__ == "__main__":
    main(sys.argv[1])
