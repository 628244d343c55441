"""The one file lock every part of fedgmh takes: a store while records go in (store.locked), a GPU
slot for a training run's life (gpu_slots), the folder's one campaign (campaign.campaign_lock).

`hold(path)` opens `path` (created if absent) and takes an exclusive lock on it with `filelock`'s
`lock_descriptor`: fcntl.flock on Unix, LockFileEx on Windows (with a filelock older than 3.30, on
POSIX, the same fcntl.flock here). The lock belongs to the open file,
not to a name on disk: it goes when the descriptor is closed or its process ends in any way (killed
included), so no stale lock outlives its holder, and a descriptor handed to a child process
(`subprocess.Popen(pass_fds=...)`) keeps it held there.
"""

from __future__ import annotations

import os
from pathlib import Path

from fedgmh.errors import UserError

try:
    from filelock import lock_descriptor
except ImportError:  # filelock < 3.30 (a GPU machine's image may hold one): the primitive it uses on POSIX
    import errno
    import fcntl
    import time

    def lock_descriptor(fd: int, *, blocking: bool = True, poll_interval: float = 0.05) -> bool:
        """filelock's `lock_descriptor` on POSIX: fcntl.flock of the whole file, polled while `blocking`."""
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except OSError as err:
                if err.errno not in (errno.EACCES, errno.EAGAIN, errno.EWOULDBLOCK):
                    raise
            if not blocking:
                return False
            time.sleep(poll_interval)


def hold(path: Path | str, wait: bool = True) -> int | None:
    """An open descriptor of `path` that holds its exclusive lock, waiting while another holds it
    (`wait`), or None at once when another holds it (`wait=False`). Close the descriptor to release."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except OSError as err:
        raise UserError(f"cannot open the lock file {path}: {err}") from err
    try:
        if lock_descriptor(fd, blocking=wait):
            return fd
    except OSError as err:
        os.close(fd)
        raise UserError(f"cannot lock {path}: {err} (a lock needs a local file system)") from err
    except BaseException:
        os.close(fd)
        raise
    os.close(fd)
    return None
