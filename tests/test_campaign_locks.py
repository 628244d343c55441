"""The campaign never removes a live Snakemake's lock: real Snakemakes started in each form (relative
--directory, a symlinked folder, -d, --directory=, python -m, a renamed link) keep theirs, and so do
locks it cannot show to be a killed campaign Snakemake's own; the lock of a campaign Snakemake
killed by SIGKILL is removed (fedgmh.snakemake_locks)."""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import SNAKEFILE, tiny_config

from fedgmh import snakemake_locks
from fedgmh.campaign import clear_stale_snakemake_lock, load_campaign, running_runs, snakemake_command
from fedgmh.errors import UserError
from fedgmh.snakemake_locks import ALIVE, LOCKS, OWNED, hold_alive, record_own_locks

SNAKEMAKE = Path(sys.executable).parent / "snakemake"
UNLOCK = ["snakemake", "--unlock", "--directory", "repo"]
#: a workflow of its own (not this project's: it takes no ALIVE lock), whose one job sleeps
FOREIGN = 'rule busy:\n    output: "busy.txt"\n    shell: "sleep 120 && touch {output}"\n'


def _free(path: Path) -> bool:
    """Whether no process holds the kernel lock on `path` (a killed process group lets go of it only
    when its last member is gone, which on a loaded machine can take a moment)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def wait_for(condition, what: str, seconds: float = 90) -> None:
    deadline = time.time() + seconds
    while not condition():
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def stop(process: subprocess.Popen) -> None:
    """Kill PROCESS and, when it leads a session of its own (start_new_session), its children."""
    if process.poll() is None and os.getpgid(process.pid) == process.pid:
        os.killpg(process.pid, signal.SIGKILL)
    process.kill()
    process.wait()


def claimed_by_a_dead_campaign(repo: Path) -> None:
    """OWNED names every lock file in REPO as a gone campaign Snakemake's, so only the checks for live
    Snakemakes stand between them and removal."""
    record_own_locks(sorted(path.name for path in (repo / LOCKS).iterdir()), repo, pid=dead_pid())


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """tmp/repo holding the foreign Snakefile, its ALIVE file free (as after this workflow's last call)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (tmp_path / "Snakefile").write_text(FOREIGN)
    os.close(hold_alive(repo))
    return repo


def forms(tmp_path: Path) -> dict[str, list[str]]:
    link = tmp_path / "bin" / "sm"
    link.parent.mkdir(exist_ok=True)
    if not link.exists():
        link.symlink_to(shutil.which("snakemake") or SNAKEMAKE)
    (tmp_path / "linked").is_symlink() or (tmp_path / "linked").symlink_to(tmp_path / "repo")
    common = ["-s", str(tmp_path / "Snakefile"), "--cores", "1"]
    return {
        "relative --directory": [str(SNAKEMAKE), *common, "--directory", "repo"],
        "symlinked folder": [str(SNAKEMAKE), *common, "--directory", "linked"],
        "-d": [str(SNAKEMAKE), *common, "-d", "repo"],
        "--directory=": [str(SNAKEMAKE), *common, "--directory=repo"],
        "python -m": [sys.executable, "-m", "snakemake", *common, "--directory", "repo"],
        "renamed link": [str(link), *common, "--directory", "repo"],
    }


@pytest.mark.parametrize("form", ["relative --directory", "symlinked folder", "-d", "--directory=", "python -m",
                                  "renamed link"])
def test_a_live_snakemake_keeps_its_lock_however_it_was_started(repo: Path, form: str) -> None:
    tmp_path = repo.parent
    process = subprocess.Popen(forms(tmp_path)[form], cwd=tmp_path, start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: (repo / LOCKS).is_dir() and any((repo / LOCKS).glob("*.lock")), "its lock files")
        claimed_by_a_dead_campaign(repo)
        before = sorted((repo / LOCKS).iterdir())
        for base in (repo, tmp_path / "linked"):
            with pytest.raises(UserError) as err:
                clear_stale_snakemake_lock(base, UNLOCK)
            line = str(err.value)
            assert f"Snakemake's lock {repo / LOCKS} is kept" in line and f"process {process.pid} (" in line
            assert "`snakemake --unlock --directory repo`" in line and "\n" not in line
        assert sorted((repo / LOCKS).iterdir()) == before
    finally:
        stop(process)


def test_a_process_holding_the_alive_lock_keeps_the_lock(repo: Path) -> None:
    """A Snakemake of this workflow is caught by its kernel lock alone, whatever its command line."""
    (repo / LOCKS).mkdir(parents=True)
    (repo / LOCKS / "0.output.lock").write_text("results/x\n")
    claimed_by_a_dead_campaign(repo)
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from fedgmh.snakemake_locks import hold_alive; "
                               "hold_alive(); print('held', flush=True); time.sleep(60)"], cwd=repo, stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline() == b"held\n"
        with pytest.raises(UserError, match=f"a Snakemake of this workflow holds {repo / ALIVE}"):
            clear_stale_snakemake_lock(repo, UNLOCK)
    finally:
        stop(holder)
    removed: list[str] = []
    clear_stale_snakemake_lock(repo, UNLOCK, removed.append)
    assert not (repo / LOCKS / "0.output.lock").exists() and "removed Snakemake's lock" in removed[0]


@pytest.mark.parametrize(("spoil", "seen"), [
    (lambda repo: (repo / OWNED).unlink(), "not left by a campaign on this host"),
    (lambda repo: (repo / LOCKS / "1.input.lock").write_text("x\n"), "1.input.lock was not left by a campaign on this host"),
    (lambda repo: (repo / LOCKS / "0.output.lock").write_text("other\n"), "0.output.lock was not left by a campaign"),
    (lambda repo: (repo / OWNED).write_text((repo / OWNED).read_text().replace(socket.gethostname(), "node7")),
     "left by a Snakemake on host 'node7'"),
    (lambda repo: record_own_locks(["0.output.lock"], repo, pid=os.getpid()), f"its Snakemake, pid {os.getpid()}, still runs"),
    (lambda repo: (repo / ALIVE).unlink(), "cannot open"),
    (lambda repo: (repo / OWNED).write_text("[]"), "cannot be read"),
])
def test_a_lock_not_shown_to_be_a_dead_campaigns_own_is_kept(repo: Path, spoil, seen: str) -> None:
    (repo / LOCKS).mkdir(parents=True)
    (repo / LOCKS / "0.output.lock").write_text("results/x\n")
    claimed_by_a_dead_campaign(repo)
    time.sleep(0.01)  # a rewritten file gets another mtime
    spoil(repo)
    with pytest.raises(UserError, match="is kept") as err:
        clear_stale_snakemake_lock(repo, UNLOCK)
    assert seen in str(err.value)
    assert (repo / LOCKS / "0.output.lock").is_file()


def test_without_a_readable_proc_the_lock_is_kept(repo: Path, monkeypatch) -> None:
    (repo / LOCKS).mkdir(parents=True)
    (repo / LOCKS / "0.output.lock").write_text("results/x\n")
    claimed_by_a_dead_campaign(repo)
    monkeypatch.setattr(snakemake_locks, "PROC", repo / "no-proc")
    with pytest.raises(UserError, match="is kept: cannot read /proc"):
        clear_stale_snakemake_lock(repo, UNLOCK)
    assert (repo / LOCKS / "0.output.lock").is_file()


def test_the_lock_of_a_killed_campaign_snakemake_is_removed(tmp_path: Path) -> None:
    """The campaign's own Snakemake call of this workflow, killed by SIGKILL with its jobs after it
    took its lock: its lock files are recorded as its own, and the next campaign removes them."""
    config = tiny_config("camp", ["fedavg"], rounds=50, seeds=[0])
    (tmp_path / "camp.yaml").write_text(yaml.safe_dump(config))
    campaign = tmp_path / "campaign.yaml"
    campaign.write_text(yaml.safe_dump({"config": "camp.yaml", "groups": [{"runs": ["table2/digits_c2_a0.5/fedavg/seed0"]}]}))
    entry = load_campaign(campaign, tmp_path, SNAKEFILE)[0]
    command = snakemake_command([entry.target], "camp.yaml", [f"campaign={campaign}"], 1, SNAKEFILE, tmp_path)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    process = subprocess.Popen(command, cwd=tmp_path.parent, env=env, start_new_session=True,  # --directory tmp_path
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: (tmp_path / OWNED).is_file(), "the campaign Snakemake's record of its locks", 180)
        with pytest.raises(UserError, match="is kept: a Snakemake of this workflow holds"):
            clear_stale_snakemake_lock(tmp_path, UNLOCK)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    left = sorted(path.name for path in (tmp_path / LOCKS).iterdir())
    assert left == ["0.input.lock", "0.output.lock"]
    wait_for(lambda: not any(run.is_relative_to(tmp_path) for run in running_runs(tmp_path)), "its jobs to end")
    wait_for(lambda: _free(tmp_path / ALIVE), "the last of its processes to let go of the workflow's lock")
    said: list[str] = []
    clear_stale_snakemake_lock(tmp_path, UNLOCK, said.append)
    assert not list((tmp_path / LOCKS).iterdir()) and said == [
        f"campaign: removed Snakemake's lock of {tmp_path.resolve()} (left by a campaign's Snakemake that was killed)"]

