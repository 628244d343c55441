"""GPU slots: give every concurrent training job on one machine a slot on a GPU.

`snakemake ... --resources gpu=K` lets at most K training jobs run at once, but Snakemake does not
say WHICH GPU a job should use. `fedgmh train --device cuda:auto --jobs-per-gpu J` asks this module:
every GPU has J slots, one lock file each, and the job takes an exclusive OS lock (fedgmh.locks)
on one free slot of the GPU with the fewest jobs (lowest index on a tie), with non-blocking locks.
The lock is held for the whole run. Because it is a kernel lock on an open file (not the existence
of a file), it is released when the process ends in any way, killed included, so a crashed job never
blocks a slot; two jobs that start at the same instant can never get the same slot. With J = 1 (the
default) a job has a GPU to itself; with J > 1 up to J jobs share each GPU, and jobs are spread over
the GPUs before any GPU gets a second one. K should then be (number of GPUs) x J.

Sharing a GPU changes nothing in a run's numbers: each job is its own process with its own data,
model, RNG streams and record, exactly as when it runs alone. The jobs' kernels share the GPU by
time-slicing; with NVIDIA's CUDA MPS daemon running (started by an administrator), kernels of
different processes overlap, which helps small models like ours. MPS is optional.

When every slot is taken the job polls until one is freed, and after `timeout_s` (default 600 s,
`$FEDGMH_GPU_WAIT_S`) stops with an error that names the holders.

Where the lock files live: `$FEDGMH_GPU_LOCK_DIR`, else `<tmp>/fedgmh-gpu-slots-<user>` (plus
`-slurm<job id>` inside a SLURM job). Jobs that should share GPUs must share this folder, which
must be on a local file system (one per machine: the GPUs are per machine too). Slot 0 of a GPU is
`gpu-<id>.lock` (the only slot with J = 1), slot j > 0 `gpu-<id>+slot<j>.lock`, so jobs started
with different J still agree about who holds what.

`CUDA_VISIBLE_DEVICES` is honoured: the GPUs are the visible ones (torch numbers them 0..n-1), and
their lock files are named after the entries of the variable (e.g. `gpu-2.lock` for the physical
GPU 2, `gpu-GPU-8a1f....lock` for a UUID), so jobs with different visible sets still agree. When
exactly one device is visible (what a scheduler such as SLURM does for a one-GPU job) that GPU was
assigned by the scheduler: it is used without any locking.
"""

from __future__ import annotations

import atexit
import getpass
import os
import re
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Mapping

from fedgmh import locks
from fedgmh.errors import UserError

#: the `--device` value that takes a free GPU slot
SLOT_DEVICE = "cuda:auto"

DEFAULT_TIMEOUT_S = 600.0


class GpuSlotTimeout(UserError):
    """No GPU slot became free within the timeout."""


def visible_devices(env: Mapping[str, str] | None = None) -> list[str] | None:
    """Entries of CUDA_VISIBLE_DEVICES (None when it is unset).

    Like CUDA, the list stops at the first empty or negative entry ("" and "-1" hide every GPU).
    """
    env = os.environ if env is None else env
    value = env.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    entries = []
    for entry in value.split(","):
        entry = entry.strip()
        if not entry or entry.startswith("-"):
            break
        entries.append(entry)
    return entries


def default_lock_dir(env: Mapping[str, str] | None = None) -> Path:
    """`$FEDGMH_GPU_LOCK_DIR`, else a per-user folder in the system temp dir (per SLURM job inside one)."""
    env = os.environ if env is None else env
    if env.get("FEDGMH_GPU_LOCK_DIR"):
        return Path(env["FEDGMH_GPU_LOCK_DIR"])
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    name = f"fedgmh-gpu-slots-{re.sub(r'[^A-Za-z0-9_.-]', '_', user)}"
    if env.get("SLURM_JOB_ID"):
        name += f"-slurm{env['SLURM_JOB_ID']}"
    return Path(tempfile.gettempdir()) / name


def default_timeout(env: Mapping[str, str] | None = None) -> float:
    env = os.environ if env is None else env
    value = env.get("FEDGMH_GPU_WAIT_S")
    if not value:
        return DEFAULT_TIMEOUT_S
    try:
        return float(value)
    except ValueError:
        raise UserError(f"FEDGMH_GPU_WAIT_S={value!r} is not a number of seconds") from None


def _lock_name(key: str, slot: int = 0) -> str:
    """`gpu-<key>.lock` for slot 0, `gpu-<key>+slot<j>.lock` after it ("+" never occurs in a cleaned key)."""
    return "gpu-" + re.sub(r"[^A-Za-z0-9_.-]", "_", key) + (f"+slot{slot}" if slot else "") + ".lock"


def _holder(path: Path) -> str:
    try:
        text = path.read_text().strip()
    except OSError:
        return "?"
    return text or "?"


def _no_release() -> None:
    pass


def _try_lock(path: Path) -> int | None:
    """An open descriptor holding the exclusive lock on `path`, or None when another process holds it."""
    try:
        return locks.hold(path, wait=False)
    except UserError as err:
        raise UserError(f"{err}; set FEDGMH_GPU_LOCK_DIR to a folder on a local file system") from None


def _take_best_slot(paths: dict[tuple[int, int], Path], jobs_per_gpu: int) -> tuple[int, int, int] | None:
    """Lock every free slot at once, keep one of the GPU with the fewest other holders (then the
    lowest GPU index, then the lowest slot), unlock the rest; (gpu, slot, fd) or None if none is free.

    Holding all free slots for that instant makes the count of other holders exact, and a job that
    starts at the same moment and finds them taken just polls again."""
    got = {}
    try:
        for where, path in paths.items():
            fd = _try_lock(path)
            if fd is not None:
                got[where] = fd
    except BaseException:
        for fd in got.values():
            os.close(fd)
        raise
    if not got:
        return None
    busy = {gpu: jobs_per_gpu - sum(1 for g, _ in got if g == gpu) for gpu, _ in paths}
    best = min(got, key=lambda where: (busy[where[0]], where[0], where[1]))
    for where, fd in got.items():
        if where != best:
            os.close(fd)
    return best[0], best[1], got[best]


def acquire_gpu(
    num_gpus: int,
    lock_dir: str | os.PathLike | None = None,
    timeout_s: float | None = None,
    *,
    jobs_per_gpu: int = 1,
    env: Mapping[str, str] | None = None,
    poll_s: float = 0.5,
    on_wait: Callable[[str], None] | None = None,
) -> tuple[int, Callable[[], None]]:
    """Lock a free slot on one of the `num_gpus` visible GPUs (`jobs_per_gpu` slots each); return
    (index, release).

    `index` is the torch index (`cuda:<index>`); `release()` unlocks the slot (idempotent; the lock
    also goes away when the process exits). Raises GpuSlotTimeout when no slot is free after
    `timeout_s` seconds (0: try once), UserError when there is no GPU or the lock folder is unusable.
    `env` (default os.environ) supplies CUDA_VISIBLE_DEVICES; `on_wait` gets one message when the
    call starts waiting.
    """
    env = os.environ if env is None else env
    if num_gpus < 1:
        raise UserError("no GPU is visible (torch.cuda.device_count() is 0); use --device cpu")
    if jobs_per_gpu < 1:
        raise UserError(f"jobs per GPU must be at least 1 (got {jobs_per_gpu})")
    visible = visible_devices(env)
    if visible is not None and len(visible) == 1 and num_gpus == 1:
        return 0, _no_release  # the scheduler gave this job its GPU: nothing to choose
    if visible is not None and len(visible) == num_gpus:
        keys = visible
    else:
        keys = [str(i) for i in range(num_gpus)]
    lock_dir = Path(lock_dir) if lock_dir is not None else default_lock_dir(env)
    timeout_s = default_timeout(env) if timeout_s is None else float(timeout_s)
    try:
        lock_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as err:
        raise UserError(f"cannot create the GPU lock folder {lock_dir}: {err} (set FEDGMH_GPU_LOCK_DIR)") from err
    paths = {(gpu, slot): lock_dir / _lock_name(key, slot) for slot in range(jobs_per_gpu) for gpu, key in enumerate(keys)}
    slots = len(paths)
    per_gpu = f" ({num_gpus} GPU(s) x {jobs_per_gpu} jobs per GPU)" if jobs_per_gpu > 1 else ""

    deadline = time.monotonic() + timeout_s
    waiting = False
    while True:
        taken = _take_best_slot(paths, jobs_per_gpu)
        if taken is not None:
            index, slot, fd = taken
            # who holds it, for the messages of jobs that wait (the lock, not this text, is what counts)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode(), 0)
            state = {"fd": fd}

            def release(state: dict = state) -> None:
                fd = state.pop("fd", None)
                if fd is not None:
                    os.close(fd)  # closing the only descriptor drops the flock

            return index, release
        now = time.monotonic()
        if now >= deadline:
            holders = "; ".join(
                f"GPU {gpu} ({keys[gpu]})" + (f" slot {slot}" if jobs_per_gpu > 1 else "") + f": {_holder(path)}"
                for (gpu, slot), path in paths.items()
            )
            raise GpuSlotTimeout(
                f"no free GPU after waiting {timeout_s:g} s: all {slots} GPU slot(s){per_gpu} in {lock_dir} are held ({holders}). "
                f"Run at most {slots} training job(s) at once (snakemake ... --resources gpu={slots}), "
                "or wait longer with FEDGMH_GPU_WAIT_S=SECONDS"
            )
        if not waiting and on_wait is not None:
            on_wait(f"all {slots} GPU slot(s){per_gpu} are in use (locks in {lock_dir}); waiting up to {timeout_s:g} s for one to free up")
        waiting = True
        time.sleep(min(poll_s, max(deadline - now, 0.0)))


_HELD: list[Callable[[], None]] = []  # releases of the slots this process holds until it exits


def hold_gpu_for_process(num_gpus: int, jobs_per_gpu: int = 1) -> int:
    """Take a GPU slot for the rest of this process (released at exit); return its torch index."""
    index, release = acquire_gpu(num_gpus, jobs_per_gpu=jobs_per_gpu, on_wait=lambda message: print(f"fedgmh: {message}", file=sys.stderr, flush=True))
    _HELD.append(release)
    return index


@atexit.register
def release_held() -> None:
    """Release every slot taken by hold_gpu_for_process (also happens when the process dies)."""
    while _HELD:
        _HELD.pop()()
