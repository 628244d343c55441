"""The warm server's safety (fedgmh.warm, docs/robustness.md), with a stand-in for `fedgmh train`
(a fake server: no torch, so each test takes seconds): it trusts only its own user and the client
only a server of its own user; no message ends it, no client holds up another, every descriptor it
is sent is closed; the client gets a fresh process's exit status, its umask and working folder, and
only the variables CLIENT_VARIABLES of its environment; a run dies with its server; a server that
does not answer sends the client back to training itself; the server removes its folder.

The cross-user tests create a second local user (they need root) and run its side in a process
forked from this one that switches to that user."""

from __future__ import annotations

import contextlib
import functools
import ctypes  # noqa: F401 - imported before a fork switches user: that user may not read the interpreter's files
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import shlex
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

import pytest
from conftest import wait_for

from fedgmh import warm

REPO = Path(__file__).resolve().parents[1]

#: a server whose `fedgmh train` is a stand-in: argv[1] says what the run does
FAKE_SERVER = '''
import json, os, sys, time
from fedgmh import warm

warm.REQUEST_TIMEOUT_S = float(sys.argv[2])


def command(argv):
    action, args = argv[1], argv[2:]
    if action == "exit":
        return int(args[0])
    if action == "kill":
        os.kill(os.getpid(), int(args[0]))
        time.sleep(60)
    if action == "write":
        time.sleep(float(args[1]))
        with open(args[0], "w") as out:
            out.write("written")
        return 0
    if action == "show":
        mask = os.umask(0)
        print(json.dumps({"env": dict(os.environ), "cwd": os.getcwd(), "umask": mask}))
        return 0
    return 3


def check(argv):
    return None if argv[:1] == ["train"] and len(argv) > 1 else "only train"


warm.serve(command, check, sys.argv[1], preload=lambda: None)
'''

#: `run_on_server(ARGV)` as `fedgmh train` calls it: its status, 99 when it trains itself, 2 for its error
CLIENT = '''
import sys
from fedgmh import warm
from fedgmh.errors import UserError

warm.ANSWER_TIMEOUT_S = float(sys.argv[1])
try:
    status = warm.run_on_server(sys.argv[2:], "cpu")
except UserError as err:
    print(f"error: {err}", file=sys.stderr)
    sys.exit(2)
if status is None:
    print("training here", flush=True)
    sys.exit(99)
sys.exit(status)
'''


def _env(**extra: str) -> dict[str, str]:
    # no empty entry: Python reads one as the current folder, and the server serves only its own sys.path
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")])), **extra)


class FakeServer:
    def __init__(self, logs: Path, request_timeout_s: float = 10.0):
        self.path = warm.socket_path()
        self.log = logs / f"{os.path.basename(os.path.dirname(self.path))}.log"
        with open(self.log, "w") as out:
            self.process = subprocess.Popen([sys.executable, "-c", FAKE_SERVER, self.path, str(request_timeout_s)],
                                            stdout=out, stderr=subprocess.STDOUT, env=_env())
        wait_for(lambda: os.path.exists(self.path) or self.process.poll() is not None, 30)
        assert self.process.poll() is None, self.log.read_text()

    def alive(self) -> bool:
        return self.process.poll() is None

    def child(self, marker: str) -> int:
        """The pid of the run whose command line holds `marker`, once it has started."""
        def line():
            return next((ln for ln in self.log.read_text().splitlines() if marker in ln and ": fedgmh " in ln), None)

        wait_for(lambda: line() is not None, 30)
        return int(line().split(":", 1)[0])

    def descriptors(self) -> int:
        return len(os.listdir(f"/proc/{self.process.pid}/fd"))

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(30)
        shutil.rmtree(os.path.dirname(self.path), ignore_errors=True)  # left by a server killed outright


@pytest.fixture
def fake_server(tmp_path):
    servers = []

    def start(**options) -> FakeServer:
        servers.append(FakeServer(tmp_path, **options))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def _client(path: str, *argv: str, timeout_s: float = 10.0, env: dict | None = None, **popen) -> subprocess.Popen:
    env = dict(_env() if env is None else env, **{warm.SOCKET_VARIABLE: path})
    return subprocess.Popen([sys.executable, "-c", CLIENT, str(timeout_s), *argv], env=env, text=True,
                            stdout=popen.pop("stdout", subprocess.PIPE), stderr=popen.pop("stderr", subprocess.PIPE), **popen)


def _exited(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    with open(f"/proc/{pid}/stat") as stat:  # a zombie has exited
        return stat.read().rsplit(")", 1)[1].split()[0] == "Z"


def _connect(path: str) -> socket.socket:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(10)
    conn.connect(path)
    return conn


def _framed(body: bytes) -> bytes:
    return warm._LENGTH.pack(len(body)) + body


def _send_with_fds(conn: socket.socket, data: bytes, fds: list[int]) -> None:
    with contextlib.suppress(OSError):  # refused and closed before it has all
        sent = socket.send_fds(conn, [data], fds)
        conn.sendall(data[sent:])


def _answers(conn: socket.socket) -> list[dict]:
    """Every message the server sends until it closes the connection."""
    return _answers_until(conn, None)


def _answers_until(conn: socket.socket, count: int | None) -> list[dict]:
    """The server's next `count` messages (all until it closes the connection: None)."""
    frames = warm._Frames()
    while count is None or len(frames.messages) < count:
        try:
            data = conn.recv(1 if count else 65536)  # no more than asked for
        except ConnectionResetError:
            data = b""
        if not data:
            break
        frames.feed(data)
    return frames.messages


@contextlib.contextmanager
def _stdio():
    """Three descriptors to pass as a request's stdin, stdout and stderr."""
    fds = [os.open(os.devnull, os.O_RDWR) for _ in range(3)]
    try:
        yield fds
    finally:
        for fd in fds:
            os.close(fd)


# -- the server trusts its own user only --

@pytest.fixture(scope="module")
def other_user():
    """(uid, gid) of a second local user made for these tests, deleted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("the cross-user tests create a second local user: they need root")
    if shutil.which("useradd") is None or shutil.which("userdel") is None:
        pytest.skip("the cross-user tests need useradd and userdel to create a second local user")
    name = f"fgwarm{secrets.token_hex(3)}"
    made = subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                          capture_output=True, text=True)
    if made.returncode:
        pytest.skip(f"cannot create a second local user: {made.stderr.strip()}")
    try:
        user = pwd.getpwnam(name)
        yield user.pw_uid, user.pw_gid
    finally:
        subprocess.run(["userdel", name], capture_output=True)


def _as_user(user: tuple[int, int], target, *args) -> int:
    """Run target(*args) in a child of this process switched to `user`; its pid."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgroups([])
            os.setgid(user[1])
            os.setuid(user[0])
            target(*args)
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    return pid


def _wait_exit(pid: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while os.waitpid(pid, os.WNOHANG) == (0, 0):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _end(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _serve_as_user(path: str, log_fd: int) -> None:
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    warm.serve(lambda argv: open(argv[2], "w").write("ran") and 0, lambda argv: None, path, preload=lambda: None)


def test_the_server_refuses_another_users_connection(other_user, tmp_path):
    """Another user who can reach the socket (root here, who may enter any folder) gets nothing run:
    the server checks the peer's uid (SO_PEERCRED) before it reads a byte."""
    reachable = Path(tempfile.mkdtemp(prefix="fedgmh-reachable-"))
    os.chown(reachable, *other_user)  # where the other user's run would write, if it ran
    marker = reachable / "ran"
    path = warm.socket_path()
    log = tmp_path / "server.log"
    log_fd = os.open(log, os.O_WRONLY | os.O_CREAT, 0o644)
    server = _as_user(other_user, _serve_as_user, path, log_fd)
    os.close(log_fd)
    try:
        wait_for(lambda: os.path.exists(path), 30)
        assert os.stat(os.path.dirname(path)).st_mode & 0o777 == 0o700
        request = {"argv": ["train", "write", str(marker)], "cwd": str(reachable), "umask": 0o022, "env": {},
                   "code": warm.code_identity()}
        with _connect(path) as conn, _stdio() as fds:
            with contextlib.suppress(OSError):  # it may close before the request is all sent
                conn.sendall(warm._frame(request))
                socket.send_fds(conn, [warm._frame({"go": True})], fds)
            assert _answers(conn) == []
        time.sleep(0.5)
        assert not marker.exists()
        assert f"refused a connection from uid {os.getuid()}" in log.read_text()
    finally:
        _end(server)
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)
        shutil.rmtree(reachable, ignore_errors=True)


def _listen_and_record(path: str, record_fd: int) -> None:
    """A stranger's listener: what it received, and, were it sent descriptors, a fake result on the client's stdout."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(4)
    listener.settimeout(30)
    got = {"bytes": 0, "fds": 0}
    try:
        conn, _ = listener.accept()
        conn.settimeout(5)
        with contextlib.suppress(OSError):
            while True:
                data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 8)
                got["bytes"] += len(data)
                got["fds"] += len(fds)
                if len(fds) > 1:
                    os.write(fds[1], b"fedavg: best test accuracy 99.99 % at round 1\n")
                conn.sendall(warm._frame({"pid": -1}) + warm._frame({"ready": True}) + warm._frame({"status": 0}))
                if not data:
                    break
    finally:
        os.write(record_fd, json.dumps(got).encode())


@pytest.mark.parametrize("where", ["world-writable folder", "owned by the client, served by another user"])
def test_the_client_sends_nothing_to_another_users_socket(other_user, tmp_path, where):
    """A listener of another user at FEDGMH_WARM_SOCKET gets no byte (no environment, no descriptors)
    and cannot answer for a run: the client trains itself. It checks the folder (the client's, mode
    700) and the socket (the client's) before connecting, and the listener's uid (SO_PEERCRED) after."""
    folder = Path(f"/tmp/fedgmh-shared-{secrets.token_hex(4)}")
    folder.mkdir()
    os.chmod(folder, 0o1777 if where == "world-writable folder" else 0o700)
    os.chown(folder, *other_user)
    path = str(folder / "socket")
    read_end, write_end = os.pipe()
    listener = _as_user(other_user, _listen_and_record, path, write_end)
    os.close(write_end)
    try:
        wait_for(lambda: os.path.exists(path), 30)
        if where != "world-writable folder":  # all looks the client's own, but another user listens
            os.chown(folder, os.getuid(), os.getgid())
            os.chown(path, os.getuid(), os.getgid())
        client = _client(path, "train", "write", str(tmp_path / "x"), "0", env=_env(SECRET_TOKEN="hunter2"))
        out, err = client.communicate(timeout=60)
        assert client.returncode == 99 and out == "training here\n", (out, err)
        assert "99.99" not in out and "not using the warm server" in err
        with contextlib.suppress(OSError):  # a listener still waiting for a connection takes this one, which says nothing
            _connect(path).close()
        _wait_exit(listener)
        with os.fdopen(read_end, "rb") as record:
            got = json.loads(record.read() or b"{}")
        assert got.get("bytes", 0) == 0 and got.get("fds", 0) == 0, got
    finally:
        _end(listener)
        shutil.rmtree(folder, ignore_errors=True)


# -- the client: what it sends and what it believes (a listener of this user, in this process) --

@contextlib.contextmanager
def _listener(tmp_path: Path, converse):
    """A same-user listener in a private folder; `converse(conn, next_message, received)` talks to one client."""
    folder = tmp_path / "sock"
    folder.mkdir(mode=0o700)
    path = str(folder / "s")
    received: list[dict] = []
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(path)
        listener.listen(1)
        listener.settimeout(30)

        def serve():
            conn, _ = listener.accept()
            frames = warm._Frames()

            def next_message():
                while not frames.messages:
                    data, fds, _, _ = socket.recv_fds(conn, 65536, 3)
                    for fd in fds:
                        os.close(fd)
                    if not data:
                        return None
                    frames.feed(data)
                received.append(frames.messages.pop(0))
                return received[-1]

            with conn:
                converse(conn, next_message, received)

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        yield path, received
        thread.join(30)


def test_the_client_sends_only_the_allowed_variables(tmp_path):
    def converse(conn, next_message, received):
        next_message()
        conn.sendall(warm._frame({"refused": "just looking"}))

    with _listener(tmp_path, converse) as (path, received):
        env = _env(SECRET_TOKEN="hunter2", TMPDIR=str(tmp_path), PATH=f"/evil{os.pathsep}{os.environ['PATH']}")
        client = _client(path, "train", "exit", "0", env=env)
        assert client.wait(60) == 99
    request = received[0]
    assert set(request["env"]) <= set(warm.CLIENT_VARIABLES) and request["env"]["TMPDIR"] == str(tmp_path)
    assert "hunter2" not in json.dumps(request) and "/evil" not in json.dumps(request)


@pytest.mark.parametrize("attack", ["a pid of its choosing", "a well-formed run"])
def test_a_server_cannot_make_the_client_signal_another_process(tmp_path, attack):
    """The client names no pid to signal: it forwards SIGTERM as a message over its own connection, and
    a reply naming a pid (a process group: -pgid) is no answer it knows, so it trains itself."""
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    forwarded = threading.Event()

    def converse(conn, next_message, received):
        next_message()
        if attack == "a pid of its choosing":
            conn.sendall(warm._frame({"pid": -bystander.pid}))
            next_message()
            return
        conn.sendall(warm._frame({"ready": True}))
        assert next_message() == {"go": True}
        forwarded.set()
        if next_message() == {"signal": signal.SIGTERM}:
            conn.sendall(warm._frame({"status": 143}))

    try:
        with _listener(tmp_path, converse) as (path, received):
            client = _client(path, "train", "exit", "0")
            if attack == "a well-formed run":
                assert forwarded.wait(30)
            else:
                wait_for(lambda: received, 30)
            time.sleep(0.5)  # the client has its answer (and its handlers)
            client.send_signal(signal.SIGTERM)
            out, err = client.communicate(timeout=60)
            time.sleep(0.3)
        assert bystander.poll() is None
        if attack == "a pid of its choosing":
            assert client.returncode == 99 and out == "training here\n"
        else:
            assert client.returncode == 143 and received[-1] == {"signal": signal.SIGTERM}
    finally:
        bystander.kill()
        bystander.wait()


@pytest.mark.parametrize("delivery", ["both at once", "a byte at a time"])
def test_the_client_reads_every_reply_whole(tmp_path, delivery):
    """Replies that arrive together, or in pieces, are each read whole: the run's status is never lost."""
    def converse(conn, next_message, received):
        next_message()
        replies = warm._frame({"ready": True}) + warm._frame({"status": 7})
        if delivery == "both at once":
            conn.sendall(replies)
            next_message()
            return
        for byte in replies[:len(warm._frame({"ready": True}))]:
            conn.sendall(bytes([byte]))
            time.sleep(0.005)
        next_message()
        for byte in replies[len(warm._frame({"ready": True})):]:
            conn.sendall(bytes([byte]))
            time.sleep(0.05)

    with _listener(tmp_path, converse) as (path, received):
        client = _client(path, "train", "exit", "7")
        out, err = client.communicate(timeout=60)
    assert client.returncode == 7, (out, err)


# -- no message ends the server, no client holds up another, no descriptor is left open --

MALFORMED = [b"[1,2]", b'"x"', b"{}", b'{"argv": ["train", 3]}', b"not json", b"\xff\xfe", b"[" * 100000 + b"]" * 100000,
             json.dumps({"argv": ["train", "exit", "0"], "cwd": "relative", "umask": 0, "env": {}, "code": {}}).encode(),
             json.dumps({"argv": ["train"], "cwd": "/", "umask": 0, "env": {"PATH": "/evil"}, "code": {}}).encode()]


def test_malformed_messages_end_neither_the_server_nor_its_runs(fake_server, tmp_path):
    server = fake_server()
    marker = tmp_path / "written"
    run = _client(server.path, "train", "write", str(marker), "2")
    server.child(str(marker))
    for body in MALFORMED:
        with _connect(server.path) as conn:
            with contextlib.suppress(OSError):
                conn.sendall(_framed(body))
            answers = _answers(conn)
        assert len(answers) == 1 and "refused" in answers[0], (body[:40], answers)
        assert server.alive()
    with _connect(server.path) as conn:
        conn.sendall(b"\0\0\0\5{}")  # a message cut short
    assert run.wait(60) == 0 and marker.read_text() == "written"
    assert _client(server.path, "train", "exit", "4").wait(60) == 4


def test_a_message_over_the_limit_is_refused_on_its_length(fake_server):
    """32 MiB announced: refused as soon as its length is read, never read into memory."""
    server = fake_server()
    with _connect(server.path) as conn:
        started = time.monotonic()
        with contextlib.suppress(OSError):  # closed by the server: the rest is not read
            conn.sendall(warm._LENGTH.pack(32 << 20) + b"x" * (32 << 20))
        _answers(conn)
        elapsed = time.monotonic() - started
    assert "refused a request: a message of 33554432 bytes" in server.log.read_text()
    assert elapsed < 3 and server.alive()


def test_frames_are_read_in_linear_time():
    """Four messages of nearly 1 MiB in 128-byte pieces (a quadratic reader copies some 16 GiB)."""
    frames = warm._Frames()
    body = json.dumps({"argv": ["x" * 100] * (warm.MAX_MESSAGE // 110)}).encode()
    data = _framed(body) * 4
    started = time.monotonic()
    for at in range(0, len(data), 128):
        frames.feed(data[at:at + 128])
    assert len(frames.messages) == 4 and time.monotonic() - started < 2


def test_slow_and_silent_clients_hold_up_no_run(fake_server):
    """Four silent connections and one that sends a byte now and then: a run still starts at once,
    and those connections are closed when their time is up."""
    server = fake_server(request_timeout_s=6)
    idle = [_connect(server.path) for _ in range(4)]
    slow = _connect(server.path)
    stop = threading.Event()

    def trickle():
        for byte in warm._LENGTH.pack(100):
            if stop.wait(0.5):
                return
            with contextlib.suppress(OSError):
                slow.send(bytes([byte]))

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    try:
        started = time.monotonic()
        assert _client(server.path, "train", "exit", "5").wait(60) == 5
        assert time.monotonic() - started < 5  # before any of them timed out
        for conn in [*idle, slow]:
            answers = _answers(conn)  # closed by the server when its time is up
            assert "within 6 s" in answers[0]["refused"]
        assert server.alive()
    finally:
        stop.set()
        for conn in [*idle, slow]:
            conn.close()


def _request(argv: list[str]) -> dict:
    """A request as a client of the servers started here (their code identity) sends it."""
    return {"argv": argv, "cwd": os.getcwd(), "umask": 0o022, "env": {}, "code": _identity()}


@functools.lru_cache(maxsize=None)
def _identity() -> dict:
    code = "import json\nfrom fedgmh import warm\nprint(json.dumps(warm.code_identity()))"
    return json.loads(subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, check=True).stdout)


def test_every_descriptor_a_client_sends_is_closed(fake_server):
    """Descriptors sent with a request that is not JSON, with a go-ahead that lacks some, with one
    that is cut short, or with a run: none stays open in the server."""
    server = fake_server(request_timeout_s=1)
    assert _client(server.path, "train", "exit", "0").wait(60) == 0
    before = server.descriptors()
    for i in range(51):
        with _connect(server.path) as conn, _stdio() as fds:
            if i % 3 == 0:
                _send_with_fds(conn, _framed(b"not json"), fds)
            else:
                conn.sendall(warm._frame(_request(["train", "exit", "0"])))
                assert _answers_until(conn, 1) == [{"ready": True}]
                go = warm._frame({"go": True})
                _send_with_fds(conn, go, fds[:2] if i % 3 == 1 else fds)
            answers = _answers(conn)
            assert answers == ([{"status": 0}] if i % 3 == 2 else [{"refused": answers[0]["refused"]}]), answers
    for _ in range(2):  # the go-ahead's first byte with the descriptors, then silence until the server's deadline
        with _connect(server.path) as conn, _stdio() as fds:
            conn.sendall(warm._frame(_request(["train", "exit", "0"])))
            assert _answers_until(conn, 1) == [{"ready": True}]
            _send_with_fds(conn, warm._frame({"go": True})[:1], fds)
            assert "within 1 s" in _answers(conn)[0]["refused"]
    wait_for(lambda: server.descriptors() == before, 10)


def test_a_stopped_server_sends_the_client_back_to_train_itself(fake_server, tmp_path):
    """A server that does not answer (stopped with Ctrl-Z / SIGSTOP) costs the client ANSWER_TIMEOUT_S,
    then it trains in its own process; the server, continued, runs nothing of that request."""
    server = fake_server()
    marker = tmp_path / "written"
    server.process.send_signal(signal.SIGSTOP)
    try:
        started = time.monotonic()
        client = _client(server.path, "train", "write", str(marker), "0", timeout_s=1)
        out, err = client.communicate(timeout=60)
        assert client.returncode == 99 and out == "training here\n", err
        assert time.monotonic() - started < 10
    finally:
        server.process.send_signal(signal.SIGCONT)
    time.sleep(1)
    assert not marker.exists() and server.alive()
    assert _client(server.path, "train", "exit", "6").wait(60) == 6


# -- exit statuses, environment, and a run that outlives nothing --

@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_a_run_killed_by_a_signal_exits_as_a_fresh_process_would(fake_server, signum):
    """The shell sees 128 + signal (137 for the OOM killer's SIGKILL), as for a fresh process."""
    server = fake_server()
    command = shlex.join([sys.executable, "-c", CLIENT, "10", "train", "kill", str(int(signum))]) + "; echo status $?"
    shell = subprocess.run(["sh", "-c", command], env=_env(**{warm.SOCKET_VARIABLE: server.path}), capture_output=True,
                           text=True, timeout=60)
    assert shell.stdout.split()[-2:] == ["status", str(128 + signum)], shell.stderr
    assert "error" not in shell.stderr


def test_a_run_dies_with_its_server(fake_server, tmp_path):
    """A server killed outright takes its runs with it (PR_SET_PDEATHSIG): the client reports the
    failure and no orphan finishes the run behind its back."""
    server = fake_server()
    marker = tmp_path / "written"
    client = _client(server.path, "train", "write", str(marker), "3")
    child = server.child(str(marker))
    server.process.kill()
    server.process.wait()
    wait_for(lambda: _exited(child), 5)
    out, err = client.communicate(timeout=60)
    assert client.returncode == 2 and "stopped before the run ended" in err
    time.sleep(4)
    assert not marker.exists()


def test_the_run_gets_the_clients_folder_umask_and_allowed_variables_only(fake_server, tmp_path):
    """The caller's working folder, umask and CLIENT_VARIABLES reach the run; the rest of its
    environment (PATH, secrets) does not: the run has the server's."""
    server = fake_server()
    env = _env(SECRET_TOKEN="hunter2", TMPDIR=str(tmp_path), PATH=f"/evil{os.pathsep}{os.environ['PATH']}")
    client = _client(server.path, "train", "show", env=env, cwd=tmp_path, umask=0o027)
    out, err = client.communicate(timeout=60)
    assert client.returncode == 0, err
    shown = json.loads(out)
    assert shown["cwd"] == str(tmp_path) and shown["umask"] == 0o027
    assert shown["env"]["TMPDIR"] == str(tmp_path) and "SECRET_TOKEN" not in shown["env"]
    assert shown["env"]["PATH"] == os.environ["PATH"]


def test_a_client_with_other_code_trains_itself(fake_server, tmp_path):
    """A run must execute the client's code: with another PYTHONPATH (whose modules the server, having
    imported its own, could not load), the server refuses and the client trains in its own process."""
    server = fake_server()
    other = tmp_path / "other"
    other.mkdir()
    env = _env()
    env["PYTHONPATH"] = os.pathsep.join([str(other), env["PYTHONPATH"]])
    client = _client(server.path, "train", "exit", "0", env=env)
    out, err = client.communicate(timeout=60)
    assert client.returncode == 99 and out == "training here\n", err
    assert "other code" in server.log.read_text()


@pytest.mark.parametrize("how", ["SIGTERM", "SIGHUP", "a stop request"])
def test_the_server_removes_its_socket_and_folder_when_it_exits(fake_server, how):
    server = fake_server()
    folder = os.path.dirname(server.path)
    assert os.stat(folder).st_mode & 0o777 == 0o700
    if how == "a stop request":
        assert warm.stop(server.path)
    else:
        server.process.send_signal(getattr(signal, how))
    assert server.process.wait(30) == 0
    assert not os.path.exists(folder)


def test_the_server_will_not_listen_in_a_folder_others_may_enter(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    run = subprocess.run([sys.executable, "-c", FAKE_SERVER, str(shared / "socket"), "10"], env=_env(),
                         capture_output=True, text=True, timeout=60)
    assert run.returncode != 0 and "only you may enter" in run.stderr
    assert not (shared / "socket").exists()
