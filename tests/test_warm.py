"""The warm training server (fedgmh.warm): a run trained through it is the run of a fresh process,
errors and exit statuses come back unchanged, a client that finds no server trains itself, a killed
client leaves no training behind, and the server goes away when idle, told to stop, or orphaned."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import Digits, train_args, wait_for
from test_cards import BLOCKER
from test_warm_security import MALFORMED, _answers, _answers_until, _connect, _env, _framed, _request, _stdio

from fedgmh import warm
from fedgmh.cli import main

REPO = Path(__file__).resolve().parents[1]
#: what a process's record holds about how it ran, not what it computed
TIMING = {"wall_time_s", "started_utc", "finished_utc"}
PER_PROCESS = {"peak_rss_bytes"}


def _start_server(logs: Path, *args: str) -> tuple[subprocess.Popen, str, Path]:
    """`fedgmh serve ARGS` on a fresh socket (its folder made by the server), writing to a log in `logs`."""
    path = warm.socket_path()
    log = logs / f"{os.path.basename(os.path.dirname(path))}.log"
    with open(log, "w") as out:
        server = subprocess.Popen([sys.executable, "-m", "fedgmh.cli", "serve", "--socket", path, *args],
                                  stdout=out, stderr=subprocess.STDOUT, env=_env())
    return server, path, log


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A server (socket path, log file) shared by the module's tests."""
    process, path, log = _start_server(tmp_path_factory.mktemp("warm"))
    try:
        wait_for(lambda: os.path.exists(path) or process.poll() is not None, 120)
        assert process.poll() is None, log.read_text()
        yield path, log
    finally:
        assert warm.stop(path)
        assert process.wait(60) == 0
        assert not os.path.exists(os.path.dirname(path))  # the socket and the folder the server made for it


@pytest.fixture
def run_args(digits_root, digits_partition):
    """`fedgmh train` arguments of a 2-round FedGMH run on digits (the CLI's local epochs and join ratio)
    into OUT, and more."""
    def arguments(out: Path, *extra: str) -> list[str]:
        return train_args(Digits(digits_root, digits_partition), out, *extra, algorithm="fedgmh", rounds=2,
                          device="cpu", local_epochs=None, join_ratio=None)

    return arguments


def _client(argv: list[str], socket_path: str, **popen) -> subprocess.Popen:
    """`fedgmh ARGV` in a fresh interpreter that cannot import torch or pandas: it must run on the server."""
    code = BLOCKER + "from fedgmh.cli import main\nsys.exit(main(sys.argv[2:]))\n"
    env = _env(**{warm.SOCKET_VARIABLE: socket_path})
    return subprocess.Popen([sys.executable, "-c", code, "torch,pandas", *argv], env=env, text=True, **popen)


def _record(folder: Path) -> tuple[dict, pd.DataFrame]:
    record = json.loads((folder / "run.json").read_text())
    for key in TIMING:
        record.pop(key, None)
    for key in PER_PROCESS:
        record.get("memory", {}).pop(key, None)
    return record, pd.read_csv(folder / "metrics.csv").drop(columns=["seconds"])


def test_a_run_on_the_server_is_the_run_of_a_fresh_process(server, run_args, tmp_path, capsys):
    path, log = server
    client = _client(run_args(tmp_path / "warm"), path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = client.communicate(timeout=300)
    assert client.returncode == 0, err
    assert "fedgmh: best test accuracy" in out  # the child wrote to the client's own stdout
    assert str(tmp_path / "warm") in log.read_text()  # it ran on the server
    assert main(run_args(tmp_path / "here")) == 0
    assert capsys.readouterr().out.splitlines()[-1] == out.splitlines()[-1]
    warm_record, warm_metrics = _record(tmp_path / "warm")
    here_record, here_metrics = _record(tmp_path / "here")
    pd.testing.assert_frame_equal(warm_metrics, here_metrics, check_exact=True)
    assert warm_record["best_test_acc"] > 0.1
    assert {k: v for k, v in warm_record.items() if k != "out"} == {k: v for k, v in here_record.items() if k != "out"}


def test_an_error_on_the_server_is_the_same_line_and_status(server, run_args, tmp_path, capsys):
    path, log = server
    argv = run_args(tmp_path / "run", "--set", "no_such_option=1")
    client = _client(argv, path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = client.communicate(timeout=300)
    assert "no_such_option" in log.read_text()
    assert main(argv) == 2
    here = capsys.readouterr().err
    assert client.returncode == 2 and err == here and len(err.splitlines()) == 1 and err.startswith("fedgmh train: error: ")


def test_without_a_server_the_client_trains_itself(server, run_args, tmp_path, monkeypatch, capsys):
    path, log = server
    monkeypatch.setenv(warm.SOCKET_VARIABLE, str(tmp_path / "no-socket"))
    assert main(run_args(tmp_path / "run")) == 0
    assert (tmp_path / "run" / "run.json").is_file()
    before = log.read_text()
    monkeypatch.setenv(warm.SOCKET_VARIABLE, path)  # a live server, but a device it does not serve
    for device in ("cuda", "cuda:0", "auto"):
        assert warm.run_on_server(["train", "--device", device], device) is None
    assert log.read_text() == before


def _child_of(log: Path, marker: str) -> int:
    """The pid of the server's child whose command line holds `marker`, once it is there."""
    def line():
        return next((ln for ln in log.read_text().splitlines() if marker in ln), None)

    wait_for(lambda: line() is not None, 120)
    return int(line().split(":", 1)[0])


def _exited(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_a_killed_client_leaves_no_training_behind(server, run_args, tmp_path, signum):
    """SIGTERM is forwarded to the child, which stops as a fresh process would (status 143); a client
    killed outright (SIGKILL) is noticed by the server, which stops its child."""
    path, log = server
    out = tmp_path / f"long{signum}"
    argv = run_args(out)
    argv[argv.index("--rounds") + 1] = "100000"
    argv.remove("--quiet")
    output = tmp_path / "output"
    with open(output, "w") as handle:
        client = _client(argv, path, stdout=handle, stderr=subprocess.STDOUT)
    child = _child_of(log, str(out))
    wait_for(lambda: "round 1/100000" in output.read_text() or client.poll() is not None, 120)  # training, its handlers set
    assert client.poll() is None and not _exited(child)
    client.send_signal(signum)
    client.wait(120)
    wait_for(lambda: _exited(child), 120)
    assert f"{child}: exit status 143" in log.read_text()  # stopped by SIGTERM, as a fresh process is: a snapshot, then 143
    if signum == signal.SIGTERM:
        assert client.returncode == 143 and "fedgmh train:" in output.read_text().splitlines()[-1]
    else:
        assert client.returncode == -signal.SIGKILL


def test_the_server_exits_when_idle_or_orphaned_and_removes_its_folder(tmp_path):
    """A server whose parent (the workflow's Snakemake) is killed, or that is idle, exits and leaves no
    socket and no folder behind."""
    parent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    idle, idle_path, idle_log = _start_server(tmp_path, "--idle-timeout", "1")
    orphan, orphan_path, orphan_log = _start_server(tmp_path, "--parent", str(parent.pid))
    try:
        assert idle.wait(120) == 0, idle_log.read_text()
        assert "listening" in idle_log.read_text() and not os.path.exists(os.path.dirname(idle_path))
        wait_for(lambda: os.path.exists(orphan_path), 120)
        assert orphan.poll() is None
        parent.kill()
        parent.wait()
        assert orphan.wait(60) == 0
        assert not os.path.exists(os.path.dirname(orphan_path))
    finally:
        for process in (parent, idle, orphan):
            if process.poll() is None:
                process.kill()
                process.wait()


def _ask(path: str, request: dict) -> list[dict]:
    """The server's answers to `request`, and to a go-ahead with stdio if it is ready."""
    with _connect(path) as conn, _stdio() as fds:
        conn.sendall(warm._frame(request))
        answers = _answers_until(conn, 1)
        if answers == [{"ready": True}]:
            socket.send_fds(conn, [warm._frame({"go": True})], fds)
            answers += _answers(conn)
        return answers


def test_the_server_runs_only_train_command_lines_its_parser_accepts(server, tmp_path):
    """Another command (`download` creating a folder, `--version` running git), a train command line
    the parser refuses, or a device the server does not serve: refused before anything runs."""
    path, log = server
    made = tmp_path / "made-by-download"
    valid = ["train", "--root", "r", "--partition", "p", "--algorithm", "fedavg", "--rounds", "1", "--out", "o"]
    for argv, why in ((["download", "digits", "--root", str(made)], "only `fedgmh train` is served"),
                      (["--version"], "only `fedgmh train` is served"),
                      (["train", "--version"], "not a valid train command line: "),
                      ([*valid, "--no-such-flag"], "not a valid train command line: "),
                      ([*valid, "-h"], "not a valid train command line"),
                      ([*valid, "--device", "cuda"], "--device cuda is not served")):
        answers = _ask(path, _request(argv))
        assert len(answers) == 1 and answers[0].get("refused", "").startswith(why), (argv, answers)
    assert not made.exists()
    assert ": fedgmh download" not in log.read_text() and ": fedgmh --version" not in log.read_text()


def test_a_run_uses_the_servers_path_not_the_callers(server, run_args, tmp_path):
    """The run's environment is the server's (but for CLIENT_VARIABLES): a `git` first on the caller's
    PATH is not what records the run's commit."""
    path, log = server
    evil = tmp_path / "evil"
    evil.mkdir()
    (evil / "git").write_text(f"#!/bin/sh\ntouch {tmp_path / 'evil-git-ran'}\necho 0000000\n")
    (evil / "git").chmod(0o755)
    code = BLOCKER + "from fedgmh.cli import main\nsys.exit(main(sys.argv[2:]))\n"
    env = _env(**{warm.SOCKET_VARIABLE: path, "PATH": f"{evil}{os.pathsep}{os.environ['PATH']}"})
    client = subprocess.run([sys.executable, "-c", code, "torch,pandas", *run_args(tmp_path / "run")], env=env,
                            capture_output=True, text=True, timeout=300)
    assert client.returncode == 0, client.stderr
    assert str(tmp_path / "run") in log.read_text()  # it ran on the server
    assert not (tmp_path / "evil-git-ran").exists()
    assert json.loads((tmp_path / "run" / "run.json").read_text())["code_version"] != "0000000"


def test_malformed_messages_leave_the_server_serving(server, run_args, tmp_path):
    path, log = server
    for body in MALFORMED:
        with _connect(path) as conn:
            conn.sendall(_framed(body))
            answers = _answers(conn)
        assert len(answers) == 1 and "refused" in answers[0], (body[:40], answers)
    argv = run_args(tmp_path / "run", "--set", "no_such_option=1")
    client = _client(argv, path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = client.communicate(timeout=300)
    assert client.returncode == 2 and err.startswith("fedgmh train: error: ")
    assert log.read_text().count(str(tmp_path / "run")) == 1  # it ran on the server
