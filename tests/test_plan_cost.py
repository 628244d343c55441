"""`fedgmh plan`: a dry run that tells which runs will train, which reuse a record, and for how long."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fedgmh.cli import main
from fedgmh.plan_cost import duration, load_plan, plan_cost

REPO = Path(__file__).resolve().parents[1]
#: committed mini records (MNIST ExDir(2, 5), 8 rounds, seed 0) that the tiny config's seed-0 runs equal
RECORDS = REPO / "paper_artifacts" / "mini" / "runs" / "table2" / "mnist_c2_a5"
RUNS = "results/tiny/runs/table2/mnist_c2_a5"


@pytest.fixture
def tiny(tmp_path: Path, monkeypatch) -> Path:
    """A config of 4 runs (FedAvg and FedGMH, seeds 0 and 1) in a folder laid out as the repository:
    a store holding both seed-0 records, the results folder FedAvg's."""
    config = yaml.safe_load((REPO / "config" / "mini.yaml").read_text())
    for key in ("figures", "rounds_to_target", "uploads_to_target", "layer_weights", "reference_tables", "paper_claims",
                "other_references", "clients_figure"):
        config.pop(key, None)
    config.update(name="tiny", seeds=[0, 1], stores=["store"], experiments={
        "table2": {"algorithms": ["fedavg", "fedgmh"], "settings": [{"dataset": "mnist", "classes_per_client": 2, "alpha": 5}]}})
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(config))
    for folder in ("workflow", "reference"):
        (tmp_path / folder).symlink_to(REPO / folder)
    for algorithm in ("fedavg", "fedgmh"):
        shutil.copytree(RECORDS / algorithm / "seed0", tmp_path / "store" / algorithm)
    shutil.copytree(RECORDS / "fedavg" / "seed0", tmp_path / RUNS / "fedavg" / "seed0")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _wall(algorithm: str) -> float:
    return json.loads((RECORDS / algorithm / "seed0" / "run.json").read_text())["wall_time_s"]


def test_reused_runs_are_counted_and_the_others_estimated_from_records(tiny: Path, capsys) -> None:
    # a finished run of other settings in a run's folder (FedGMH seed 0's in seed 1's) is no record of it
    shutil.copytree(RECORDS / "fedgmh" / "seed0", tiny / RUNS / "fedgmh" / "seed1")
    plan = load_plan(["tiny.yaml"], [])
    cost = plan_cost(plan)
    assert cost.runs == 4 and cost.reused == {"results/tiny/runs": 1, "store": 1}  # the results folder counts first
    assert sorted(run.run_dir for run in cost.to_train) == [f"{RUNS}/fedavg/seed1", f"{RUNS}/fedgmh/seed1"]
    # the same rounds, epochs and join ratio as the records: each run takes its algorithm's record's time
    assert cost.estimate.cpu_seconds == pytest.approx(_wall("fedavg") + _wall("fedgmh"))
    assert cost.estimate.cpu_nearest == {} and cost.estimate.gpu_missing == ["mnist"]  # no benchmarks/ here

    assert main(["plan", "--configfile", "tiny.yaml", "--list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "plan tiny: 4 training runs: 2 reused (1 from results/tiny/runs, 1 from store), 2 to train"
    assert out[1].startswith(f"on a CPU: about {duration(_wall('fedavg') + _wall('fedgmh'))} for 2 run(s)")
    assert out[2] == "on one GPU: no estimate, no rate measured for mnist or a dataset like it (benchmarks/gpu_throughput.csv)"
    assert out[3:] == [f"to train: {RUNS}/fedavg/seed1", f"to train: {RUNS}/fedgmh/seed1"]


def test_a_changed_run_is_not_reused_and_its_time_scales_with_its_work(tiny: Path) -> None:
    cost = plan_cost(load_plan(["tiny.yaml"], ["rounds=16", "join_ratio=0.4"]))
    assert cost.reused == {} and len(cost.to_train) == 4
    assert cost.estimate.cpu_seconds == pytest.approx(2 * 2 * 2 * (_wall("fedavg") + _wall("fedgmh")))  # 2 seeds, 2x rounds, 2x ratio


def test_bad_config_is_one_line(tiny: Path, capsys) -> None:
    assert main(["plan", "--configfile", "nowhere.yaml"]) == 2
    assert main(["plan", "--configfile", "tiny.yaml", "--config", "rounds"]) == 2
    assert main(["plan", "--configfile", "tiny.yaml", "--config", "rounds=0"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3 and "nowhere.yaml" in lines[0] and "'rounds' is not KEY=VALUE" in lines[1] and "rounds" in lines[2]


def test_the_dry_run_imports_no_torch(tiny: Path) -> None:
    code = ("import sys\n"
            "from fedgmh.plan_cost import cost_lines, load_plan, plan_cost\n"
            "plan = load_plan(['tiny.yaml'], []); print(cost_lines(plan, plan_cost(plan))[0]); print('torch' in sys.modules)")
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tiny)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["plan tiny: 4 training runs: 2 reused (1 from results/tiny/runs, 1 from store), 2 to train",
                                        "False"]


def test_durations_read_as_a_person_would() -> None:
    assert [duration(s) for s in (0.4, 59, 61, 3600, 3721)] == ["1 s", "59 s", "2 min", "1 h 00 min", "1 h 03 min"]


def test_plan_from_a_subfolder_says_to_run_from_the_repository_root(monkeypatch, capsys) -> None:
    monkeypatch.chdir(REPO / "docs")
    assert main(["plan", "--configfile", "../config/mini.yaml"]) != 0
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and error[0].endswith("run from the repository root, the folder with the Snakefile"), error
