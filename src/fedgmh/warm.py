"""A warm training server: `fedgmh train` without paying torch's imports in every process.

`serve` imports the training code once, listens on a Unix socket and forks one child per request;
the child runs the CLI's train command as a fresh process would: the client's argv, working folder,
environment and stdin/stdout/stderr (passed as file descriptors, so a job's `> log 2>&1` still
captures everything). The server answers the child's pid, then its wait status; the client exits
with it. The client (`run_on_server`, called by `fedgmh train` when FEDGMH_WARM_SOCKET names a
socket) forwards SIGINT and SIGTERM to the child, and the server stops the child of a client that
went away, so no run outlives its job. A forked process must not inherit an initialised CUDA, so
only `--device cpu` runs are served; everything else, and any socket that does not answer, runs in
the client's own process. The workflow starts a server for its local CPU jobs (workflow/rules/common.smk).

This module imports neither torch nor pandas: `serve` imports them when it starts.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from fedgmh.errors import UserError

#: the environment variable that names the server's socket for `fedgmh train`
SOCKET_VARIABLE = "FEDGMH_WARM_SOCKET"
#: a server with no request and no run for this long exits (the workflow's server also exits with Snakemake)
IDLE_TIMEOUT_S = 900.0
#: how often the server looks at its children, its parent and the clock when nothing arrives
POLL_S = 0.5
#: AF_UNIX socket paths are limited to about 107 bytes; longer temp folders fall back to /tmp
MAX_SOCKET_PATH = 100
STDIO = (0, 1, 2)
_LENGTH = struct.Struct("!I")


def served(device: str) -> bool:
    """Whether a run on `device` may go to the server: CPU only (a forked child must not inherit CUDA,
    and `auto` may choose CUDA)."""
    return device == "cpu"


# -- messages: a 4-byte length, then JSON; the request's first piece carries the stdio descriptors --

def _send(conn: socket.socket, message: dict, fds: tuple[int, ...] = ()) -> None:
    data = json.dumps(message).encode()
    data = _LENGTH.pack(len(data)) + data
    sent = socket.send_fds(conn, [data], list(fds)) if fds else 0
    conn.sendall(data[sent:])


def _receive(conn: socket.socket, max_fds: int = 0) -> tuple[dict | None, list[int]]:
    """One message and the descriptors that came with it; (None, []) when the peer closed first."""
    if max_fds:
        data, fds, _, _ = socket.recv_fds(conn, 65536, max_fds)
    else:
        data, fds = conn.recv(65536), []
    while len(data) < _LENGTH.size or len(data) < _LENGTH.size + _LENGTH.unpack_from(data)[0]:
        more = conn.recv(65536)
        if not more:
            for fd in fds:
                os.close(fd)
            return None, []
        data += more
    size = _LENGTH.unpack_from(data)[0]
    return json.loads(data[_LENGTH.size:_LENGTH.size + size]), fds


# -- the client --

def run_on_server(argv: list[str], device: str) -> int | None:
    """Run `fedgmh train ARGV` on the server named by FEDGMH_WARM_SOCKET and return its exit status;
    None (run it here) when no server is named or answers, or the device is not served."""
    path = os.environ.get(SOCKET_VARIABLE)
    if not path or not served(device):
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
    except OSError:  # no socket (yet, or any more), refused, path too long: train here
        conn.close()
        return None
    with conn, _open_stdio() as fds:
        child = None

        def forward(signum, frame):
            if child is not None:
                with contextlib.suppress(ProcessLookupError):  # it has just ended: its status is on the way
                    os.kill(child, signum)
            else:  # not started yet: the server stops a child whose client is gone
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)

        previous = {signum: signal.signal(signum, forward) for signum in (signal.SIGINT, signal.SIGTERM)
                    if signal.getsignal(signum) is not signal.SIG_IGN}
        try:
            _send(conn, {"argv": argv, "program": sys.argv[0], "cwd": os.getcwd(), "env": dict(os.environ)}, fds)
            started, _ = _receive(conn)
            if started is None or "refused" in started:
                return None
            child = started["pid"]
            finished, _ = _receive(conn)
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
    if finished is None:
        raise UserError(f"the warm training server ({SOCKET_VARIABLE}={path}) stopped before the run ended; run the "
                        "command again (it resumes from the run's last snapshot)")
    return _exit_like(finished["status"])


@contextlib.contextmanager
def _open_stdio():
    """The descriptors 0, 1, 2 to pass; one that is closed here is passed as /dev/null."""
    opened = []
    fds = []
    for fd in STDIO:
        try:
            os.fstat(fd)
            fds.append(fd)
        except OSError:
            opened.append(os.open(os.devnull, os.O_RDWR))
            fds.append(opened[-1])
    try:
        yield tuple(fds)
    finally:
        for fd in opened:
            os.close(fd)


def _exit_like(wait_status: int) -> int:
    """The client's exit status for the child's wait status; a child killed by a signal kills the client with it."""
    code = os.waitstatus_to_exitcode(wait_status)
    if code < 0:
        sys.stdout.flush()
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        return 128 - code
    return code


def stop(path: str | Path) -> bool:
    """Ask the server at `path` to stop (its running children are stopped too); False if none answers."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        try:
            conn.connect(str(path))
            _send(conn, {"stop": True})
            return _receive(conn)[0] is not None
        except OSError:
            return False


# -- the server --

def serve(command: Callable[[list[str]], int], socket_path: str | Path, idle_timeout_s: float = IDLE_TIMEOUT_S,
          parent_pid: int | None = None) -> None:
    """Import the training code, then serve `fedgmh train` requests on `socket_path` until told to stop
    (a stop request, SIGTERM, SIGINT), idle for `idle_timeout_s`, or process `parent_pid` is gone.
    `command(argv)` runs one request's command line in its child and returns the exit status (the
    CLI's `main`, which must not send it to a server again)."""
    _import_training_code()
    path = str(socket_path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(path)
    except OSError as err:
        listener.close()
        raise UserError(f"cannot listen on {path} ({err.strerror or err}); give a short path in a writable folder") from err
    listener.listen(16)
    print(f"fedgmh serve: listening on {path} (pid {os.getpid()})", flush=True)
    stopping = []
    handlers = {signum: signal.signal(signum, lambda signum, frame: stopping.append(signum))
                for signum in (signal.SIGTERM, signal.SIGINT)}
    children: dict[int, socket.socket | None] = {}  # pid -> its client's connection (None: the client went away)
    last_active = time.monotonic()
    try:
        while not stopping:
            waiting = [listener, *(conn for conn in children.values() if conn is not None)]
            with contextlib.suppress(InterruptedError):
                for conn in select.select(waiting, [], [], POLL_S)[0]:
                    if conn is listener:
                        _accept(listener, children, stopping, command)
                        last_active = time.monotonic()
                    elif _gone(conn):  # a client writes nothing after its request: it was killed, so stop its run
                        pid = next(pid for pid, c in children.items() if c is conn)
                        conn.close()
                        children[pid] = None
                        _kill(pid, signal.SIGTERM)
            _reap(children)
            if children:
                last_active = time.monotonic()
            elif time.monotonic() - last_active > idle_timeout_s:
                break
            if parent_pid is not None and not _alive(parent_pid):
                break
    finally:
        _stop_children(children)
        listener.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        for signum, handler in handlers.items():
            signal.signal(signum, handler)


def _gone(conn: socket.socket) -> bool:
    try:
        return not conn.recv(1)
    except OSError:
        return True


def _import_training_code() -> None:
    """Everything `fedgmh train` imports (torch, pandas, every algorithm), so that no child imports it again."""
    import fedgmh.cli_store  # noqa: F401
    import fedgmh.store  # noqa: F401
    import fedgmh.train  # noqa: F401
    from fedgmh.algorithms import algorithm_classes

    algorithm_classes()


def _accept(listener: socket.socket, children: dict[int, socket.socket | None], stopping: list,
            command: Callable[[list[str]], int]) -> None:
    """Take one request: a run (forks its child) or a stop."""
    conn, _ = listener.accept()
    conn.settimeout(10)
    try:
        request, fds = _receive(conn, max_fds=len(STDIO))
    except (OSError, ValueError):
        conn.close()
        return
    if request is None:
        conn.close()
        return
    try:
        if request.get("stop"):
            stopping.append("stop request")
            _send(conn, {"stopping": True})
            conn.close()
            return
        refusal = _refusal(request, fds)
        if refusal:
            _send(conn, {"refused": refusal})
            conn.close()
            return
        # a signal the client forwards as soon as it has the pid must find the child's own handlers
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
        pid = os.fork()
        if pid == 0:
            listener.close()
            for other in children.values():
                if other is not None:
                    other.close()
            _run_child(command, request, fds, blocked)  # never returns
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        children[pid] = conn
        print(f"{pid}: fedgmh {' '.join(request['argv'])}", flush=True)
        _send(conn, {"pid": pid})  # a client gone by now is seen by the loop, which stops the child
    except OSError:
        pass
    finally:
        for fd in fds:
            os.close(fd)


def _refusal(request: dict, fds: list[int]) -> str | None:
    """Why this request is not run here (the client then runs it itself), or None."""
    import torch

    if len(fds) != len(STDIO):
        return "stdin, stdout and stderr were not passed"
    if torch.cuda.is_initialized():  # never fork a process that holds CUDA
        return "CUDA is initialised in the server"
    return None


def _run_child(command: Callable[[list[str]], int], request: dict, fds: list[int], signal_mask: set) -> None:
    """In the forked child: become the client's `fedgmh train` process, run it, exit with its status."""
    code = 1
    try:
        for signum in (signal.SIGTERM, signal.SIGCHLD):
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, signal_mask)
        for target, fd in zip(STDIO, fds):
            os.dup2(fd, target)
        for fd in fds:
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        tempfile.tempdir = None  # the temp folder is looked up again, in the client's environment
        sys.argv = [request["program"], *request["argv"]]
        sys.stdin, sys.stdout, sys.stderr = _std_streams()
        code = command(request["argv"])
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        if not isinstance(exit_.code, (int, type(None))):
            print(exit_.code, file=sys.stderr)
    except BaseException:  # a bug: its traceback, as the interpreter shows it, and status 1
        import traceback

        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _std_streams():
    """New sys.stdin / stdout / stderr on the descriptors 0-2, buffered as a fresh interpreter's would be."""
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    stdin = open(0, "r", closefd=False)  # noqa: SIM115
    stdout = open(1, "w", buffering=1 if unbuffered or os.isatty(1) else -1, closefd=False)  # noqa: SIM115
    stderr = open(2, "w", buffering=1, closefd=False, errors="backslashreplace")  # noqa: SIM115
    return stdin, stdout, stderr


def _reap(children: dict[int, socket.socket | None]) -> None:
    """Collect finished children and send each client its wait status."""
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
        conn = children.pop(pid, None)
        print(f"{pid}: exit status {os.waitstatus_to_exitcode(status)}", flush=True)
        if conn is not None:
            with contextlib.suppress(OSError):
                _send(conn, {"status": status})
            conn.close()


def _stop_children(children: dict[int, socket.socket | None], grace_s: float = 30.0) -> None:
    """SIGTERM every running child (a run snapshots its round and exits), wait for them, report to their clients."""
    for pid, conn in children.items():
        if conn is not None:  # the others were sent it when their client went away: a second one kills at once
            _kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while children and time.monotonic() < deadline:
        _reap(children)
        time.sleep(0.05)
    for pid, conn in list(children.items()):
        _kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
        if conn is not None:
            conn.close()
    children.clear()


def _kill(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# -- the workflow's server --

def socket_path() -> str:
    """A fresh, short socket path in the temp folder (/tmp when the temp folder's path is too long)."""
    base = tempfile.gettempdir()
    if len(base) > MAX_SOCKET_PATH - 40:
        base = "/tmp"
    folder = tempfile.mkdtemp(prefix="fedgmh-warm-", dir=base)
    return os.path.join(folder, "socket")


def start(log: str | Path, program: str = "fedgmh") -> tuple[subprocess.Popen, str]:
    """Start `program serve` for the calling process (it exits with it) on a fresh socket, writing to
    `log`; returns the process and its socket path. The socket appears once the imports are done;
    until then a client runs its job itself."""
    path = socket_path()
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out:
        process = subprocess.Popen([program, "serve", "--socket", path, "--parent", str(os.getpid())],
                                   stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    return process, path


def shut_down(process: subprocess.Popen, path: str, timeout_s: float = 60.0) -> None:
    """Stop a server `start` started and remove its socket folder."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    with contextlib.suppress(OSError):
        os.unlink(path)
    with contextlib.suppress(OSError):
        os.rmdir(os.path.dirname(path))
