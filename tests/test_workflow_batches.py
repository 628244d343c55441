"""Several runs per training job (config `runs_per_job`): the batch rules of workflow/rules/train.smk.

The runs of a batch (`Plan.train_batches`) are made by their batch job alone, which writes every run's
outputs of rule train; 1 (the default) leaves the DAG as it was: rule train only. End to end on the
embedded `digits` set: a batch job's records equal those of the same runs trained one job each, and
editing one run retrains the batch job, whose other runs reuse their stored records.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import yaml
from conftest import SMOKE, job_counts, snakemake, tiny_config
from conftest import load_config as load

from fedgmh.plan import Plan

REPO = Path(__file__).resolve().parents[1]


def dry_run(workdir: Path, *args: str) -> str:
    result = snakemake(workdir, "-n", "all_tables", "--cores", "1", *args, timeout=180)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    return out


def job_outputs(out: str) -> dict[str, list[set[str]]]:
    """The outputs of each job of a dry run, by rule."""
    jobs: dict[str, list[set[str]]] = {}
    for rule, outputs in re.findall(r"^rule (\w+):\n(?:    input: .*\n)?    output: (.*)$", out, flags=re.M):
        jobs.setdefault(rule, []).append(set(outputs.split(", ")))
    return jobs


def run_outputs(plan: Plan, run_dir: str) -> set[str]:
    return {f"{run_dir}/metrics.csv", f"{run_dir}/run.json", plan.stored_marker(run_dir)}


def test_batch_jobs_make_their_runs_outputs_and_rule_train_the_others(tmp_path: Path) -> None:
    out = dry_run(tmp_path, "-p", "--configfile", str(SMOKE), "--config", "runs_per_job=3")
    plan = Plan(load("smoke.yaml", runs_per_job=3), basedir=REPO)
    jobs = job_outputs(out)
    assert plan.train_batches and len(jobs) > 2
    for index, batch in enumerate(plan.train_batches):
        assert jobs[f"train_batch_{index}"] == [set().union(*(run_outputs(plan, run.run_dir) for run in batch))]
        assert job_counts(out)[f"train_batch_{index}"] == 1
    batched = {run.run_dir for batch in plan.train_batches for run in batch}
    alone = [run_dir for run_dir in plan.train_jobs if run_dir not in batched]
    assert sorted(jobs["train"], key=sorted) == sorted((run_outputs(plan, d) for d in alone), key=sorted)
    assert job_counts(out)["train"] == len(alone) == len(plan.train_jobs) - len(batched)
    command = next(line for line in out.splitlines() if "fedgmh train-group logs/smoke/train/table2/digits_c2_a0.5/batch0.runs" in line)
    assert "printf '%s\\n' '--dataset digits" in command and command.count("--put-record") == len(plan.train_batches[0])


def test_a_batch_job_on_a_gpu_takes_one_gpu_slot_and_its_runs_summed_runtime(tmp_path: Path) -> None:
    out = dry_run(tmp_path, "-p", "--configfile", str(SMOKE), "--config", "runs_per_job=3", "device=cuda", "--resources", "gpu=1")
    plan = Plan(load("smoke.yaml", runs_per_job=3, device="cuda"), basedir=REPO)
    blocks = {rule: block for rule, block in re.findall(r"^rule (train_batch_\d+):\n((?:    .*\n)+)", out, flags=re.M)}
    assert len(blocks) == len(plan.train_batches)
    for index, batch in enumerate(plan.train_batches):
        assert re.search(rf"resources: .*gpu=1, runtime={plan.batch_runtime(batch)},", blocks[f"train_batch_{index}"])
    command = next(line for line in out.splitlines() if "fedgmh train-group" in line)
    assert command.count("--device cuda:auto --jobs-per-gpu 1") == command.count("--put-record") >= 2


def test_one_run_per_job_leaves_the_dag_as_it_was(tmp_path: Path) -> None:
    default = job_counts(dry_run(tmp_path, "--configfile", str(SMOKE)))
    assert job_counts(dry_run(tmp_path, "--configfile", str(SMOKE), "--config", "runs_per_job=1")) == default
    assert default["train"] == len(Plan(load("smoke.yaml"), basedir=REPO).train_jobs) and not any("batch" in k for k in default)


RUNS = [f"results/batch/runs/table2/digits_c2_a0.5/{algorithm}/seed{seed}" for algorithm in ("fedavg", "fedprox") for seed in (0, 1)]
MARKERS = [run.replace("/runs/", "/stored/") + ".done" for run in RUNS]


def make(workdir: Path, config: dict) -> str:
    path = workdir / "batch.yaml"
    path.write_text(yaml.safe_dump(config))
    result = snakemake(workdir, *MARKERS, "--cores", "1", "--configfile", str(path))
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    return out


def metrics(folder: Path) -> pd.DataFrame:
    frame = pd.read_csv(folder / "metrics.csv")
    return frame.drop(columns=[c for c in ("seconds",) if c in frame])


def test_a_batch_job_trains_each_run_as_its_own_job_would_and_an_edit_retrains_only_the_edited_run(tmp_path: Path) -> None:
    # vectorise on: the runs' clients really share steps (on CPU it is off by default)
    config = tiny_config("batch", ["fedavg", "fedprox"], rounds=2, seeds=[0, 1], train_options={"vectorise": "on"})
    batched, alone = tmp_path / "batched", tmp_path / "alone"
    batched.mkdir(), alone.mkdir()
    out = make(batched, {**config, "runs_per_job": 4})
    assert job_counts(out)["train_batch_0"] == 1 and "train" not in job_counts(out)
    for made in ("data/digits.npz", "results/batch/partitions/digits_c2_a0.5.npz"):  # in this order: mtimes kept
        (alone / made).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(batched / made, alone / made)
    make(alone, config)
    for run in RUNS:  # the tolerance of tests/test_group.py
        pd.testing.assert_frame_equal(metrics(batched / run), metrics(alone / run), check_exact=False, rtol=1e-3, atol=1e-4)
        a, b = (json.loads((folder / run / "run.json").read_text()) for folder in (batched, alone))
        assert a["config"] == b["config"] and a["engine_options"] == b["engine_options"] and a["workflow"] == b["workflow"]
        assert (batched / "paper_artifacts/batch/runs" / run.split("/runs/")[1] / "run.json").is_file()  # --put-record
    assert (batched / "logs/batch/train/table2/digits_c2_a0.5/batch0.log").is_file()
    assert not (batched / "logs/batch/train/table2/digits_c2_a0.5/fedavg").exists()  # no job of rule train

    # FedProx's mu edited: the batch job runs again; FedAvg's runs come back from the store, FedProx's train
    before = {run: json.loads((batched / run / "run.json").read_text()) for run in RUNS}
    edited = {**config, "runs_per_job": 4, "algorithm_options": {**config["algorithm_options"], "fedprox": {"mu": 0.01}}}
    out = make(batched, edited)
    assert job_counts(out)["train_batch_0"] == 1
    log = (batched / "logs/batch/train/table2/digits_c2_a0.5/batch0.log").read_text()
    assert log.count("reused the record") == 2 and "fedavg" in log
    after = {run: json.loads((batched / run / "run.json").read_text()) for run in RUNS}
    for run in RUNS:
        if "/fedavg/" in run:
            assert after[run]["started_utc"] == before[run]["started_utc"]  # not trained again
        else:
            assert after[run]["algorithm_options"]["mu"] == 0.01 and after[run]["started_utc"] != before[run]["started_utc"]
    result = snakemake(batched, *MARKERS, "-n", "--cores", "1", "--configfile", str(batched / "batch.yaml"))
    assert "Nothing to be done" in result.stdout + result.stderr


def test_the_lease_commands_train_a_batchs_chosen_runs_in_one_train_group_command(tmp_path: Path) -> None:
    """`fedgmh plan --commands` with runs_per_job: the chosen runs of one batch
    in one `fedgmh train-group` command, its runs file holding each run's own `fedgmh train` arguments;
    a batch's lone chosen run keeps its own `fedgmh train` command."""
    import shlex
    import subprocess

    from fedgmh.cli_plan import train_commands

    config = load("smoke.yaml")
    alone, grouped = Plan(config, basedir=REPO), Plan(config | {"runs_per_job": 2}, basedir=REPO)
    batch = next(b for b in grouped.train_batches if len(b) == 2)
    lone = next(run for b in grouped.train_batches for run in b if run not in batch)
    chosen = [batch[0].run_dir, batch[1].run_dir, lone.run_dir]
    first, second, third = (line.split("\t") for line in train_commands(grouped, chosen))
    single = [line.split("\t") for line in train_commands(alone, chosen)]
    assert third == single[2]  # its batch partner was not chosen
    assert first[1] == second[1] == grouped.batch_files(grouped.train_batches.index(batch), batch)[0] and second[4] == ""
    runs_file = grouped.batch_files(grouped.train_batches.index(batch), batch)[1]
    assert first[4].endswith(f"fedgmh train-group {runs_file} > {first[1]} 2>&1")
    written = subprocess.run(first[4].split(" && ")[0].replace(f"> {runs_file}", ""), shell=True, capture_output=True,
                             text=True, check=True).stdout.splitlines()
    assert written == [shlex.join(shlex.split(cols[4].split(" > ")[0])[2:]) for cols in single[:2]]
