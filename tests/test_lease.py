"""tools/lease/chunk.sh: the workflow in budgeted calls, as on a leased GPU machine (the tests that run
snakemake or train are slow: `pytest -m slow tests/test_lease.py`)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]


def _checkout(tmp_path: Path) -> Path:
    """What the device tool sends: the repository's workflow, configs and tools (the code comes from
    the installed package)."""
    root = tmp_path / "repo"
    root.mkdir()
    for name in ("Snakefile", "workflow", "config", "reference", "tools"):
        source = REPO / name
        (shutil.copytree if source.is_dir() else shutil.copy)(source, root / name)
    (root / "profiles").symlink_to("workflow/profiles")
    config = yaml.safe_load((REPO / "config" / "smoke.yaml").read_text())  # four runs of 6 rounds
    config.update(name="lease", rounds=6, figures={}, uploads_to_target=None, layer_weights=None, rounds_to_target=None,
                  official_reading={})
    config["experiments"] = {"table2": {**config["experiments"]["table2"], "algorithms": ["fedavg", "fedgmh"], "seeds": [0, 1]}}
    (root / "config" / "lease.yaml").write_text(yaml.safe_dump(config))
    return root


def _carry(root: Path, parts: dict[str, bytes]) -> None:
    """Replace .lease/cifar100 by these files, as a call that carries them."""
    shutil.rmtree(root / ".lease", ignore_errors=True)
    (root / ".lease" / "cifar100").mkdir(parents=True)
    for name, data in parts.items():
        (root / ".lease" / "cifar100" / name).write_bytes(data)


def _chunk(root: Path, out: Path, budget: int, jobs: int = 2) -> str:
    out.mkdir()
    env = dict(os.environ, LEASE_CONFIG="config/lease.yaml", LEASE_JOBS=str(jobs), OUT=str(out),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    done = subprocess.run(["bash", "tools/lease/chunk.sh", str(budget)], cwd=root, env=env, capture_output=True, text=True, timeout=budget + 120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.slow
def test_chunks_join_the_data_parts_resume_and_send_back_every_finished_record(tmp_path: Path) -> None:
    root = _checkout(tmp_path)
    whole = os.urandom(3000)
    parts = {"part-00": whole[:2000], "part-01": whole[2000:]}
    sums = "".join(f"{hashlib.sha256(data).hexdigest()}  {name}\n" for name, data in parts.items())
    checks = {"SHA256SUMS": sums.encode(), "cifar100.npz.sha256": (hashlib.sha256(whole).hexdigest() + "\n").encode()}

    _carry(root, {**checks, "part-00": parts["part-00"]})
    first = _chunk(root, tmp_path / "out1", 60)  # 15 s of training: cut off, or not even started
    assert "cifar100.npz: 1 of 2 parts here so far" in first
    assert not (root / "results" / "lease" / "mirror" / "cifar100.npz").exists()

    _carry(root, {"part-01": parts["part-01"]})  # the first part stays on the machine
    second = _chunk(root, tmp_path / "out2", 600)
    assert "cifar100.npz joined from its parts" in second
    assert (root / "results" / "lease" / "mirror" / "cifar100.npz").read_bytes() == whole
    assert "every run of config/lease.yaml is done" in second, second
    assert "records: 4 finished runs of lease" in second

    with tarfile.open(tmp_path / "out2" / "records.tar.gz") as archive:
        names = archive.getnames()
        archive.extractall(tmp_path / "back", filter="data")
    assert sorted(n for n in names if n.endswith("run.json")) == sorted(
        f"runs/table2/digits_c2_a0.5/{a}/seed{s}/run.json" for a in ("fedavg", "fedgmh") for s in (0, 1))
    assert not [n for n in names if not n.endswith((".csv", "run.json"))]  # no checkpoints, logs or temporaries
    for record in (tmp_path / "back" / "runs").rglob("run.json"):  # each exactly the run's own folder there
        trained = root / "results" / "lease" / "runs" / record.parent.relative_to(tmp_path / "back" / "runs")
        assert (record.parent / "metrics.csv").read_bytes() == (trained / "metrics.csv").read_bytes()

    store = tmp_path / "store"
    merged = subprocess.run([Path(sys.executable).parent / "fedgmh", "store", "merge", str(tmp_path / "back" / "runs"), "--into", str(store)],
                            capture_output=True, text=True)
    assert merged.returncode == 0 and "4 added, 0 already present, 0 conflict(s)" in merged.stdout, merged.stdout + merged.stderr
    third = _chunk(root, tmp_path / "out3", 120)  # nothing left: nothing trains, the same records come back
    assert "every run of config/lease.yaml is done" in third and "records: 4 finished runs" in third


def _first_trained(log: str, count: int) -> list[str]:
    """The (algorithm, seed) of the first `count` training jobs Snakemake started, as its log names them."""
    started = [line.split("algorithm=")[1].replace(", seed=", "/seed").strip()
               for line in log.splitlines() if "wildcards: experiment=table2" in line]
    return started[:count]


@pytest.mark.slow
def test_a_call_starts_the_runs_with_a_checkpoint_first(tmp_path: Path) -> None:
    """Runs cut off by the last call go before any fresh run (the train rule's priority). Their
    checkpoints here are not loadable, so those two jobs stop with an error, which is all the check
    needs: which jobs started first. A checkpoint of another config of the same name is no target."""
    root = _checkout(tmp_path)
    config = yaml.safe_load((root / "config" / "lease.yaml").read_text())
    config["experiments"]["table2"]["seeds"] = [0, 1, 2, 3]
    config["threads_per_job"] = 3  # all of chunk.sh's --cores (jobs + 2): one training job at a time on a CPU
    (root / "config" / "lease.yaml").write_text(yaml.safe_dump(config))
    cut_off = ["fedgmh/seed3", "fedavg/seed2"]
    runs = root / "results" / "lease" / "runs"
    for folder in [runs / "table2" / "digits_c2_a0.5" / run for run in cut_off] + [runs / "table9" / "other" / "fedavg" / "seed0"]:
        folder.mkdir(parents=True)  # the last: another config's run (same name), which this one cannot build
        (folder / "checkpoint.pt").write_bytes(b"cut off by the last call")
    said = _chunk(root, tmp_path / "out", 240, jobs=1)
    log = (tmp_path / "out" / "snakemake.log").read_text()
    assert sorted(_first_trained(log, 2)) == sorted(cut_off), log
    assert len(_first_trained(log, 8)) == 8  # and then every other run
    failed = (tmp_path / "out" / "failed.log").read_text()  # the two unloadable checkpoints, reported
    assert sorted(line.split("/", 5)[5].removesuffix(".log") for line in failed.splitlines() if line.startswith("== ")) == sorted(cut_off)
    assert "failed training jobs: 2" in said


def _train_logs(out: Path) -> dict[str, str]:
    """The training jobs' logs a call sent back, by run ('fedavg/seed0')."""
    with tarfile.open(out / "train_logs.tar.gz") as archive:
        return {"/".join(Path(m.name).parts[-2:]).removesuffix(".log"): archive.extractfile(m).read().decode()
                for m in archive.getmembers() if m.isfile()}


@pytest.mark.slow
def test_a_run_cut_at_the_budget_finishes_its_round_and_the_next_call_resumes_from_the_next(tmp_path: Path) -> None:
    """No periodic snapshot (checkpoint_every is past the run's end): what the next call resumes
    from is the snapshot the run took when chunk.sh's SIGTERM came."""
    import re

    root = _checkout(tmp_path)
    config = yaml.safe_load((root / "config" / "lease.yaml").read_text())
    config.update(rounds=100000, checkpoint_every=1000000)
    config["experiments"]["table2"] = {**config["experiments"]["table2"], "algorithms": ["fedavg"], "seeds": [0]}
    (root / "config" / "lease.yaml").write_text(yaml.safe_dump(config))
    first = _chunk(root, tmp_path / "out1", 75, jobs=1)
    assert "snakemake: stopped at the budget" in first, first
    log = _train_logs(tmp_path / "out1")["fedavg/seed0"]
    from fedgmh.stopping import NOTICE

    assert NOTICE in log, log
    stopped = re.search(r"fedgmh train: stopped by SIGTERM after round (\d+); the same command resumes from the checkpoint", log)
    assert stopped, log
    last_played = max(int(r) for r in re.findall(r"\[fedavg\] round (\d+)/", log))
    assert int(stopped.group(1)) == last_played  # the round the signal came in was finished, and no other begun
    second = _chunk(root, tmp_path / "out2", 70, jobs=1)
    resumed = _train_logs(tmp_path / "out2")["fedavg/seed0"]
    assert f"at round {last_played + 1}\n" in resumed, resumed


def _direct(root: Path, out: Path, *args: str, **env: str) -> str:
    out.mkdir(exist_ok=True)
    environment = dict(os.environ, OUT=str(out), LEASE_MPS="0", **env,
                       PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    done = subprocess.run(["bash", "tools/lease/direct.sh", *args], cwd=root, env=environment, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.slow
def test_direct_trains_prepared_runs_without_snakemake_and_sends_their_records_back(tmp_path: Path) -> None:
    """prepare_direct.sh here, then direct.sh there (a tree with no results, data or logs, as the
    machine receives it): the runs' commands from the plan (`fedgmh plan --commands`), their
    partitions drawn here, the runs trained several at a time after the call that started them,
    their records back."""
    root = _checkout(tmp_path)
    config = yaml.safe_load((root / "config" / "lease.yaml").read_text())
    (root / "config" / "lease.yaml").write_text(yaml.safe_dump({**config, "data_root": "my data"}))  # the config's, with a space
    (tmp_path / "mirror").mkdir()
    runs = ["results/lease/runs/table2/digits_c2_a0.5/fedavg/seed0", "results/lease/runs/table2/digits_c2_a0.5/fedgmh/seed1"]
    environment = dict(os.environ, DEVICE="cpu", PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    done = subprocess.run(["bash", "tools/lease/prepare_direct.sh", str(tmp_path / "mirror"), "config/lease.yaml", *runs],
                          cwd=root, env=environment, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 runs, 0 data part(s)" in done.stdout
    assert (root / ".lease" / "direct" / "meta" / "data_root").read_text() == "my data\n"
    for made_here in ("results", "logs", "my data", ".snakemake"):
        shutil.rmtree(root / made_here, ignore_errors=True)
    keep = tmp_path / "keep"
    _direct(root, tmp_path / "out", "start", "2", "0", LEASE_KEEP=str(keep))
    said = _direct(root, tmp_path / "out", "collect", "500", LEASE_KEEP=str(keep))
    assert "finished runs: 2 of 2" in said, said
    with tarfile.open(tmp_path / "out" / "records.tar.gz") as archive:
        archive.extractall(tmp_path / "back", filter="data")
    merged = subprocess.run([sys.executable, "-m", "fedgmh.cli", "store", "merge", str(tmp_path / "back" / "lease" / "runs"),
                             "--into", str(tmp_path / "store")], capture_output=True, text=True)
    assert "2 added, 0 already present, 0 conflict(s), 0 invalid" in merged.stdout + merged.stderr, merged.stdout + merged.stderr
    for run in runs:
        record = yaml.safe_load((tmp_path / "back" / run.removeprefix("results/") / "run.json").read_text())
        assert record["config"]["rounds"] == 6 and record["config"]["seed"] == int(run[-1])
    # a later call prepared for other runs on the same machine counts and shows only its own runs
    commands = root / ".lease" / "direct" / "meta" / "runs.tsv"
    commands.write_text(commands.read_text().splitlines(keepends=True)[1])
    said = _direct(root, tmp_path / "out", "collect", "0", LEASE_KEEP=str(keep))
    assert "finished runs: 1 of 1" in said and said.count("/train/") == 1, said


@pytest.mark.slow
def test_direct_joins_the_data_parts_only_when_every_part_is_there_and_intact(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    (root / "tools").mkdir(parents=True)
    shutil.copytree(REPO / "tools" / "lease", root / "tools" / "lease")
    meta = root / ".lease" / "direct" / "meta"
    meta.mkdir(parents=True)
    (tmp_path / "mirror").mkdir()
    (tmp_path / "mirror" / "data.npz").write_bytes(os.urandom(5000))
    whole = subprocess.run(["tar", "cf", "-", "-C", str(tmp_path / "mirror"), "data.npz"], capture_output=True, check=True).stdout
    parts = {"part-00": whole[:4000], "part-01": whole[4000:]}
    (meta / "parts").write_text("2\n")
    (meta / "parts.sha256").write_text("".join(f"{hashlib.sha256(data).hexdigest()}  {name}\n" for name, data in parts.items()))
    (meta / "runs.tsv").write_text("")
    (meta / "datasets").write_text("")
    (meta / "partitions").mkdir()
    keep = tmp_path / "keep"
    for count, (name, data) in enumerate(parts.items(), start=1):  # one call each, as the device tool carries them
        for carried_before in (root / ".lease" / "direct").glob("part-*"):
            carried_before.unlink()
        (root / ".lease" / "direct" / name).write_bytes(data)
        assert f"parts here: {count} of 2" in _direct(root, tmp_path / "out", "store", LEASE_KEEP=str(keep))
    (root / ".lease" / "direct" / "part-01").unlink()  # the next call carries no part
    (keep / "parts" / "part-01").write_bytes(parts["part-01"][:-1] + b"x")  # damaged on the way
    damaged = subprocess.run(["bash", "tools/lease/direct.sh", "start", "1", "0"], cwd=root, capture_output=True, text=True,
                             env=dict(os.environ, OUT=str(tmp_path / "out"), LEASE_KEEP=str(keep), LEASE_MPS="0"))
    assert damaged.returncode == 1 and "a data part is missing or damaged" in damaged.stderr
    (keep / "parts" / "part-01").write_bytes(parts["part-01"])
    assert "data joined: data.npz" in _direct(root, tmp_path / "out", "start", "1", "0", LEASE_KEEP=str(keep))
    assert (keep / "mirror" / "data.npz").read_bytes() == (tmp_path / "mirror" / "data.npz").read_bytes()


def test_direct_puts_the_data_where_the_config_says(tmp_path: Path) -> None:
    """The runs read `--root <data_root>`: the data go there, not to data/ (a config's `data_root: my data`
    made every run fail)."""
    root = tmp_path / "repo"
    (root / "tools").mkdir(parents=True)
    shutil.copytree(REPO / "tools" / "lease", root / "tools" / "lease")
    meta = root / ".lease" / "direct" / "meta"
    (meta / "partitions").mkdir(parents=True)
    for name, text in (("parts", "0\n"), ("runs.tsv", ""), ("datasets", "digits\n"), ("data_root", "my data\n")):
        (meta / name).write_text(text)
    _direct(root, tmp_path / "out", "start", "1", "0", LEASE_KEEP=str(tmp_path / "keep"))
    assert (root / "my data" / "digits.npz").is_file() and not (root / "data").exists()


def _planned_and_printed(root: Path, runs: list[str], settings: list[str], start: str) -> tuple[list, list, dict]:
    """(`fedgmh plan --commands` rows of `runs`, the dry run's shell commands starting with `start`, the env)."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    planned = subprocess.run([sys.executable, "-m", "fedgmh.cli", "plan", *settings, "--commands", *runs], cwd=root,
                             capture_output=True, text=True, env=env)
    assert planned.returncode == 0, planned.stderr
    dry = subprocess.run([sys.executable, "-m", "snakemake", "-n", "-p", *(f"{run.rstrip('/')}/run.json" for run in runs), *settings,
                          "--cores", "1"], cwd=root, capture_output=True, text=True, env=env)
    printed = [line.removeprefix("Shell command: ") for line in (dry.stdout + dry.stderr).splitlines()
               if line.removeprefix("Shell command: ").startswith(start)]
    return [line.split("\t") for line in planned.stdout.splitlines()], printed, env


def test_the_plans_commands_are_the_train_jobs_word_for_word(tmp_path: Path) -> None:
    """What prepare_direct.sh hands direct.sh (`fedgmh plan --commands`) is the command the workflow's
    train job runs (its dry run prints it), with the run's folder, log, partition and dataset beside it."""
    root = _checkout(tmp_path)
    (root / "config" / "lease.yaml").write_text(yaml.safe_dump({**yaml.safe_load((root / "config" / "lease.yaml").read_text()),
                                                                "data_root": "my data"}))
    runs = ["results/lease/runs/table2/digits_c2_a0.5/fedgmh/seed1", "results/lease/runs/table2/digits_c2_a0.5/fedavg/seed0/"]
    settings = ["--configfile", "config/lease.yaml", "--config", "device=cpu", "jobs_per_gpu=3"]
    rows, printed, env = _planned_and_printed(root, runs, settings, "fedgmh train ")
    assert sorted(row[4] for row in rows) == sorted(printed) and len(printed) == 2, printed
    assert rows[0][:4] == [runs[0], "logs/lease/train/table2/digits_c2_a0.5/fedgmh/seed1.log",
                           "results/lease/partitions/digits_c2_a0.5.npz", "digits"]
    assert "--root 'my data'" in rows[0][4] and rows[0][4].endswith(" > logs/lease/train/table2/digits_c2_a0.5/fedgmh/seed1.log 2>&1")
    other = subprocess.run([sys.executable, "-m", "fedgmh.cli", "plan", *settings, "--commands", "results/lease/runs/table9/x/fedavg/seed0"],
                           cwd=root, capture_output=True, text=True, env=env)
    assert other.returncode == 2 and "is not a run that config 'lease' trains" in other.stderr


def test_the_plans_batch_command_is_the_batch_jobs_word_for_word(tmp_path: Path) -> None:
    """With runs_per_job, `fedgmh plan --commands` gives a batch's runs the command of the workflow's
    batch job (`fedgmh train-group` on its runs file), on the first run's line; the other's line has none."""
    root = _checkout(tmp_path)
    runs = ["results/lease/runs/table2/digits_c2_a0.5/fedavg/seed0", "results/lease/runs/table2/digits_c2_a0.5/fedavg/seed1"]
    settings = ["--configfile", "config/lease.yaml", "--config", "device=cpu", "runs_per_job=2"]
    rows, printed, _ = _planned_and_printed(root, runs, settings, "printf ")
    assert printed == [rows[0][4]] and "fedgmh train-group " in rows[0][4], printed
    assert rows[1][4] == "" and rows[0][1] == rows[1][1] and rows[0][1].endswith(".log")
