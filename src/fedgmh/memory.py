"""How much memory a run holds: tensor bytes of an algorithm's state and the process's peak RSS."""

from __future__ import annotations

import dataclasses
import resource
import sys

import torch


def tensor_bytes(value, seen: set[int] | None = None) -> int:
    """Bytes of the distinct tensor storages reachable from `value` (dicts, lists, tuples, dataclasses);
    a storage shared by several clients counts once."""
    seen = set() if seen is None else seen
    if isinstance(value, torch.Tensor):
        storage = value.untyped_storage()
        if storage.data_ptr() in seen:
            return 0
        seen.add(storage.data_ptr())
        return storage.nbytes()
    if isinstance(value, dict):
        return sum(tensor_bytes(v, seen) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(tensor_bytes(v, seen) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return sum(tensor_bytes(getattr(value, f.name), seen) for f in dataclasses.fields(value))
    return 0


def peak_rss_bytes() -> int:
    """Peak resident memory of this process so far (ru_maxrss: KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024
