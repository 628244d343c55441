"""The arithmetic behind BENCHMARKS.md's extrapolated Table 2 times (tests/benchmarks/bench_support.py
and summarise.py): the benchmarks themselves only run with `-m benchmark`, but what their numbers are
turned into is checked here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).parent / "benchmarks"
sys.path.insert(0, str(BENCH))

from bench_support import PAPER_ALGORITHMS, extrapolate, table2_hours_per_method  # noqa: E402


def test_each_method_at_its_own_rate_equals_the_mean_when_all_cost_the_same():
    rates = {"mnist": 2.0, "cifar100": 1.5}
    same = {m: dict(rates) for m in PAPER_ALGORITHMS}
    assert table2_hours_per_method(same) == pytest.approx(extrapolate(rates, {"mnist": 0.1, "cifar100": 0.1})["table2_offline_hours"])
    # 120 runs of 200 rounds at 2 rounds/s + 120 runs of 300 rounds at 1.5 rounds/s
    assert table2_hours_per_method(same) == pytest.approx((120 * 200 / 2.0 + 120 * 300 / 1.5) / 3600)


def test_a_slow_method_costs_its_own_ten_runs_per_dataset():
    rates = {m: {"mnist": 2.0, "cifar100": 2.0} for m in PAPER_ALGORITHMS}
    base = table2_hours_per_method(rates)
    rates["fedcp"] = {"mnist": 1.0, "cifar100": 2.0}  # half as fast on MNIST: its 10 MNIST runs take twice as long
    assert table2_hours_per_method(rates) - base == pytest.approx(10 * 200 * (1 / 1.0 - 1 / 2.0) / 3600)


def test_without_all_twelve_on_both_shapes_there_is_no_per_method_time():
    rates = {m: {"mnist": 2.0, "cifar100": 2.0} for m in PAPER_ALGORITHMS}
    del rates["fedfomo"]["cifar100"]
    assert table2_hours_per_method(rates) is None
    assert table2_hours_per_method({"fedavg": {"mnist": 1.0, "cifar100": 1.0}}) is None


def _bench(algorithm: str, shape: str, rounds_per_s: float) -> dict:
    return {"name": f"test_table2_runs_per_hour[{algorithm}-{shape}-4]", "params": {"algorithm": algorithm, "shape": shape, "jobs": 4},
            "stats": {"mean": 1.0}, "extra_info": {"jobs": 4, "rounds_per_s": rounds_per_s, "eval_share": 0.2}}


def test_summarise_prints_the_per_method_time_only_when_all_twelve_were_measured(tmp_path):
    def table(benchmarks):
        path = tmp_path / "bench.json"
        path.write_text(json.dumps({"machine_info": {"cpu": {}}, "datetime": "2026-11-23T00:00:00", "benchmarks": benchmarks}))
        out = subprocess.run([sys.executable, str(BENCH / "summarise.py"), str(path)], capture_output=True, text=True, check=True, cwd=BENCH).stdout
        return [line for line in out.splitlines() if line.startswith("| 4 |")]

    two = table([_bench(m, s, 3.0) for m in ("fedavg", "fedgmh") for s in ("mnist", "cifar100")])
    assert len(two) == 1 and two[0].split("|")[2].strip() == "2" and two[0].split("|")[6].strip() == "—"
    rates = {m: 3.0 if m != "fedcp" else 1.0 for m in PAPER_ALGORITHMS}
    twelve = table([_bench(m, s, rates[m]) for m in PAPER_ALGORITHMS for s in ("mnist", "cifar100")])
    expected = table2_hours_per_method({m: {"mnist": r, "cifar100": r} for m, r in rates.items()})
    assert len(twelve) == 1 and f"{expected:.3g}" in twelve[0].split("|")[6]


def test_summarise_reads_the_measurements_kept_one_per_line(tmp_path, monkeypatch):
    """What FEDGMH_BENCH_PARTIAL keeps (bench_support.keep_partial) gives the same table as the JSON."""
    benchmarks = [_bench(m, s, 3.0) for m in ("fedavg", "fedgmh") for s in ("mnist", "cifar100")]
    whole = tmp_path / "bench.json"
    whole.write_text(json.dumps({"machine_info": {"cpu": {}}, "datetime": "2026-11-23T00:00:00", "benchmarks": benchmarks}))
    partial = tmp_path / "partial.jsonl"
    monkeypatch.setenv("FEDGMH_BENCH_PARTIAL", str(partial))
    from bench_support import keep_partial

    for bench in benchmarks:
        keep_partial(bench["name"], bench["params"], bench["stats"]["mean"], bench["extra_info"])

    def rows(path):
        out = subprocess.run([sys.executable, str(BENCH / "summarise.py"), str(path)], capture_output=True, text=True, check=True, cwd=BENCH).stdout
        return [line for line in out.splitlines() if line.startswith("|")]

    assert len(partial.read_text().splitlines()) == 4
    assert rows(partial) == rows(whole) and any(line.startswith("| 4 |") for line in rows(partial))


def test_summarise_extrapolates_each_labelled_setting_on_its_own(tmp_path):
    """Labelled settings (FEDGMH_BENCH_LABEL) share one file; each gets its own row, from its own rates only."""
    benchmarks = []
    for label, rate in (("fp32", 2.0), ("tf32", 4.0)):
        for bench in [_bench(m, s, rate) for m in ("fedavg", "fedgmh") for s in ("mnist", "cifar100")]:
            bench["extra_info"]["label"] = label
            benchmarks.append(bench)
    path = tmp_path / "levers.jsonl"
    path.write_text("".join(json.dumps(bench) + "\n" for bench in benchmarks))
    out = subprocess.run([sys.executable, str(BENCH / "summarise.py"), str(path)], capture_output=True, text=True, check=True, cwd=BENCH).stdout
    rows = [line for line in out.splitlines() if line.startswith("| 4 |")]
    assert "Setting `fp32`" in out and "Setting `tf32`" in out and len(rows) == 2
    hours = {rate: extrapolate({"mnist": rate, "cifar100": rate}, {"mnist": 0.2, "cifar100": 0.2})["table2_offline_hours"] for rate in (2.0, 4.0)}
    assert [row.split("|")[3].strip() for row in rows] == ["2", "4"]  # MNIST rounds/s of each setting alone
    assert f"{hours[2.0]:.3g}" in rows[0] and f"{hours[4.0]:.3g}" in rows[1]
