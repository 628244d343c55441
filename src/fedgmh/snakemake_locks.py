"""Snakemake's lock of a folder, and when a campaign may remove one that a killed Snakemake left.

Snakemake writes `.snakemake/locks/N.input.lock` and `N.output.lock` when it starts and removes the
folder when it ends; a killed Snakemake leaves them, and every later call over the same outputs fails
until `snakemake --unlock`. The files cannot tell a dead holder from a live one (and Snakemake 9
removes the whole folder when any call ends, other live calls' files included), so the campaign
removes them only when all of these hold (`clear_stale_lock`):

1. No Snakemake of this workflow runs in the folder: each one holds a shared kernel lock on
   `ALIVE` for its life (`hold_alive`, called by workflow/rules/common.smk, which every Snakemake
   loading the workflow runs after changing into its working folder, however it was started, by any
   user), and the campaign takes the exclusive lock without waiting.
2. /proc is readable and shows no process that looks like Snakemake (`looks_like_snakemake`) whose
   working folder is this one or cannot be read (another user's), and none of this user's processes
   holds a file under its `.snakemake` open: a Snakemake of another Snakefile is caught this way.
3. Every file in the lock folder is one that a Snakemake started by a campaign on this host recorded
   as its own (`record_own_locks`, from the workflow's onstart: `OWNED` names host, boot, pid and
   start time, and each file's inode, size and mtime), and that process is gone.

Otherwise nothing is removed and the refusal says what was seen. Not covered: another user's
Snakemake of another Snakefile, started through a renamed link given as a relative path (neither
its command line nor its working folder tells), and a Snakemake on another host over a shared file
system whose kernel lock does not reach this host.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Iterable
from pathlib import Path

from fedgmh.errors import UserError
from fedgmh.io import write_json

try:
    import fcntl
except ImportError:  # Windows: no Snakemake lock can be shown stale
    fcntl = None  # type: ignore[assignment]

#: held (shared) by every Snakemake that loads this workflow, for its life; not in .snakemake/locks,
#: which Snakemake removes whole when any call ends
ALIVE = Path(".snakemake") / "fedgmh-workflow.alive"
#: the lock files a Snakemake started by a campaign wrote, with the process that wrote them
OWNED = Path(".snakemake") / "fedgmh-campaign-locks.json"
LOCKS = Path(".snakemake") / "locks"
PROC = Path("/proc")


def hold_alive(folder: Path | str = ".", wait_s: float = 10.0) -> int | None:
    """A descriptor holding the shared lock on `folder`/ALIVE (kept open: the lock ends with the
    process), or None where it cannot be had (a read-only folder; a campaign holding it longer than
    `wait_s`, which it never does). The file is made readable by all, so other users' campaigns can test it."""
    if fcntl is None:
        return None
    path = Path(folder) / ALIVE
    try:
        path.parent.mkdir(exist_ok=True)
        fd = os.open(path, os.O_RDONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except OSError:
        return None
    with contextlib.suppress(OSError):
        os.fchmod(fd, 0o644)  # another user's file: left as it is
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() < deadline:
                time.sleep(0.05)
                continue
        except OSError:
            pass
        os.close(fd)
        return None


def process_identity(pid: int) -> tuple[str, int] | None:
    """(boot id, start time in clock ticks) of process `pid`, which tells it from a later process of
    the same pid; None when it is gone or /proc cannot tell."""
    try:
        boot = (PROC / "sys" / "kernel" / "random" / "boot_id").read_text().strip()
        stat = (PROC / str(pid) / "stat").read_text()
        return boot, int(stat.rsplit(")", 1)[1].split()[19])  # field 22, after the command's name
    except (OSError, IndexError, ValueError):
        return None


def lock_file_state(path: Path) -> list[int]:
    """What tells one lock file from another written later under the same name."""
    status = os.stat(path, follow_symlinks=False)
    return [status.st_ino, status.st_size, status.st_mtime_ns]


def record_own_locks(lock_files: Iterable[str | Path], folder: Path | str = ".", pid: int | None = None) -> None:
    """Write OWNED: `lock_files` (this Snakemake's, in `folder`/LOCKS) are this process's (`pid`)."""
    pid = os.getpid() if pid is None else pid
    identity = process_identity(pid)
    files = {Path(name).name: lock_file_state(Path(folder) / LOCKS / Path(name).name) for name in lock_files}
    write_json({"host": socket.gethostname(), "boot": identity and identity[0], "pid": pid,
                "start": identity and identity[1], "locks": files}, Path(folder) / OWNED)


def looks_like_snakemake(argv: list[str], cwd: str | None, exe: str | None) -> bool:
    """A word of the command line named snakemake (`snakemake`, `python -m snakemake`, a path to it),
    or argv[0], argv[1] (a script's interpreter and script) or the executable resolving to one."""
    if any(Path(word).name == "snakemake" or word == "-msnakemake" for word in argv):
        return True
    paths = [os.path.join(cwd, word) if cwd else word for word in argv[:2] if word and (cwd or os.path.isabs(word))]
    return any(Path(os.path.realpath(path)).name == "snakemake" for path in [*paths, *([exe] if exe else [])])


def snakemakes_in(folder: Path) -> list[str]:
    """'PID (command line)' of each process that may be a Snakemake working in `folder` (see the module).
    UserError when /proc cannot be read."""
    folder, me, found = folder.resolve(), os.getpid(), []
    if not (PROC / "1" / "cmdline").exists():
        raise UserError("cannot read /proc")
    dot_snakemake = str(folder / ".snakemake") + os.sep
    for process in PROC.iterdir():
        if not process.name.isdigit() or int(process.name) == me:
            continue
        try:
            argv = [word.decode(errors="replace") for word in (process / "cmdline").read_bytes().split(b"\0") if word]
        except (FileNotFoundError, ProcessLookupError):
            continue  # ended meanwhile
        except OSError as err:
            raise UserError(f"cannot read {process / 'cmdline'} ({err.strerror})") from None
        seen = f"{process.name} ({' '.join(argv)[:120]})"
        try:
            cwd = os.readlink(process / "cwd")
        except (FileNotFoundError, ProcessLookupError):
            continue
        except OSError:  # another user's process
            if looks_like_snakemake(argv, None, None):
                found.append(f"{seen}, working folder unreadable")
            continue
        try:
            exe = os.readlink(process / "exe")
        except OSError:
            exe = None
        if looks_like_snakemake(argv, cwd, exe) and Path(cwd).resolve() == folder:
            found.append(seen)
        elif open_under(process, dot_snakemake):
            found.append(f"{seen}, holds a file in {dot_snakemake}")
    return found


def open_under(process: Path, prefix: str) -> bool:
    """Whether the process holds a file under `prefix` open (Snakemake keeps its log there)."""
    try:
        return any(os.readlink(fd).startswith(prefix) for fd in (process / "fd").iterdir())
    except OSError:
        return False


def alive_elsewhere(owned: dict) -> str | None:
    """Why the process that wrote OWNED may still hold its lock (None: it is gone)."""
    if owned.get("host") != socket.gethostname():
        return f"left by a Snakemake on host {owned.get('host')!r}, not this one"
    identity = process_identity(owned["pid"])
    if identity is not None and [identity[0], identity[1]] == [owned.get("boot"), owned.get("start")]:
        return f"its Snakemake, pid {owned['pid']}, still runs"
    return None


def not_ours(folder: Path) -> str | None:
    """Why the files of `folder`/LOCKS are not all a dead campaign Snakemake's own (None: they are)."""
    try:
        owned = json.loads((folder / OWNED).read_text())
        files = owned["locks"]
        if not (isinstance(files, dict) and isinstance(owned["pid"], int)):
            raise ValueError
    except FileNotFoundError:
        return "not left by a campaign on this host (no record of its lock files)"
    except (OSError, ValueError, KeyError, TypeError):
        return f"{folder / OWNED} cannot be read"
    for path in sorted((folder / LOCKS).iterdir()):
        try:
            if files.get(path.name) != lock_file_state(path):
                return f"{path.name} was not left by a campaign on this host"
        except FileNotFoundError:
            continue
    return alive_elsewhere(owned)


def clear_stale_lock(folder: Path | str, busy: str | None = None) -> list[Path]:
    """Remove the lock files a killed campaign Snakemake left in `folder` (returned; [] when there are
    none). UserError naming what was seen, and nothing removed, unless the module's three conditions
    hold; `busy`: another reason to keep the lock (a training process of the folder still runs)."""
    folder = Path(folder).resolve()
    locks = folder / LOCKS
    if not (locks.is_dir() and any(locks.iterdir())):
        return []

    def refuse(seen: str) -> UserError:
        return UserError(f"Snakemake's lock {locks} is kept: {seen}")

    if fcntl is None:
        raise refuse("no kernel lock to tell a live Snakemake on this system")
    try:
        fd = os.open(folder / ALIVE, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as err:
        raise refuse(f"cannot open {folder / ALIVE} ({err.strerror})") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise refuse(f"a Snakemake of this workflow holds {folder / ALIVE}") from None
        try:
            seen = snakemakes_in(folder)
        except UserError as err:
            raise refuse(str(err)) from None
        if seen:
            raise refuse("Snakemake may work there: process " + "; ".join(seen))
        problem = busy or not_ours(folder)
        if problem:
            raise refuse(problem)
        removed = sorted(locks.iterdir())
        for path in removed:
            path.unlink(missing_ok=True)
        return removed
    finally:
        os.close(fd)
