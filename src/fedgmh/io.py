"""Atomic file writes: a result file is either complete or absent, never half-written.

Every writer goes through `atomic_path`, which hands out a temporary name in the destination's
folder and renames it over the destination only when the block finishes without an exception.
Before the rename the temporary file is flushed to the disk (fsync), and after it the folder is,
so that after a power loss the destination holds either the old or the new complete content.
A write that fails (a full disk, a read-only folder) raises an OSError naming the destination.

`reading` marks the errors of a malformed input file with the file, for the CLI's one line.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

if TYPE_CHECKING:
    import pandas as pd


#: errors of a write itself, whatever file the system names (shutil names the source it copies from)
WRITE_ERRORS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS})


@contextlib.contextmanager
def atomic_path(path: Path | str) -> Iterator[Path]:
    """Yield a temporary path next to `path` (same suffix); rename it to `path` on success. An OSError
    with an errno that names no file or the temporary one, or is a failed write, is raised naming `path`
    (one without an errno passes unchanged: its message is all it has)."""
    path = Path(path)
    tmp: Path | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=path.suffix or ".tmp", dir=path.parent)
        os.close(fd)
        tmp = Path(tmp_name)
        yield tmp
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; results are ordinary readable files
        _fsync(tmp)  # the content reaches the disk before the rename makes it visible
        os.replace(tmp, path)
        _fsync(path.parent, directory=True)  # and so does the rename itself
    except OSError as err:
        if err.errno is not None and (err.errno in WRITE_ERRORS or _names_no_file_or_a_temporary(err, path)):
            raise OSError(err.errno, err.strerror, str(path)) from err
        raise
    finally:
        if tmp is not None and tmp.exists():
            tmp.unlink()


def _names_no_file_or_a_temporary(err: OSError, path: Path) -> bool:
    """Whether `err` names no file, or one of `atomic_path(path)`'s temporaries (which the user never sees)."""
    if not isinstance(err.filename, (str, os.PathLike)):
        return True
    named = Path(err.filename)
    return named.parent == path.parent and named.name.startswith(f".{path.stem}.")


def _fsync(path: Path, directory: bool = False) -> None:
    """Flush `path` (a file, or a folder's entries) to the disk."""
    if directory and os.name == "nt":  # Windows cannot open folders; its renames are journaled
        return
    try:
        fd = os.open(path, os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if directory else 0))
    except PermissionError:
        if directory:  # a folder we may write but not read (mode -wx): the rename is done, skip its sync
            return
        raise
    try:
        os.fsync(fd)
    except OSError as err:
        # a few file systems cannot sync a folder (EINVAL); the file itself is on the disk already
        if not (directory and err.errno in (errno.EINVAL, errno.ENOTSUP)):
            raise
    finally:
        os.close(fd)


def check_writable_folder(path: Path | str, what: str = "output folder") -> None:
    """Raise UserError unless `path` is, or can be made, a folder this process can write files in.

    Tested for real: a temporary file is created and deleted in `path`, or, while it does not exist,
    in its nearest existing parent (where its folders would be made), so permissions, read-only file
    systems and a file in the way all show up. No folder is created or removed here: runs sharing a
    parent check theirs at the same time (the folders are made when the first file is written).
    """
    from fedgmh.errors import UserError

    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UserError(f"{what} {path} is a file, not a folder")
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise UserError(f"{what} {path} cannot be created: {existing} is a file, not a folder")
    try:
        fd, name = tempfile.mkstemp(prefix=".fedgmh-write-test.", dir=existing)
        os.close(fd)
        os.unlink(name)
    except OSError as err:
        raise UserError(f"{what} {path} is not writable ({err.strerror or err})") from None


def remove_leftovers(path: Path | str) -> None:
    """Delete the temporaries of `atomic_path(path)` that a killed process left behind."""
    path = Path(path)
    for leftover in path.parent.glob(f".{path.stem}.*{path.suffix or '.tmp'}"):
        leftover.unlink(missing_ok=True)


#: what interpreting a file of the wrong shape raises: bad bytes, JSON or CSV (ValueError and its kin), a field
#: missing or of another type, nesting past the interpreter's recursion limit
MALFORMED = (ValueError, KeyError, TypeError, IndexError, RecursionError)


@contextlib.contextmanager
def reading(path: Path | str) -> Iterator[None]:
    """Mark a `MALFORMED` error raised while the block reads and interprets `path` with it (`input_file`, the
    innermost file when blocks nest), so the CLI prints one line naming the file; the error passes on unchanged."""
    try:
        yield
    except MALFORMED as err:
        if getattr(err, "input_file", None) is None:
            err.input_file = Path(path)
        raise


def write_json(data: Any, path: Path | str) -> None:
    """Strict JSON: a NaN or infinity raises ValueError (and nothing is written) rather than
    becoming `NaN`/`Infinity`, which JSON readers other than Python's reject."""
    text = json.dumps(data, indent=2, sort_keys=True, default=str, allow_nan=False) + "\n"
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_csv(frame: pd.DataFrame, path: Path | str) -> None:
    with atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False)


def write_text(text: str, path: Path | str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


#: matplotlib's `savefig(metadata=...)` per format: no date in a figure file, so that drawing it again
#: from the same records gives the same bytes (PNG has none to begin with)
FIGURE_NO_DATE: dict[str, dict[str, None]] = {"pdf": {"CreationDate": None}, "svg": {"Date": None}}
