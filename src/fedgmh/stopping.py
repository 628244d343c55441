"""SIGTERM as a request to stop at the end of the round, so the stop loses no training.

A scheduler ends a job with SIGTERM and, some seconds later (SLURM's KillWait, `timeout -k`: 30 s),
SIGKILL. A run stopped at once keeps only its last periodic snapshot, and loses the rounds since.
While `sigterm_at_round_end()` is active the first SIGTERM is only noted: the round loop finishes
the round it is playing, snapshots it and stops (`engine.run_rounds`; in the run's last training
round it finishes the run instead). A second SIGTERM stops at once, as outside the block. Ctrl-C (SIGINT) always stops at once: a person at a terminal is waiting.
Runs in other threads (`fedgmh train-group`) share the main thread's request while it holds
`for_threads()`: each stops at the end of its own round.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from typing import Iterator

from fedgmh.errors import Interrupted


#: what a run says when the first SIGTERM arrives
NOTICE = ("SIGTERM: stopping at the end of this round, with a snapshot, or at the end of the run when this is its "
          "last training round (a second SIGTERM stops at once)\n")


class StopRequest:
    """Whether a stop was asked for (`signum`: the signal, or None)."""

    def __init__(self) -> None:
        self.signum: int | None = None


#: the main thread's request that runs in other threads share (`for_threads`), or None
_shared: StopRequest | None = None


@contextlib.contextmanager
def for_threads() -> Iterator[StopRequest]:
    """In the main thread: SIGTERM noted as `sigterm_at_round_end` notes it, and the request shared
    with the `sigterm_at_round_end` blocks of other threads while this block runs."""
    global _shared
    with sigterm_at_round_end() as request:
        _shared = request
        try:
            yield request
        finally:
            _shared = None


@contextlib.contextmanager
def sigterm_at_round_end(enabled: bool = True) -> Iterator[StopRequest]:
    """While the block runs, the first SIGTERM sets the request's `signum` (and says so on stderr);
    the second raises `Interrupted`. Off (a request that stays None) when not `enabled`, outside the
    main thread (only it receives signals; but see `for_threads`) and where SIGTERM is ignored."""
    request = StopRequest()
    if enabled and threading.current_thread() is not threading.main_thread() and _shared is not None:
        yield _shared
        return
    if not enabled or threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGTERM) is signal.SIG_IGN:
        yield request
        return

    def note(signum, frame):
        if request.signum is not None:
            signal.signal(signal.SIGTERM, previous)  # a third one is the caller's again
            raise Interrupted(signum)
        request.signum = signum
        os.write(2, NOTICE.encode())  # not print: a handler may run while the main thread is inside a print

    previous = signal.signal(signal.SIGTERM, note)
    try:
        yield request
    finally:
        signal.signal(signal.SIGTERM, previous)
