"""A warm training server: `fedgmh train` without paying torch's imports in every process.

`serve` imports the training code once, listens on a Unix socket in a private folder and forks one
child per request; the child runs `fedgmh train` with the client's argv, working folder, umask and
stdin/stdout/stderr (passed as file descriptors, so a job's `> log 2>&1` still captures
everything), in the server's own environment but for a few variables the client's (CLIENT_VARIABLES).
The client (`run_on_server`, called by `fedgmh train` when FEDGMH_WARM_SOCKET names a socket) and
the server trust only a peer of their own uid (SO_PEERCRED, plus the client checks that the socket
and its folder are its own and private before it sends anything); the server runs nothing but a
command line the train parser accepts, from code identical to the client's (`code_identity`).

The conversation: length-prefixed JSON messages of at most MAX_MESSAGE bytes. The client sends its
request, the server answers `ready` (or `refused`: the client then trains itself), the client says
`go` and passes its descriptors with it, the server forks, and answers the run's exit status when it ends;
meanwhile the client forwards SIGINT and SIGTERM as `signal` messages, which the server sends to
its own child. A client that goes away has its run stopped (SIGTERM); a server that dies takes its
runs with it (PR_SET_PDEATHSIG). A client that gets no `ready` within ANSWER_TIMEOUT_S trains in
its own process, and the server closes a connection that has not sent its request and `go` within
REQUEST_TIMEOUT_S; one event loop serves every connection, so no client holds up another.

A forked process must not inherit an initialised CUDA, so only `--device cpu` runs are served.
The workflow starts a server for its local CPU jobs (workflow/rules/common.smk). docs/robustness.md
lists what the server guarantees.

This module imports neither torch nor pandas: `serve` imports them when it starts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import secrets
import select
import selectors
import shlex
import signal
import socket
import stat
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
#: the longest message either side reads (a request is a command line, a folder and a few variables)
MAX_MESSAGE = 1 << 20
#: a connection must deliver its request and its go-ahead within this long, or it is closed
REQUEST_TIMEOUT_S = 10.0
#: a client that cannot connect or gets no answer within this long trains in its own process
ANSWER_TIMEOUT_S = 10.0
#: connections still sending their request at once; more are closed as they come
MAX_WAITING = 64
#: the client's variables a run gets (they matter after start-up); the rest of its environment is the server's
CLIENT_VARIABLES = ("TMPDIR", "TEMP", "TMP", "PYTHONUNBUFFERED", "NO_COLOR", "TERM", "COLUMNS", "LINES")
#: the signals a client forwards to its run
FORWARDED = (signal.SIGINT, signal.SIGTERM)
STDIO = (0, 1, 2)
#: peer credentials and a parent-death signal are Linux's: elsewhere every run trains in its own process
SUPPORTED = sys.platform.startswith("linux") and hasattr(socket, "SO_PEERCRED")
_LENGTH = struct.Struct("!I")
_CREDENTIALS = struct.Struct("3i")
_PR_SET_PDEATHSIG = 1
_REQUEST_KEYS = {"argv", "cwd", "umask", "env", "code"}


def served(device: str) -> bool:
    """Whether a run on `device` may go to the server: CPU only (a forked child must not inherit CUDA,
    and `auto` may choose CUDA)."""
    return device == "cpu"


def code_identity() -> dict:
    """Which code a `fedgmh train` in this process runs: the server serves only clients that would run
    the same (a client's PYTHONPATH, a venv or a checkout of its own otherwise could not take effect,
    the server's modules being imported already)."""
    import fedgmh

    return {"fedgmh": os.path.dirname(os.path.realpath(fedgmh.__file__)), "sys.path": sys.path[1:]}


# -- messages: a 4-byte length, then a JSON object; the go-ahead carries the stdio descriptors --

class ProtocolError(ValueError):
    """A message that is too long, not JSON, or not a JSON object."""


class _Frames:
    """Whole messages out of a byte stream, in order, in linear time; at most MAX_MESSAGE bytes each.
    `feed` adds the messages its bytes complete to `messages`, whence the reader takes them."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.messages: list[dict] = []

    def feed(self, data: bytes) -> None:
        self.buffer += data
        while len(self.buffer) >= _LENGTH.size:
            size = _LENGTH.unpack_from(self.buffer)[0]
            if size > MAX_MESSAGE:
                raise ProtocolError(f"a message of {size} bytes (at most {MAX_MESSAGE})")
            if len(self.buffer) < _LENGTH.size + size:
                break
            body = bytes(self.buffer[_LENGTH.size:_LENGTH.size + size])
            del self.buffer[:_LENGTH.size + size]
            self.messages.append(_decode(body))


def _decode(body: bytes) -> dict:
    try:
        message = json.loads(body)
    except (ValueError, RecursionError) as err:
        raise ProtocolError("a message that is not JSON") from err
    if not isinstance(message, dict):
        raise ProtocolError("a message that is not a JSON object")
    return message


def _frame(message: dict) -> bytes:
    data = json.dumps(message, allow_nan=False).encode()
    return _LENGTH.pack(len(data)) + data


def _send(conn: socket.socket, message: dict, fds: tuple[int, ...] = ()) -> None:
    data = _frame(message)
    sent = socket.send_fds(conn, [data], list(fds)) if fds else 0
    if sent < len(data):  # (sending nothing to a peer that has read all and closed would fail)
        conn.sendall(data[sent:])


def _peer_uid(conn: socket.socket) -> int:
    return _CREDENTIALS.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CREDENTIALS.size))[1]


def _is(message: dict, key: str, value) -> bool:
    """Whether `message` is exactly {key: value} (`True` is not 1)."""
    return list(message) == [key] and type(message[key]) is type(value) and message[key] == value


# -- the client --

def run_on_server(argv: list[str], device: str) -> int | None:
    """Run `fedgmh train ARGV` on the server named by FEDGMH_WARM_SOCKET and return its exit status;
    None (run it here) when no server is named or safe to use, none answers in time, it refuses the
    run, or the device is not served."""
    path = os.environ.get(SOCKET_VARIABLE)
    if not path or not served(device) or not SUPPORTED:
        return None
    try:
        request = _frame(_request(argv))
    except (OSError, ValueError):  # a working folder that is gone, an unencodable argument: train here
        return None
    if len(request) > _LENGTH.size + MAX_MESSAGE:
        return None
    conn = _connect(path)
    if conn is None:
        return None
    with conn, _open_stdio() as fds:
        frames = _Frames()
        try:
            conn.sendall(request)
            if _next_message(conn, frames) != {"ready": True}:  # refused, or not a server of ours
                return None
            _send(conn, {"go": True}, fds)  # the descriptors go only to a server that answered
        except (OSError, ProtocolError):  # no answer in time (a stopped server), or it went away: train here
            return None
        answer = _wait_for_status(conn, frames)
    status = answer.get("status") if answer is not None and list(answer) == ["status"] else None
    if type(status) is int and -64 < status < 256:
        return _exit_like(status)
    if answer is not None and list(answer) == ["refused"]:  # it could not fork the run: train here
        return None
    raise UserError(f"the warm training server ({SOCKET_VARIABLE}={path}) stopped before the run ended, and the run "
                    "with it; run the command again (it resumes from the run's last snapshot)")


def _request(argv: list[str]) -> dict:
    env = {name: os.environ[name] for name in CLIENT_VARIABLES if name in os.environ}
    return {"argv": list(argv), "cwd": os.getcwd(), "umask": _umask(), "env": env, "code": code_identity()}


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _connect(path: str) -> socket.socket | None:
    """A connection to the server at `path`, checked to be this user's before anything is sent; None
    when there is none (not started yet, gone) or it is not safe to use (a warning says why)."""
    try:
        problem = _socket_problem(path)
    except FileNotFoundError:
        return None
    except OSError as err:
        problem = f"cannot inspect it ({err.strerror})"
    if problem:
        return _warn(path, problem)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(ANSWER_TIMEOUT_S)
    try:
        conn.connect(path)
        uid = _peer_uid(conn)
    except OSError:  # refused (a stale socket), a full backlog, a path too long: train here
        conn.close()
        return None
    if uid != os.getuid():
        conn.close()
        return _warn(path, f"it is served by uid {uid}, not by this user")
    return conn


def _socket_problem(path: str) -> str | None:
    """Why the socket at `path` is not safe to send a run to (None: it is): it must be a socket of this
    user in a folder of this user that no one else may enter."""
    folder = os.path.dirname(os.path.abspath(path))
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        return f"its folder {folder} is not a folder of this user that only it may enter (mode 700)"
    info = os.lstat(path)
    if not stat.S_ISSOCK(info.st_mode) or info.st_uid != os.getuid():
        return "it is not a socket of this user"
    return None


def _warn(path: str, problem: str) -> None:
    print(f"fedgmh train: warning: not using the warm server {SOCKET_VARIABLE}={path}: {problem}; training in this process",
          file=sys.stderr, flush=True)


def _next_message(conn: socket.socket, frames: _Frames) -> dict:
    """The next whole message; OSError when the peer closes first or says nothing in time."""
    while not frames.messages:
        data = conn.recv(65536)
        if not data:
            raise ConnectionResetError("the server closed the connection")
        frames.feed(data)
    return frames.messages.pop(0)


def _wait_for_status(conn: socket.socket, frames: _Frames) -> dict | None:
    """Forward SIGINT and SIGTERM to the run until the server's next message (its exit status); None
    when the server goes away first or says something that is not a message."""
    pending: list[int] = []
    previous = {signum: signal.signal(signum, lambda signum, frame: pending.append(signum))
                for signum in FORWARDED if signal.getsignal(signum) is not signal.SIG_IGN}
    poller = select.poll()
    poller.register(conn, select.POLLIN)
    try:
        while not frames.messages:
            while pending:
                _forward(conn, pending.pop(0))
            if not poller.poll(100):
                continue
            try:
                data = conn.recv(65536)
                if not data:
                    return None
                frames.feed(data)
            except (OSError, ProtocolError):
                return None
        return frames.messages.pop(0)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _forward(conn: socket.socket, signum: int) -> None:
    """Ask the server to send `signum` to the run; one it cannot be told of (stopped, gone) is this process's."""
    try:
        _send(conn, {"signal": signum})
    except OSError:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


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


def _exit_like(code: int) -> int:
    """The client's exit status for the run's (a fresh process's: negative for a signal); a run killed
    by a signal kills the client with it, so its parent sees what a fresh process shows (137 for SIGKILL)."""
    if code >= 0:
        return code
    signum = -code
    sys.stdout.flush()
    sys.stderr.flush()
    with contextlib.suppress(OSError, ValueError):  # SIGKILL and SIGSTOP have no handler to reset
        signal.signal(signum, signal.SIG_DFL)
    with contextlib.suppress(OSError, ValueError):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signum})
        os.kill(os.getpid(), signum)
    return 128 + signum


def stop(path: str | Path) -> bool:
    """Ask the server at `path` to stop (its running children are stopped too); False if none answers."""
    conn = _connect(str(path)) if SUPPORTED else None
    if conn is None:
        return False
    with conn:
        try:
            _send(conn, {"stop": True})
            return _next_message(conn, _Frames()) == {"stopping": True}
        except (OSError, ProtocolError):
            return False


# -- the server --

def serve(command: Callable[[list[str]], int], check: Callable[[list[str]], str | None], socket_path: str | Path,
          idle_timeout_s: float = IDLE_TIMEOUT_S, parent_pid: int | None = None,
          preload: Callable[[], None] | None = None) -> None:
    """Import the training code (`preload`), then serve `fedgmh train` requests on `socket_path` until
    told to stop (a stop request, SIGTERM, SIGINT, SIGHUP), idle for `idle_timeout_s`, or process
    `parent_pid` is gone. `check(argv)` says why a command line may not run (None: it may);
    `command(argv)` runs one in its child and returns the exit status (the CLI's `main`, which must
    not send it to a server again). The socket's folder is created (mode 700) when missing, and then
    removed with the socket when the server exits; an existing folder must be the user's and private."""
    if not SUPPORTED:
        raise UserError("the warm server needs Linux (peer credentials and a parent-death signal)")
    stopping: list = []
    handlers = {signum: signal.signal(signum, lambda signum, frame: stopping.append(signum))
                for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        (preload or _import_training_code)()
        if not stopping:
            _serve(command, check, str(socket_path), idle_timeout_s, parent_pid, stopping)
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)


def _serve(command: Callable[[list[str]], int], check: Callable[[list[str]], str | None], path: str,
           idle_timeout_s: float, parent_pid: int | None, stopping: list) -> None:
    listener, made_folder = _listen(path)
    print(f"fedgmh serve: listening on {path} (pid {os.getpid()})", flush=True)
    server = _Server(command, check, listener, stopping)
    last_active = time.monotonic()
    try:
        while not stopping:
            server.step(POLL_S)
            if server.runs or server.connections:
                last_active = time.monotonic()
            elif time.monotonic() - last_active > idle_timeout_s:
                break
            if parent_pid is not None and not alive(parent_pid):
                break
    finally:
        server.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        if made_folder:
            with contextlib.suppress(OSError):
                os.rmdir(os.path.dirname(os.path.abspath(path)))


def _listen(path: str) -> tuple[socket.socket, bool]:
    """The listening socket at `path`, only the user's, and whether its folder was made for it."""
    folder = os.path.dirname(os.path.abspath(path))
    made = False
    try:
        os.mkdir(folder, 0o700)
        made = True
    except FileExistsError:
        pass
    except OSError as err:
        raise UserError(f"cannot create the socket's folder {folder} ({err.strerror}); give a short path in a writable "
                        "folder") from err
    problem = _folder_problem(folder)
    if problem:
        raise UserError(f"{folder}: {problem}; give a socket path in a folder only you may enter (mode 700), or in one "
                        "that does not exist yet")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unready = os.path.join(folder, f".{os.getpid()}")
    try:
        listener.bind(unready)
        try:
            os.chmod(unready, 0o600)
            listener.listen(16)
            os.link(unready, path)  # the socket appears when it accepts connections (and never replaces one)
        finally:
            os.unlink(unready)
    except OSError as err:
        listener.close()
        if made:
            with contextlib.suppress(OSError):
                os.rmdir(folder)
        raise UserError(f"cannot listen on {path} ({err.strerror or err}); give a short path in a writable folder") from err
    listener.setblocking(False)
    return listener, made


def _folder_problem(folder: str) -> str | None:
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode):
        return "not a folder"
    if info.st_uid != os.getuid() or info.st_mode & 0o077:
        return "not a folder of this user that only it may enter (mode 700)"
    return None


def _import_training_code() -> None:
    """Everything `fedgmh train` imports (torch, pandas, every algorithm), so that no child imports it again."""
    import fedgmh.cli_store  # noqa: F401
    import fedgmh.store  # noqa: F401
    import fedgmh.train  # noqa: F401
    from fedgmh.algorithms import algorithm_classes

    algorithm_classes()


@dataclasses.dataclass(eq=False)
class _Connection:
    """A client: sending its request (`request` None), waiting to say go, or waiting for its run (`pid`)."""

    sock: socket.socket
    deadline: float | None
    frames: _Frames = dataclasses.field(default_factory=_Frames)
    fds: list[int] = dataclasses.field(default_factory=list)
    request: dict | None = None
    pid: int | None = None
    closed: bool = False


class _Server:
    """One event loop for every connection: nothing a client sends, or fails to send, holds up another."""

    def __init__(self, command: Callable[[list[str]], int], check: Callable[[list[str]], str | None],
                 listener: socket.socket, stopping: list) -> None:
        import ctypes

        self.command, self.check, self.listener = command, check, listener
        self.selector = selectors.DefaultSelector()
        self.selector.register(listener, selectors.EVENT_READ)
        self.connections: dict[socket.socket, _Connection] = {}
        self.runs: dict[int, _Connection | None] = {}  # pid -> its client's connection (None: the client went away)
        self.stopping = stopping  # why the server stops (a signal, a stop request); empty while it serves
        self.environment = dict(os.environ)
        self.code = code_identity()
        self.prctl = ctypes.CDLL(None, use_errno=True).prctl
        self.pid = os.getpid()
        self.wakeup = self.wake_on_signals()

    def wake_on_signals(self) -> tuple[int, int]:
        """A pipe that a signal writes to, watched by the loop: a finished run (SIGCHLD) is reported,
        and a stop signal obeyed, at once rather than at the next poll."""
        wakeup = os.pipe()
        for fd in wakeup:
            os.set_blocking(fd, False)
        self.selector.register(wakeup[0], selectors.EVENT_READ)
        self.previous_wakeup = signal.set_wakeup_fd(wakeup[1], warn_on_full_buffer=False)
        self.previous_sigchld = signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        return wakeup

    def stop_waking(self) -> None:
        signal.signal(signal.SIGCHLD, self.previous_sigchld)
        signal.set_wakeup_fd(self.previous_wakeup)
        _close_all(list(self.wakeup))

    def step(self, timeout_s: float) -> None:
        for key, _ in self.selector.select(timeout_s):
            if key.fileobj is self.listener:
                self.accept()
                continue
            if key.fileobj == self.wakeup[0]:
                with contextlib.suppress(BlockingIOError):
                    while os.read(self.wakeup[0], 512):
                        pass
                continue
            if key.data.closed:
                continue
            try:
                self.read(key.data)
            except Exception as err:  # noqa: BLE001 - no connection may end the server
                _log(f"dropped a connection: {type(err).__name__}: {err}")
                self.drop(key.data)
        self.expire()
        self.reap()

    def accept(self) -> None:
        try:
            sock, _ = self.listener.accept()
        except BlockingIOError:
            return
        except OSError as err:  # out of descriptors: the waiting connections time out, then it goes on
            _log(f"cannot accept a connection ({err.strerror})")
            time.sleep(POLL_S)
            return
        try:
            uid = _peer_uid(sock)
        except OSError:
            uid = -1
        if uid != os.getuid():
            _log(f"refused a connection from uid {uid}")
            sock.close()
            return
        if sum(conn.pid is None for conn in self.connections.values()) >= MAX_WAITING:
            _log("refused a connection: too many connections are sending their request")
            sock.close()
            return
        sock.setblocking(False)
        conn = _Connection(sock, time.monotonic() + REQUEST_TIMEOUT_S)
        self.connections[sock] = conn
        self.selector.register(sock, selectors.EVENT_READ, conn)

    def read(self, conn: _Connection) -> None:
        try:
            data, fds, _, _ = socket.recv_fds(conn.sock, 65536, len(STDIO))
        except BlockingIOError:
            return
        except OSError:
            data, fds = b"", []
        conn.fds.extend(fds)
        if not data:  # the client went away (killed): its run is stopped
            self.drop(conn)
            return
        if fds and (conn.request is None or conn.pid is not None or len(conn.fds) > len(STDIO)):
            self.refuse(conn, "descriptors other than stdin, stdout and stderr with the go-ahead")
            return
        try:
            conn.frames.feed(data)
        except ProtocolError as err:
            self.refuse(conn, str(err))
            return
        while conn.frames.messages and not conn.closed:
            self.handle(conn, conn.frames.messages.pop(0))

    def handle(self, conn: _Connection, message: dict) -> None:
        if conn.pid is not None:
            signum = message.get("signal")
            if list(message) == ["signal"] and type(signum) is int and signum in FORWARDED:
                _kill(conn.pid, signum)
            else:
                self.drop(conn)
        elif conn.request is not None:
            if not _is(message, "go", True):
                self.refuse(conn, "a request not followed by its go-ahead")
            elif len(conn.fds) != len(STDIO):
                self.refuse(conn, "stdin, stdout and stderr were not passed with the go-ahead")
            else:
                self.start(conn)
        elif _is(message, "stop", True):
            self.stopping.append("a stop request")
            self.reply(conn, {"stopping": True})
            self.close_connection(conn)
        else:
            problem = _request_problem(message) or self.refusal(message)
            if problem:
                self.refuse(conn, problem)
            else:
                conn.request = message
                self.reply(conn, {"ready": True})

    def refusal(self, request: dict) -> str | None:
        """Why this well-formed request is not run here (the client then runs it itself), or None."""
        torch = sys.modules.get("torch")
        if request["code"] != self.code:
            return "the client runs other code (its fedgmh package or sys.path differ from the server's)"
        if torch is not None and torch.cuda.is_initialized():  # never fork a process that holds CUDA
            return "CUDA is initialised in the server"
        return self.check(request["argv"])

    def start(self, conn: _Connection) -> None:
        """Fork the run of `conn`'s request."""
        # a signal the client forwards at once must find the child's own handlers
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT, signal.SIGHUP})
        try:
            pid = os.fork()
        except OSError as err:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
            self.refuse(conn, f"cannot fork the run ({err.strerror})")
            return
        if pid == 0:
            self.run_child(conn, blocked)  # never returns
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        conn.pid, conn.deadline = pid, None
        self.runs[pid] = conn
        _close_all(conn.fds)
        conn.fds = []
        _log(f"{pid}: fedgmh {_printable(shlex.join(conn.request['argv']))}")

    def run_child(self, conn: _Connection, signal_mask: set) -> None:
        """In the forked child: become the client's `fedgmh train` process, run it, exit with its status."""
        code = 1
        try:
            if self.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0 or os.getppid() != self.pid:
                os._exit(128 + signal.SIGKILL)  # the server is gone already
            for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
                signal.signal(signum, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            self.close_others(conn)
            for target, fd in zip(STDIO, conn.fds):
                os.dup2(fd, target)
            _close_all([fd for fd in conn.fds if fd not in STDIO])
            request = conn.request
            os.environ.clear()
            os.environ.update(self.child_environment(request["env"]))
            tempfile.tempdir = None  # the temp folder is looked up again, in the run's environment
            os.umask(request["umask"])
            sys.argv = ["fedgmh", *request["argv"]]
            sys.stdin, sys.stdout, sys.stderr = _std_streams()
            signal.pthread_sigmask(signal.SIG_SETMASK, signal_mask)
            try:
                os.chdir(request["cwd"])
            except OSError as err:
                print(f"fedgmh train: error: cannot enter the working folder {request['cwd']} ({err.strerror})",
                      file=sys.stderr)
                code = 2
            else:
                code = self.command(request["argv"])
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

    def close_others(self, conn: _Connection) -> None:
        """In a child: close the server's descriptors but the run's stdio."""
        signal.set_wakeup_fd(-1)
        _close_all(list(self.wakeup))
        self.selector.close()
        self.listener.close()
        for other in self.connections.values():
            other.sock.close()
            if other is not conn:
                _close_all(other.fds)

    def child_environment(self, client: dict[str, str]) -> dict[str, str]:
        env = {name: value for name, value in self.environment.items() if name not in CLIENT_VARIABLES}
        env.update(client)
        return env

    def reply(self, conn: _Connection, message: dict) -> None:
        """Send a short answer; a client that cannot take it is dropped."""
        try:
            data = _frame(message)
            if conn.sock.send(data) != len(data):
                raise BlockingIOError
        except OSError:
            self.drop(conn)

    def refuse(self, conn: _Connection, problem: str) -> None:
        """Tell the client why nothing runs (it then trains itself), and close; a client that breaks the
        conversation during its run has the run stopped."""
        _log(f"refused a request: {_printable(problem)}")
        if conn.pid is None:
            self.reply(conn, {"refused": problem})
        self.drop(conn)

    def drop(self, conn: _Connection) -> None:
        """The client went away or broke the conversation: close, and stop its run (not yet reaped: a
        reaped pid may be another process's by now)."""
        if conn.pid in self.runs and not conn.closed:
            _kill(conn.pid, signal.SIGTERM)
        self.close_connection(conn)

    def close_connection(self, conn: _Connection) -> None:
        if conn.closed:
            return
        conn.closed = True
        self.connections.pop(conn.sock, None)
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(conn.sock)
        conn.sock.close()
        _close_all(conn.fds)
        conn.fds = []
        if conn.pid is not None and conn.pid in self.runs:
            self.runs[conn.pid] = None

    def expire(self) -> None:
        now = time.monotonic()
        for conn in [c for c in self.connections.values() if c.deadline is not None and c.deadline < now]:
            self.refuse(conn, f"no request and go-ahead within {REQUEST_TIMEOUT_S:g} s")

    def reap(self) -> None:
        """Collect finished children and send each client its exit status."""
        while self.runs:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = self.runs.pop(pid, None)
            code = os.waitstatus_to_exitcode(status)
            _log(f"{pid}: exit status {code}")
            if conn is not None:
                self.reply(conn, {"status": code})
                self.close_connection(conn)

    def close(self, grace_s: float = 30.0) -> None:
        """SIGTERM every running child (a run snapshots its round and exits), wait for them, report to
        their clients, close every connection."""
        for pid, conn in self.runs.items():
            if conn is not None:  # the others were sent it when their client went away: a second one kills at once
                _kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while self.runs and time.monotonic() < deadline:
            self.reap()
            time.sleep(0.05)
        for pid in list(self.runs):
            _kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        self.runs.clear()
        for conn in list(self.connections.values()):
            self.close_connection(conn)
        self.stop_waking()
        self.selector.close()
        self.listener.close()


def _request_problem(message: dict) -> str | None:
    """What is wrong with a request (None: it is one): its keys and their types."""
    if set(message) != _REQUEST_KEYS:
        return f"not a request (keys {sorted(_REQUEST_KEYS)})"
    argv, cwd, umask, env = message["argv"], message["cwd"], message["umask"], message["env"]
    if not (isinstance(argv, list) and argv and all(isinstance(arg, str) and "\0" not in arg for arg in argv)):
        return "argv is not a list of strings"
    if not (isinstance(cwd, str) and os.path.isabs(cwd) and "\0" not in cwd):
        return "cwd is not an absolute path"
    if type(umask) is not int or not 0 <= umask <= 0o777:
        return "umask is not a file mode"
    if not (isinstance(env, dict) and set(env) <= set(CLIENT_VARIABLES)
            and all(isinstance(value, str) and "\0" not in value for value in env.values())):
        return f"env holds other variables than {', '.join(CLIENT_VARIABLES)}, or values that are not strings"
    return None


def _std_streams():
    """New sys.stdin / stdout / stderr on the descriptors 0-2, buffered as a fresh interpreter's would be."""
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    stdin = open(0, "r", closefd=False)  # noqa: SIM115
    stdout = open(1, "w", buffering=1 if unbuffered or os.isatty(1) else -1, closefd=False)  # noqa: SIM115
    stderr = open(2, "w", buffering=1, closefd=False, errors="backslashreplace")  # noqa: SIM115
    return stdin, stdout, stderr


def _log(line: str) -> None:
    print(line, flush=True)


def _printable(text: str) -> str:
    """`text` on one line of ASCII, whatever a client sent."""
    return text.encode("unicode_escape").decode("ascii")


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _kill(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# -- the workflow's server --

def socket_path() -> str:
    """A fresh, short socket path in a folder of the temp folder (/tmp when its path is too long) that
    does not exist yet: the server creates it, private, and removes it when it exits."""
    base = tempfile.gettempdir()
    if len(base) > MAX_SOCKET_PATH - 40:
        base = "/tmp"
    return os.path.join(base, f"fedgmh-warm-{secrets.token_hex(8)}", "socket")


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
    """Stop a server `start` started; its socket and folder are gone afterwards (removed by the server
    or, if it was killed, here)."""
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
