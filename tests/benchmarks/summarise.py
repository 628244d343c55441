"""Markdown tables of a pytest-benchmark JSON file (as in BENCHMARKS.md).

    python tests/benchmarks/summarise.py bench.json
    python tests/benchmarks/summarise.py partial.jsonl      # FEDGMH_BENCH_PARTIAL's lines (test_throughput.py)

With results of test_throughput.py, also the time Table 2's offline runs and the paper config
(without CIFAR-10) would take at the measured rates, per number of runs sharing the device.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict

import numpy as np

from bench_support import extrapolate, table2_hours_per_method


def main(path: str) -> None:
    if path.endswith(".jsonl"):  # one benchmark entry per line, no machine information
        data = {"benchmarks": [json.loads(line) for line in open(path) if line.strip()]}
        print(f"{len(data['benchmarks'])} measurements kept as they were taken ({path})")
    else:
        data = json.load(open(path))
        machine = data["machine_info"]
        cpu = machine.get("cpu", {})
        print(f"machine: {cpu.get('brand_raw', '?')}, {cpu.get('count', '?')} cores, Python {machine.get('python_version')}; {data['datetime'][:16]} UTC")
    print("\n| benchmark | mean (s) | measured |\n| --- | ---: | --- |")
    for bench in data["benchmarks"]:
        info = ", ".join(f"{k} {v}" for k, v in bench["extra_info"].items())
        print(f"| `{bench['name'].removeprefix('test_')}` | {bench['stats']['mean']:.4g} | {info} |")
    labels = sorted({bench["extra_info"].get("label", "") for bench in data["benchmarks"]})
    for label in labels:  # settings measured under FEDGMH_BENCH_LABEL are extrapolated each on its own
        if label:
            print(f"\nSetting `{label}`:")
        throughput([bench for bench in data["benchmarks"] if bench["extra_info"].get("label", "") == label])


def _hours(hours: float) -> str:
    return f"{hours:,.0f}" if hours >= 100 else f"{hours:.3g} ({hours * 60:.0f} min)"


def throughput(benchmarks: list[dict]) -> None:
    """Extrapolated hours per number of concurrent runs, from the mean over the measured methods."""
    measured = defaultdict(lambda: defaultdict(list))  # jobs -> shape -> [(rounds/s, eval share)]
    per_method = defaultdict(lambda: defaultdict(dict))  # jobs -> method -> shape -> rounds/s
    for bench in benchmarks:
        if bench["name"].startswith("test_table2_runs_per_hour"):
            info, params = bench["extra_info"], bench["params"]
            measured[info["jobs"]][params["shape"]].append((info["rounds_per_s"], info["eval_share"]))
            per_method[info["jobs"]][params["algorithm"]][params["shape"]] = info["rounds_per_s"]
    rows = []
    for jobs, shapes in sorted(measured.items()):
        if set(shapes) != {"mnist", "cifar100"}:
            continue
        rates = {shape: float(np.mean([r for r, _ in values])) for shape, values in shapes.items()}
        shares = {shape: float(np.mean([e for _, e in values])) for shape, values in shapes.items()}
        hours = extrapolate(rates, shares)
        own = table2_hours_per_method(per_method[jobs])
        rows.append(f"| {jobs} | {len(per_method[jobs])} | {rates['mnist']:.3g} | {rates['cifar100']:.3g} | "
                    f"{_hours(hours['table2_offline_hours'])} | {'—' if own is None else _hours(own)} | "
                    f"{_hours(hours['paper_without_cifar10_hours'])} |")
    if rows:
        print("\nExtrapolated: at the mean rate of the measured methods, and (when all twelve were measured) at each method's own rate:\n")
        print("| runs at once | methods measured | MNIST rounds/s (mean) | CIFAR-100 rounds/s (mean) | Table 2 offline, 240 runs, at the mean (h) "
              "| Table 2 offline, each method at its own rate (h) | paper config without CIFAR-10, 655 runs, at the mean (h) |")
        print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        print("\n".join(rows))


if __name__ == "__main__":
    main(sys.argv[1])
