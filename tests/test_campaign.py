"""The campaign: its priority list is checked against its config, and `run_campaign` trains a tiny
config's runs in one Snakemake call, the cut-off one first and the others in the campaign's order
(the train rule's priority), resumed from its snapshot to the numbers of an uninterrupted run, each
record put into the store."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import SNAKEFILE, stopping_after_a_snapshot, tiny_config

from fedgmh import locks
from fedgmh.campaign import (CAMPAIGN_LOGS, load_campaign, next_runs, run_campaign, running_runs, snakemake_command,
                             state, with_default_overrides)
from fedgmh.cli import main
from fedgmh.errors import UserError

REPO = Path(__file__).resolve().parents[1]


def test_the_committed_campaign_names_runs_of_its_configs() -> None:
    entries = load_campaign(REPO / "config" / "campaign.yaml", REPO, SNAKEFILE)
    names = [entry.name for entry in entries]
    assert names[:3] == ["table2/cifar100_c5_a0.5/fedgmh/seed0", "table2/cifar100_c5_a0.5/fedper/seed0",
                         "table2/cifar100_c5_a0.5/fedamp/seed0"]
    assert {entry.config for entry in entries} == {"config/config.yaml"}  # one config: one Snakemake call
    assert {entry.plan.name for entry in entries} == {"paper"}  # one tree of records: paper_artifacts/paper/runs
    assert all(str(entry.record).startswith("paper_artifacts/paper/runs/") for entry in entries)


def write(tmp_path: Path, groups: list, config: str = "camp.yaml") -> Path:
    path = tmp_path / "campaign.yaml"
    path.write_text(yaml.safe_dump({"config": config, "groups": groups}))
    return path


def camp_config(tmp_path: Path) -> str:
    """camp.yaml in TMP_PATH (its name returned): FedAvg and FedPer on digits, 4 rounds, seeds 0 and 1."""
    config = tiny_config("camp", ["fedavg", "fedper"], rounds=4, seeds=[0, 1], checkpoint_every=1)
    (tmp_path / "camp.yaml").write_text(yaml.safe_dump(config))
    return "camp.yaml"


@pytest.mark.parametrize(("runs", "words"), [
    (["table2/digits_c2_a0.5/fedavg"], "is not experiment/setting/algorithm/seedN"),
    (["table2/digits_c2_a0.5/fedrod/seed0"], "is not a run of config 'camp'"),
    (["table2/digits_c2_a0.5/fedavg/seed0", "table2/digits_c2_a0.5/fedavg/seed0"], "listed twice"),
])
def test_a_bad_entry_is_refused_in_one_line(tmp_path: Path, runs: list, words: str) -> None:
    path = write(tmp_path, [{"runs": runs}], camp_config(tmp_path))
    with pytest.raises(UserError, match=words):
        load_campaign(path, tmp_path, SNAKEFILE)
    with pytest.raises(UserError, match="must have `runs` and optionally `title`"):
        load_campaign(write(tmp_path, [{"config": "camp.yaml", "runs": runs}]), tmp_path, SNAKEFILE)
    (tmp_path / "campaign.yaml").write_text(yaml.safe_dump({"groups": [{"runs": runs}]}))
    with pytest.raises(UserError, match="a `config` file and a non-empty list `groups`"):
        load_campaign(tmp_path / "campaign.yaml", tmp_path, SNAKEFILE)


@pytest.mark.parametrize(("text", "words"), [
    (b"config: camp.yaml\ngroups:\n  - runs: []\n", "groups[0].runs must be a non-empty list"),
    (b"config: camp.yaml\ngroups:\n  - runs: [a/b/c/seed0]\nextra: 1\n", "nothing else"),
    (b"config: camp.yaml\n# \xff\xfe\n", "cannot be read"),
])
def test_a_malformed_campaign_file_is_one_line(tmp_path: Path, capsys, text: bytes, words: str) -> None:
    """An empty group was an IndexError in `status`, a non-UTF-8 file a UnicodeDecodeError; an unknown key
    (a misspelt `groups`) passed unseen."""
    (tmp_path / "campaign.yaml").write_bytes(text)
    camp_config(tmp_path)
    argv = ["campaign", "status", "--file", str(tmp_path / "campaign.yaml"), "--directory", str(tmp_path), "--snakefile", str(SNAKEFILE)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1, err


def _train_jobs_started(output: str) -> list[str]:
    """algorithm/seedN of each training job, in the order Snakemake started them (its job lines)."""
    return [line.split("algorithm=")[1].replace(", seed=", "/seed").strip()
            for line in output.splitlines() if "wildcards: experiment=table2" in line]


def test_the_campaign_trains_cut_off_runs_first_then_in_its_order_and_resumes_them_exactly(tmp_path: Path, monkeypatch,
                                                                                            capfd) -> None:
    monkeypatch.chdir(tmp_path)  # the workflow's relative paths (data/, results/) are the campaign's folder's
    config = camp_config(tmp_path)
    runs = ["table2/digits_c2_a0.5/fedper/seed0", "table2/digits_c2_a0.5/fedavg/seed1", "table2/digits_c2_a0.5/fedavg/seed0"]
    path = write(tmp_path, [{"title": "tiny", "runs": runs}], config)
    entries = load_campaign(path, tmp_path, SNAKEFILE)
    assert [state(entry, tmp_path) for entry in entries] == ["to do"] * 3

    # the second entry was cut off after its snapshot of round 1 (as a killed session leaves it)
    cut = entries[1]
    subprocess.run(snakemake_command([cut.partition], config, [], 1, SNAKEFILE, tmp_path), check=True, capture_output=True)
    words = cut.plan.train_arguments(cut.run, cut.partition, 1)
    with stopping_after_a_snapshot():
        assert main(["train", *words, "--quiet"]) != 0
    assert state(cut, tmp_path) == "cut off"
    assert next_runs(entries, tmp_path) == [entries[1], entries[0], entries[2]]
    capfd.readouterr()

    lines: list[str] = []
    outcome = run_campaign(path, entries, 1, [], SNAKEFILE, tmp_path, say=lines.append)
    assert outcome == {"finished": [runs[1], runs[0], runs[2]], "left": []}
    assert "fedavg/seed1 resumes from its snapshot" in lines[0] and "fedper/seed0 starts" in lines[1]
    # one job at a time: Snakemake started the cut-off run first, then the others in the campaign's order
    # (fedper before fedavg, which Snakemake left to itself need not keep)
    assert _train_jobs_started(capfd.readouterr().err) == ["fedavg/seed1", "fedper/seed0", "fedavg/seed0"]
    assert [state(entry, tmp_path) for entry in entries] == ["done"] * 3

    # the resumed run's record: resumed, and the numbers of an uninterrupted run of the same settings
    record = json.loads((tmp_path / cut.record).read_text())
    assert record["resumed_from_round"] == 1 and record["workflow"]["config_name"] == "camp"
    fresh = tmp_path / "fresh"
    words[words.index("--out") + 1] = str(fresh)
    assert main(["train", *words, "--quiet", "--checkpoint-every", "0"]) == 0
    ours, theirs = pd.read_csv(cut.record.parent / "metrics.csv"), pd.read_csv(fresh / "metrics.csv")
    pd.testing.assert_frame_equal(ours.drop(columns="seconds"), theirs.drop(columns="seconds"))

    # nothing left: a second call trains nothing
    lines.clear()
    assert run_campaign(path, entries, 2, [], SNAKEFILE, tmp_path, say=lines.append) == {"finished": [], "left": []}
    assert lines == ["campaign: nothing to train (every run is done or running)"]


def test_status_lists_every_run(tmp_path: Path, capsys) -> None:
    config = camp_config(tmp_path)
    path = write(tmp_path, [{"title": "tiny", "runs": ["table2/digits_c2_a0.5/fedper/seed1"]}], config)
    assert main(["campaign", "status", "--file", str(path), "--directory", str(tmp_path), "--snakefile", str(SNAKEFILE)]) == 0
    out = capsys.readouterr().out
    assert "# tiny (camp.yaml)" in out and "table2/digits_c2_a0.5/fedper/seed1" in out and "0 done, 0 running, 0 cut off, 1 to do" in out


def test_a_record_of_other_settings_or_an_invalid_one_is_not_done(tmp_path: Path) -> None:
    """Only a valid record of exactly the entry's run counts as done: not one of a trial with other
    settings in its place, not a tampered one, and `--config` overrides count."""
    from fedgmh.campaign import record_problem

    config = camp_config(tmp_path)
    path = write(tmp_path, [{"runs": ["table2/digits_c2_a0.5/fedavg/seed0"]}], config)
    entry = load_campaign(path, tmp_path, SNAKEFILE)[0]
    assert record_problem(entry, tmp_path) == "no record"
    lines: list[str] = []
    assert run_campaign(path, [entry], 1, [], SNAKEFILE, tmp_path, say=lines.append)["finished"] == [entry.name]
    assert record_problem(entry, tmp_path) is None and state(entry, tmp_path) == "done"
    # the same campaign asked for 2 rounds: that record is not this run
    other = load_campaign(path, tmp_path, SNAKEFILE, ["rounds=2"])[0]
    assert "a record of other settings (record vs plan: rounds: 4 vs 2)" in record_problem(other, tmp_path)
    assert state(other, tmp_path) == "to do"
    # a tampered record is not done either
    run_json = tmp_path / entry.record
    record = json.loads(run_json.read_text())
    run_json.write_text(json.dumps({**record, "best_test_acc": 0.999}))
    assert record_problem(entry, tmp_path).startswith("invalid record") and state(entry, tmp_path) == "to do"


def test_one_campaign_at_a_time_and_a_stop_leaves_resumable_runs(tmp_path: Path) -> None:
    """A second `campaign run` in the same folder is refused; SIGTERM to the campaign reaches the
    training runs (they snapshot at the end of their round and stop), which are then "cut off": the
    next campaign takes them first (resumption itself: the test above)."""
    config = yaml.safe_load((tmp_path / camp_config(tmp_path)).read_text())
    config.update(rounds=400)  # long enough to be stopped mid-run
    (tmp_path / "camp.yaml").write_text(yaml.safe_dump(config))
    path = write(tmp_path, [{"runs": ["table2/digits_c2_a0.5/fedavg/seed0"]}])
    entry = load_campaign(path, tmp_path, SNAKEFILE)[0]
    command = [sys.executable, "-m", "fedgmh.cli", "campaign", "run", "--file", str(path), "--directory", str(tmp_path),
               "--snakefile", str(SNAKEFILE), "--jobs", "1"]
    campaign = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    snapshot, deadline = tmp_path / entry.snapshot, time.time() + 300
    while not snapshot.exists() and time.time() < deadline and campaign.poll() is None:
        time.sleep(0.2)
    assert snapshot.exists(), "no snapshot was written"
    second = subprocess.run(command, capture_output=True, text=True)
    assert second.returncode == 2 and "a campaign is already running" in second.stderr
    campaign.send_signal(signal.SIGTERM)
    out, _ = campaign.communicate(timeout=300)
    assert f"camp/{entry.name} not finished (log {entry.log}); the next `campaign run` resumes it from its snapshot" in out, out
    # `kill PID`, as the campaign says to stop it: exit 143 and one line, not "0 finished" and 0
    assert campaign.returncode == 143 and "fedgmh campaign: campaign stopped by SIGTERM (0 finished, 1 left)" in out, out
    assert snapshot.exists() and not (tmp_path / entry.run.run_dir / "run.json").exists()
    assert state(entry, tmp_path) == "cut off"


def one_entry(tmp_path: Path):
    path = write(tmp_path, [{"runs": ["table2/digits_c2_a0.5/fedavg/seed0"]}], camp_config(tmp_path))
    return path, load_campaign(path, tmp_path, SNAKEFILE)[0]


def test_a_run_is_running_only_while_a_live_train_process_of_this_folder_trains_it(tmp_path: Path) -> None:
    """Running: a live process whose command line is `... train ... --out RUN_DIR`, RUN_DIR read from
    its working folder; not one that trains the same relative folder of another checkout, nor one that has ended."""
    _, entry = one_entry(tmp_path)
    assert state(entry, tmp_path) == "to do"
    train = [sys.executable, "-c", "import time; time.sleep(60)", "train", "--out", entry.run.run_dir]
    (tmp_path / "other").mkdir()
    run, elsewhere = (subprocess.Popen(train, cwd=folder) for folder in (tmp_path, tmp_path / "other"))
    try:
        deadline = time.time() + 30
        while state(entry, tmp_path) != "running" and time.time() < deadline:
            time.sleep(0.1)
        assert state(entry, tmp_path) == "running"
        run.kill()
        run.wait()
        assert state(entry, tmp_path) == "to do"  # the other checkout's process trains its own folder
    finally:
        for process in (run, elsewhere):
            process.kill()
            process.wait()


def test_a_train_group_process_trains_the_runs_of_its_runs_file(tmp_path: Path) -> None:
    """A `fedgmh train-group RUNS` job (config runs_per_job) trains each `--out` of its runs file."""
    runs_file = tmp_path / "batch0.runs"
    runs_file.write_text("# two runs\n--dataset digits --out 'runs/a b' --seed 0\n--dataset digits --out runs/c --seed 1\n")
    group = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "train-group", runs_file.name], cwd=tmp_path)
    try:
        deadline = time.time() + 30
        while tmp_path / "runs" / "c" not in running_runs(tmp_path) and time.time() < deadline:
            time.sleep(0.1)
        assert {tmp_path / "runs" / "a b", tmp_path / "runs" / "c"} <= running_runs(tmp_path)
    finally:
        group.kill()
        group.wait()


def test_a_second_background_campaign_is_refused_with_a_non_zero_exit(tmp_path: Path, capsys) -> None:
    """Both `run --background` said "running (pid N)" and exited 0, the second dead already (the lock
    error only in its log): the process started holds the lock from its first instant."""
    path, _ = one_entry(tmp_path)
    command = ["campaign", "run", "--file", str(path), "--directory", str(tmp_path), "--snakefile", str(SNAKEFILE), "--background"]
    assert main(command) == 0
    pid = int(capsys.readouterr().out.split("(pid ")[1].split(")")[0])
    try:
        assert main(command) == 2
        err = capsys.readouterr().err
        assert f"a campaign is already running in {tmp_path}" in err and len(err.strip().splitlines()) == 1
    finally:
        os.killpg(pid, signal.SIGTERM)
        os.waitpid(pid, 0)
    # a campaign in the foreground holds the same lock
    fd = locks.hold(tmp_path / CAMPAIGN_LOGS / "campaign.lock", wait=False)
    try:
        assert fd is not None and main(command) == 2 and "already running" in capsys.readouterr().err
    finally:
        os.close(fd)


@pytest.mark.parametrize(("option", "words"), [(["--max-runs", "-2"], "--max-runs -2: at least 1"),
                                               (["--max-runs", "0"], "--max-runs 0: at least 1"),
                                               (["--jobs", "0"], "--jobs 0: at least 1")])
def test_limits_below_one_are_refused(tmp_path: Path, capsys, option: list, words: str) -> None:
    path, _ = one_entry(tmp_path)
    assert main(["campaign", "run", "--file", str(path), "--directory", str(tmp_path), "--snakefile", str(SNAKEFILE), *option]) == 2
    assert words in capsys.readouterr().err


def test_status_refuses_jobs_below_one(tmp_path: Path, capsys) -> None:
    """Its CPU-time estimate at --jobs 0 was printed as if it meant something."""
    path, _ = one_entry(tmp_path)
    assert main(["campaign", "status", "--file", str(path), "--directory", str(tmp_path), "--snakefile", str(SNAKEFILE),
                 "--jobs", "0"]) == 2
    assert "--jobs 0: at least 1" in capsys.readouterr().err


@pytest.mark.parametrize(("config", "words"), [
    ("- name: camp\n", "config file camp.yaml is not a mapping of config keys"),
    ("name: [camp\n", "config file camp.yaml cannot be read"),
    ({"rounds": -3}, "invalid configuration: rounds: -3 is less than the minimum of 1"),
])
def test_an_invalid_config_is_one_line(tmp_path: Path, capsys, config, words: str) -> None:
    """A non-mapping or malformed YAML config was a traceback; `rounds: -3` listed its runs as to do."""
    path, _ = one_entry(tmp_path)
    if isinstance(config, dict):
        config = yaml.safe_dump({**yaml.safe_load((tmp_path / "camp.yaml").read_text()), **config})
    (tmp_path / "camp.yaml").write_text(config)
    assert main(["campaign", "status", "--file", str(path), "--directory", str(tmp_path), "--snakefile", str(SNAKEFILE)]) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1, err


def test_a_job_stopped_after_making_its_outputs_keeps_them(tmp_path: Path) -> None:
    """Snakemake as the campaign runs it: a SIGTERM after a job has made its outputs (a run's record,
    filed in the store too) no longer deletes them as a failed job's."""
    rule = 'rule run:\n    output:\n        "out/run.json",\n    shell:\n        "echo {{}} > {output}; sleep 60"\n'
    (tmp_path / "Snakefile").write_text(rule)
    (tmp_path / "c.yaml").write_text("{}\n")
    command = snakemake_command(["out/run.json"], "c.yaml", [], 1, tmp_path / "Snakefile", tmp_path)
    process = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + 120
    made = tmp_path / "out" / "run.json"
    while not (made.exists() and made.read_text() == "{}\n") and time.time() < deadline and process.poll() is None:
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGTERM)  # as the campaign stops its runs
    assert process.wait(timeout=120) != 0
    assert (tmp_path / "out" / "run.json").read_text() == "{}\n"


def test_a_campaign_lays_out_cpu_runs_channels_last_unless_told_otherwise() -> None:
    assert with_default_overrides(["device=cpu"]) == ["cpu_channels_last=True", "device=cpu"]
    assert with_default_overrides(["cpu_channels_last=False", "device=cpu"]) == ["cpu_channels_last=False", "device=cpu"]


def test_the_partitions_are_drawn_before_any_run_starts(tmp_path: Path, monkeypatch) -> None:
    """A run whose partition is being drawn is not ready, and Snakemake would start a later run in its
    slot: the campaign makes the missing partitions in a call of their own first, and skips that call
    when they exist."""
    from fedgmh import campaign

    config = camp_config(tmp_path)
    runs = ["table2/digits_c2_a0.5/fedper/seed0", "table2/digits_c2_a0.5/fedavg/seed0"]
    entries = load_campaign(write(tmp_path, [{"runs": runs}], config), tmp_path, SNAKEFILE)
    calls: list[list[str]] = []
    monkeypatch.setattr(campaign, "_run_stoppable", lambda command, *args: calls.append(command) or 0)
    lines: list[str] = []
    run_campaign(tmp_path / "campaign.yaml", entries, 2, [], SNAKEFILE, tmp_path, say=lines.append)
    targets = [[word for word in command if word.startswith("results/")] for command in calls]
    assert targets == [[entries[0].partition], [entry.target for entry in entries]]
    assert "campaign: 1 partition(s) first, then the runs" in lines

    calls.clear()
    (tmp_path / entries[0].partition).parent.mkdir(parents=True)
    (tmp_path / entries[0].partition).write_bytes(b"")
    run_campaign(tmp_path / "campaign.yaml", entries, 2, [], SNAKEFILE, tmp_path, say=lines.append)
    assert [[word for word in command if word.startswith("results/")] for command in calls] == [
        [entry.target for entry in entries]]
