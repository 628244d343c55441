"""fedgmh.locks with a filelock older than 3.30 (no `lock_descriptor`, as a GPU machine's image may hold):
the same fcntl.flock lock, seen by the newer filelock too, so a lease's runs still import and lock."""

from __future__ import annotations

import importlib
import os
import sys
import threading
import time
import types
from pathlib import Path

import pytest
from filelock import lock_descriptor

import fedgmh.locks


def test_an_older_filelock_gives_the_same_lock(tmp_path: Path, monkeypatch) -> None:
    pytest.importorskip("fcntl")  # the fallback is POSIX's
    monkeypatch.setitem(sys.modules, "filelock", types.ModuleType("filelock"))  # a filelock without lock_descriptor
    try:
        locks = importlib.reload(fedgmh.locks)
        assert locks.lock_descriptor.__module__ == "fedgmh.locks"
        path = tmp_path / "slot.lock"
        held = locks.hold(path)
        assert locks.hold(path, wait=False) is None  # another open file: refused at once
        other = os.open(path, os.O_RDWR)
        try:
            assert lock_descriptor(other, blocking=False) is False  # the real filelock sees the same lock
        finally:
            os.close(other)
        got = []
        waiter = threading.Thread(target=lambda: got.append(locks.hold(path)))  # waits while it is held
        waiter.start()
        time.sleep(0.3)
        assert waiter.is_alive() and not got
        os.close(held)
        waiter.join(5)
        assert got and got[0] is not None
        os.close(got[0])
    finally:
        monkeypatch.undo()
        importlib.reload(fedgmh.locks)
    assert fedgmh.locks.lock_descriptor is lock_descriptor
