"""Checkpoints: periodic snapshots of a run, read without running code from them, checked against
the run they belong to, so that a killed run resumes exactly where it stopped."""

from __future__ import annotations

import hashlib
import pickle
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from fedgmh.cadence import SNAPSHOT_SHARE
from fedgmh.engine.federation import Federation
from fedgmh.errors import UserError
from fedgmh.runspec import identity_text, same_snapshot_run

_PACKED = "__fedgmh_packed__"  # marks a value that `pack` turned into tensors and plain values


def pack(value):
    """A checkpoint value as tensors and plain Python values only, which `torch.load(weights_only=True)`
    reads without running code: numpy arrays and scalars become raw bytes in a uint8 tensor (exact,
    any dtype), sets become tagged lists."""
    if isinstance(value, (np.ndarray, np.generic)):
        array = np.array(value, order="C")  # a copy; 0-d for a scalar
        raw = torch.from_numpy(array.reshape(-1).view(np.uint8))
        kind = "ndarray" if isinstance(value, np.ndarray) else "scalar"
        return {_PACKED: kind, "dtype": array.dtype.str, "shape": list(array.shape), "bytes": raw}
    if isinstance(value, dict):
        return {k: pack(v) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return {_PACKED: "set", "items": [pack(v) for v in value]}
    if isinstance(value, (list, tuple)):
        return type(value)(pack(v) for v in value)
    return value


def unpack(value):
    """The inverse of `pack` (values that were never packed pass through unchanged)."""
    if isinstance(value, dict):
        kind = value.get(_PACKED)
        if kind in ("ndarray", "scalar"):
            array = np.frombuffer(value["bytes"].numpy().tobytes(), dtype=np.dtype(value["dtype"])).reshape(value["shape"]).copy()
            return array if kind == "ndarray" else array[()]
        if kind == "set":
            return {unpack(v) for v in value["items"]}
        return {k: unpack(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(unpack(v) for v in value)
    return value


class _WriteRecorder:
    """A file for torch.save that keeps what stopped a write: torch.save turns any exception of the
    file's `write` (a full disk's OSError, a Ctrl-C's KeyboardInterrupt) into a RuntimeError of its own."""

    def __init__(self, handle) -> None:
        self.handle, self.error = handle, None

    def write(self, data) -> int:
        try:
            return self.handle.write(data)
        except BaseException as err:
            self.error = err
            raise

    def flush(self) -> None:
        self.handle.flush()


def rows_digest(identity: dict | str, rows: list[dict]) -> str:
    """A checksum of a snapshot's metric rows and the run they belong to (exact: floats by their hex
    form, arrays by dtype, shape and bytes), so rows edited in a snapshot are not resumed into a record.
    It catches edits and corruption, not a forger who recomputes it."""
    digest = hashlib.sha256(identity_text(identity).encode())
    for row in rows:
        for key in sorted(row):
            value = row[key]
            if isinstance(value, (np.ndarray, np.generic)):
                array = np.ascontiguousarray(value)
                text = f"{array.dtype.str}{array.shape}{hashlib.sha256(array.tobytes()).hexdigest()}"
            elif isinstance(value, float):
                text = value.hex()
            else:
                text = repr(value)
            digest.update(f"{key}={text};".encode())
        digest.update(b"\n")
    return digest.hexdigest()


class Checkpoint:
    """Periodic snapshots of a run (written atomically), so a killed run resumes where it stopped.

    The cadence: after every `every` rounds, or (`seconds` > 0, `every` 0) after the round in which at
    least `seconds` of training passed since the last snapshot ended (or the rounds started), and at
    least the last write's time / `SNAPSHOT_SHARE`, so that snapshots take at most that share of the
    run's time whatever their size. Neither: no periodic snapshot. `clock` measures both.

    A snapshot holds the algorithm's state, every RNG state and the metrics so far; resuming
    from it gives exactly the metrics of an uninterrupted run. `identity` describes the run (run.json's
    identity fields, `runspec.run_identity`); a snapshot of another run (`runspec.same_snapshot_run`)
    is refused rather than silently mixed in.

    A snapshot holds only tensors and plain values (`pack`) and is read with
    `torch.load(weights_only=True)`: a file that would run code when loaded (a crafted pickle) is
    refused with a UserError before anything in it is used, and so is one of other settings.
    Its metric rows carry a checksum (`rows_digest`): a snapshot whose rows were edited is refused.
    """

    def __init__(self, path: Path | str, every: int, identity: dict, *, seconds: float = 0.0,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.path, self.every, self.identity, self.seconds, self.clock = Path(path), every, identity, seconds, clock
        self.since: float | None = None  # when the last snapshot ended, or the rounds started
        self.write_seconds = 0.0  # how long the last snapshot took to write

    @property
    def periodic(self) -> bool:
        """Whether the run snapshots as it goes (by rounds or by time)."""
        return self.every > 0 or self.seconds > 0

    def start(self) -> None:
        """The rounds start now: the first snapshot by time counts from here."""
        self.since = self.clock()

    def due(self, rnd: int, rounds: int) -> bool:
        """Whether round `rnd` (of `rounds`; the final evaluation never) ends with a snapshot."""
        if rnd >= rounds:
            return False
        if self.every > 0:
            return (rnd + 1) % self.every == 0
        if self.seconds <= 0:
            return False
        if self.since is None:
            self.start()
        return self.clock() - self.since >= max(self.seconds, self.write_seconds / SNAPSHOT_SHARE)

    def save(self, snapshot: dict) -> None:
        """Write the snapshot atomically: a failed or interrupted write (a full disk, Ctrl-C) leaves the
        previous one as it was and raises what stopped it (`_WriteRecorder`)."""
        began = self.clock()
        self._write(snapshot)
        self.taken(began)

    def taken(self, began: float) -> None:
        """A snapshot was taken from `began` (`clock`) to now: the next one by time counts from now, and
        waits for at least this one's cost / `SNAPSHOT_SHARE`."""
        self.since = self.clock()
        self.write_seconds = self.since - began

    def _write(self, snapshot: dict) -> None:
        from fedgmh.io import atomic_path

        with atomic_path(self.path) as tmp, open(tmp, "wb") as handle:
            writer = _WriteRecorder(handle)
            try:
                torch.save({"identity": identity_text(self.identity), "rows_digest": rows_digest(self.identity, snapshot.get("rows", [])),
                            **pack(snapshot)}, writer)
            except RuntimeError:
                if writer.error is None:
                    raise
                raise writer.error from None

    def _read(self) -> dict:
        """The file's contents, read without running code from it."""
        try:
            return torch.load(self.path, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError:
            needs = _unsafe_globals(self.path)
            what = f"objects other than tensors and plain values ({', '.join(needs[:5])})" if needs else \
                "objects other than tensors and plain values, or is unreadable"
            raise UserError(f"checkpoint {self.path} holds {what}, so it was not loaded (such a file can run code "
                            "when loaded); delete it to start the run afresh") from None

    def load(self) -> dict | None:
        if not self.path.exists():
            return None
        try:
            snapshot = self._read()
        except UserError:
            raise
        except Exception as err:  # noqa: BLE001 - any unreadable file gets the same advice
            why = type(err).__name__ + (f": {err}" if str(err) else "")
            raise UserError(f"checkpoint {self.path} is unreadable ({why}); delete it to start the run afresh") from err
        if not isinstance(snapshot, dict) or "identity" not in snapshot:
            raise UserError(f"checkpoint {self.path} is not a fedgmh checkpoint; delete it to start the run afresh")
        if not same_snapshot_run(snapshot["identity"], self.identity):  # checked before anything is used
            raise UserError(f"checkpoint {self.path} belongs to a run with other settings; delete it to start afresh")
        try:
            unpacked = unpack({k: v for k, v in snapshot.items() if k not in ("identity", "rows_digest")})
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise UserError(f"checkpoint {self.path} is unreadable ({err}); delete it to start the run afresh") from None
        if snapshot.get("rows_digest") != rows_digest(snapshot["identity"], unpacked.get("rows", [])):
            raise UserError(f"checkpoint {self.path} holds metric rows that do not match its checksum (edited or corrupt), "
                            "so it was not resumed; delete it to start the run afresh")
        return unpacked

    def holds_other_run(self) -> bool:
        """Whether the snapshot file belongs to a run of other settings (False when there is none or it
        cannot be read as one: `load` then says what is wrong)."""
        if not self.path.is_file():
            return False
        try:
            snapshot = self._read()
        except Exception:  # noqa: BLE001 - unreadable: not known to be another run's
            return False
        return isinstance(snapshot, dict) and "identity" in snapshot and not same_snapshot_run(snapshot["identity"], self.identity)

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def _unsafe_globals(path: Path) -> list[str] | None:
    """The globals a pickle needs beyond what weights_only allows (read from its opcodes, nothing
    run); None when this torch cannot tell."""
    finder = getattr(torch.serialization, "get_unsafe_globals_in_checkpoint", None)
    if finder is None or not hasattr(torch.serialization, "safe_globals"):
        return None
    try:
        return list(finder(path))
    except Exception:  # noqa: BLE001 - not a zip checkpoint: nothing to allow
        return None


def restore_run(fed: Federation, algorithm, snapshot: dict, rng: np.random.RandomState,
                source: Path | str = "the snapshot") -> None:
    """Put a loaded snapshot back: the run's generators, participation counts and the algorithm's state,
    each checked first (`snapshot_problem`); UserError naming `source` (its file) when one is wrong."""
    problem = snapshot_problem(fed, algorithm, snapshot)
    if problem is None:
        try:
            fed.generator.set_state(snapshot["generator"])
            rng.set_state(snapshot["rng"])
        except (TypeError, ValueError, RuntimeError, IndexError, KeyError) as err:
            problem = f"its random generators' states cannot be restored ({str(err).splitlines()[0] if str(err) else err!r})"
    if problem is not None:
        raise UserError(f"checkpoint {source} is invalid: {problem}; delete it to start the run afresh")
    fed.participations[:] = snapshot["participations"]  # in place: algorithms may hold views of fed
    algorithm.load_state({k: _to_device(v, fed.device) for k, v in snapshot["algorithm"].items()})
    fed.sample_passes.restore(None if snapshot.get("sample_passes") is None else tuple(map(int, snapshot["sample_passes"])))
    fed.evaluation_passes.restore(None if snapshot.get("evaluation_passes") is None
                                  else tuple(map(int, snapshot["evaluation_passes"])))


def _count(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= 0


def snapshot_problem(fed: Federation, algorithm, snapshot: dict) -> str | None:
    """What is wrong with a snapshot's contents for this run (None: nothing): the round to resume from
    one of its rounds, participations a count per client, sample passes
    two counts with useful <= executed <= batch size x useful (a batch holds at least one sample), the
    metric rows a list of rows, and the algorithm's state the tensors (shape, dtype) of a fresh one."""
    missing = sorted({"next_round", "rows", "rng", "generator", "participations", "algorithm"} - set(snapshot))
    if missing:
        return f"it lacks {', '.join(missing)}"
    first, rounds = snapshot["next_round"], fed.total_rounds
    if not (_count(first) and 1 <= first <= (rounds if rounds is not None else first)):
        return f"next_round {first!r} is not a round of the run's {rounds}"
    if not (isinstance(snapshot["rows"], list) and all(isinstance(row, dict) for row in snapshot["rows"])):
        return "its metric rows are not a list of rows"
    counts = snapshot["participations"]
    if not (isinstance(counts, np.ndarray) and counts.dtype.kind in "iu" and counts.shape == fed.participations.shape
            and (counts >= 0).all()):
        return (f"participations must be {fed.num_clients} whole counts >= 0, got "
                f"{getattr(counts, 'dtype', type(counts).__name__)} {getattr(counts, 'shape', '')}")
    passes = snapshot.get("sample_passes")
    if passes is not None and not (isinstance(passes, (tuple, list)) and len(passes) == 2 and all(map(_count, passes))
                                   and passes[0] <= passes[1] <= fed.batch_size * passes[0]):
        return f"sample_passes {passes!r} is not (useful, executed) with 0 <= useful <= executed <= batch size x useful"
    passes = snapshot.get("evaluation_passes")
    if passes is not None and not (isinstance(passes, (tuple, list)) and len(passes) == 2 and all(map(_count, passes))
                                   and passes[0] <= passes[1]):
        return f"evaluation_passes {passes!r} is not (useful, executed) with 0 <= useful <= executed"
    if not isinstance(snapshot["algorithm"], dict):
        return "the algorithm's state is not a mapping"
    for key, value in snapshot["algorithm"].items():
        problem = _unlike(getattr(algorithm, key, None), value, f"algorithm state {key}")
        if problem:
            return problem
    return None


def _unlike(fresh, value, where: str) -> str | None:
    """Why `value` cannot stand for `fresh` (a fresh algorithm's attribute; None: it can): a tensor,
    generator or array must come back as the same kind, a tensor of the same shape and dtype."""
    if isinstance(fresh, torch.Generator):
        return None if isinstance(value, torch.Tensor) and value.dtype == torch.uint8 else f"{where} is not a generator's state"
    if isinstance(fresh, torch.Tensor):
        if not isinstance(value, torch.Tensor) or value.shape != fresh.shape or value.dtype != fresh.dtype:
            return f"{where} must be a {fresh.dtype} tensor of shape {tuple(fresh.shape)}"
        return None
    if isinstance(fresh, np.ndarray):
        ok = isinstance(value, np.ndarray) and value.dtype == fresh.dtype and value.shape == fresh.shape
        return None if ok else f"{where} must be a {fresh.dtype} array of shape {fresh.shape}"
    if isinstance(fresh, dict):
        if not isinstance(value, dict):
            return f"{where} is not a mapping"
        for key in fresh.keys() & value.keys():
            problem = _unlike(fresh[key], value[key], f"{where}[{key!r}]")
            if problem:
                return problem
    return None


def _to_device(value, device: torch.device):
    """Move the tensors of a (nested) checkpoint value to `device`, keeping shared tensors shared."""
    if device.type == "cpu":
        return value
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, dict):
        return {k: _to_device(v, device) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_device(v, device) for v in value)
    return value


def snapshot_run(checkpoint: Checkpoint, fed: Federation, algorithm, rng: np.random.RandomState, rows: list[dict], rnd: int) -> int:
    """Snapshot the run after round `rnd`; returns the round it resumes from."""
    began = checkpoint.clock()  # gathering the state counts as part of the snapshot's cost
    checkpoint.save({
        "next_round": rnd + 1,
        "rows": rows,
        "rng": rng.get_state(),
        "generator": fed.generator.get_state(),
        "participations": fed.participations.copy(),
        "algorithm": algorithm.state(),
        "sample_passes": fed.sample_passes.state(),
        "evaluation_passes": fed.evaluation_passes.state(),
    })
    checkpoint.taken(began)
    return rnd + 1
