"""The results store: finished runs are kept, found by what they ran, and reused instead of retrained.

A *record* is a run folder holding `run.json` and `metrics.csv` (what `fedgmh train` writes), and
its other tables when the code that made it wrote them (every other CSV of the folder:
`clients.csv`, per-client accuracy, and an algorithm's own, e.g. pFedLA's `layer_weights.csv`):
records without them stay valid, and one is added to a stored record of the same run that lacks it
(merge, put). Every record read is validated first (fedgmh.record: regular files, strict JSON,
results that agree with the metrics); an invalid one is reported and never used. A
*store* is any folder of records, at any depth (by default the workflow searches `paper_artifacts/`,
where every config's records are committed). A record's *run key* is its run's spec
(`fedgmh.runspec.RunSpec`, docs/store.md "Run identity") as JSON: a record is reused only when its
spec equals the run's exactly. Options added to the code after a record was written are compared at
their default (adding an option whose default reproduces the old behaviour needs no new results
version); any change to the numbers a run produces bumps
`fedgmh.RESULTS_VERSION`, after which no older record is reused. Two records of one run are
identical, differ at float level (not a conflict) or differ for real (a conflict: fedgmh.difference).
`put` and `merge` never rewrite a stored record's results and hold the store's lock (`locked`).
docs/store.md has the policy.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

from fedgmh import locks
from fedgmh.difference import DIFFERENT, FLOAT_LEVEL, Difference, compare
from fedgmh.errors import UserError
from fedgmh.filing import run_subfolder
from fedgmh.io import atomic_path, write_json
from fedgmh.record import RECORD_FILES, load_record, optional_files, read_bytes, read_json
from fedgmh.runspec import CONFIG_KEYS, RunSpec, run_key, with_option_defaults  # noqa: F401 - store.run_key: the key reuse compares

#: what run.json's `workflow` may hold: where the workflow files the run (`fedgmh train --config-name
#: ...`); never part of the run key
WORKFLOW_LABELS = ("config_name", "experiment", "setting", "variant")


#: the most files and folders below one merge source (a store of 2,000 records holds about 12,000)
MAX_SOURCE_ENTRIES = 50_000


class StoreConflict(UserError):
    """Two records of the same run disagree: the store needs a person to decide which one is right."""


@dataclass
class StoredRun:
    """One record of a store (validated: fedgmh.record) and its run's spec."""

    folder: Path
    record: dict[str, Any]
    spec: RunSpec

    @property
    def key(self) -> dict[str, Any]:
        return self.spec.key()

    @property
    def digest(self) -> str:
        return self.spec.digest

    def compare(self, other: "StoredRun") -> Difference:
        """How this record's results differ from those of another record of the same run
        (fedgmh.difference: identical, float-level or different)."""
        if self.spec != other.spec:
            return Difference(DIFFERENT, "; ".join(self.spec.difference(other.spec)))
        return compare((self.folder, self.record), (other.folder, other.record))

    def same_results(self, other: "StoredRun") -> bool:
        """Same key, and results equal but for float-level differences in losses (not a conflict)."""
        return self.compare(other).kind != DIFFERENT

    def missing(self, other: "StoredRun") -> list[str]:
        """The optional files that `other` has and this record lacks."""
        return sorted(set(optional_files(other.folder)) - set(optional_files(self.folder)))


def _spec_of(folder: Path, record: dict[str, Any]) -> RunSpec:
    """The spec of `folder`'s run.json `record`; UserError naming the file otherwise."""
    try:
        return RunSpec.from_record(record)
    except UserError as err:
        raise UserError(f"{folder / 'run.json'}: {err}") from None


def read_record(folder: Path | str) -> StoredRun:
    """The record in `folder`, validated (fedgmh.record.load_record); UserError naming the file otherwise."""
    folder = Path(folder)
    record, _ = load_record(folder)
    return StoredRun(folder, record, _spec_of(folder, record))


def _record_folders(stores: Iterable[Path | str]) -> Iterator[Path]:
    """The folder of every run.json below the store folders, once each, in store order and then by
    path (missing folders are empty stores)."""
    seen = set()
    for store in stores:
        store = Path(store)
        if not store.is_dir():
            continue
        for path in sorted(store.rglob("run.json")):
            folder = path.parent.resolve()
            if folder not in seen:
                seen.add(folder)
                yield path.parent


def read_spec(folder: Path | str) -> RunSpec:
    """The spec of the record in `folder` from its run.json alone (no table read or checked);
    UserError naming the file otherwise."""
    folder = Path(folder)
    return _spec_of(folder, read_json(folder / "run.json"))


def scan(stores: Iterable[Path | str]) -> tuple[list[StoredRun], list[str]]:
    """Every valid record below the store folders, in store order and then by path (missing folders
    are empty stores), and a line for each record that is invalid (fedgmh.record), never used."""
    runs, problems = [], []
    for folder in _record_folders(stores):
        try:
            runs.append(read_record(folder))
        except UserError as err:
            problems.append(str(err))
    return runs, problems


def scan_specs(stores: Iterable[Path | str]) -> tuple[list[tuple[Path, RunSpec]], list[str]]:
    """The spec of every record below the store folders from its run.json alone, as (folder, spec)
    in `scan`'s order, and a line for each run.json that gives none: `find`'s cheap first pass,
    which leaves reading and checking the tables to the records of the run it looks for."""
    keyed, problems = [], []
    for folder in _record_folders(stores):
        try:
            keyed.append((folder, read_spec(folder)))
        except UserError as err:
            problems.append(str(err))
    return keyed, problems


def review(runs: list[StoredRun]) -> tuple[list[list[StoredRun]], list[str]]:
    """Groups of records with the same run key that conflict (two of them differ for real), and a
    line for every other pair of records of one run that differ at float level."""
    by_spec: dict[RunSpec, list[StoredRun]] = {}
    for run in runs:
        by_spec.setdefault(run.spec, []).append(run)
    groups, notes = [], []
    for group in by_spec.values():
        pairs = [(a, b, a.compare(b)) for a, b in itertools.combinations(group, 2)]
        if any(difference.kind == DIFFERENT for _, _, difference in pairs):
            groups.append(group)
        else:
            notes += [f"{a.folder} ~ {b.folder}: {difference.describe()}" for a, b, difference in pairs if difference.kind == FLOAT_LEVEL]
    return groups, notes


def conflicts(runs: list[StoredRun]) -> list[list[StoredRun]]:
    """Groups of records with the same run key whose results differ for real."""
    return review(runs)[0]


def conflict_message(group: list[StoredRun]) -> str:
    folders = ", ".join(str(run.folder) for run in group)
    first = next((d for a, b in itertools.combinations(group, 2) if (d := a.compare(b)).kind == DIFFERENT), None)
    return (f"{len(group)} records of the same run ({group[0].spec.describe()}) have different results"
            f"{f' ({first.detail})' if first else ''}: {folders}; "
            "keep the one you trust and move the others out of the store (`fedgmh store check` lists every such case)")


#: how `find`'s notes on invalid records begin
INVALID_NOTE = "record not used, invalid: "


def find(stores: Iterable[Path | str], spec: RunSpec | dict[str, Any]) -> tuple[StoredRun | None, list[str]]:
    """The record of the run with this spec (or run key), and notes: the run's invalid records and the run.json
    files that give no key (never used), the rule that chose among several equal records (the first
    by store order, then by path), and records of the same run that were not used because their
    keys differ (the differing fields). Without a record of the run itself, one of a run of the same
    computation (`RunSpec.computation`: FedProx with mu = 0 is FedAvg) is found. Only the run's own records are read whole and checked (the
    others give their key from run.json; `fedgmh store check` checks every record). Raises
    StoreConflict when two records of the run differ for real."""
    spec = spec if isinstance(spec, RunSpec) else RunSpec.from_key(spec)
    keyed, problems = scan_specs(stores)
    own = [folder for folder, found in keyed if found == spec]
    computation = spec.computation()
    matches = []  # scan's order: store order, then path
    for folder in own or [folder for folder, found in keyed if found.computation() == computation]:
        try:
            matches.append(read_record(folder))
        except UserError as err:
            problems.append(str(err))
    notes = [f"{INVALID_NOTE}{line}" for line in problems]
    if conflicts(matches):
        raise StoreConflict(conflict_message(matches))
    if len(matches) > 1:
        others = "; ".join(f"{run.folder} ({matches[0].compare(run).describe()})" for run in matches[1:])
        notes.append(f"{matches[0].folder} is the first of {len(matches)} equal records by store order, then path; "
                     f"not used: {others}")
    if not matches:
        for folder, found in keyed:
            if (found.algorithm, found.dataset, found.seed) == (spec.algorithm, spec.dataset, spec.seed):
                notes.append(f"record {folder} not reused: " + "; ".join(found.difference(spec)))
    return (matches[0] if matches else None), notes


def record_files(folder: Path) -> list[str]:
    """The files of the record in `folder`: its `optional_files` and RECORD_FILES."""
    return [*optional_files(folder), *RECORD_FILES]


def copy_record(source: Path, destination: Path, names: Iterable[str] | None = None) -> None:
    """Copy a record's files (RECORD_FILES and its `optional_files`, or `names`; run.json
    last), each atomically and read without following a link (fedgmh.record.read_bytes); nothing
    else of the folder (a checkpoint)."""
    if destination.is_symlink():
        raise UserError(f"{destination} is a symbolic link; a record is written to a folder of the store only")
    destination.mkdir(parents=True, exist_ok=True)
    for name in sorted(record_files(source) if names is None else names, key=lambda n: n == "run.json"):
        content = read_bytes(source / name)
        with atomic_path(destination / name) as tmp:
            tmp.write_bytes(content)


LOCK_NAME = ".fedgmh-store.lock"


@contextlib.contextmanager
def locked(folder: Path | str) -> Iterator[None]:
    """Hold the lock of the store folder `folder`, waiting while another process holds it: the
    lock (fedgmh.locks) of its LOCK_NAME file, created for the purpose and removed on release (a
    waiter that then finds the file gone or replaced takes the new one), so no lock file stays."""
    path = Path(folder) / LOCK_NAME
    while True:
        path.parent.mkdir(parents=True, exist_ok=True)  # an OSError here is one line by cli.error_line
        fd = locks.hold(path)
        try:
            current = os.stat(path, follow_symlinks=False).st_ino
        except FileNotFoundError:
            current = None
        if current == os.fstat(fd).st_ino:
            break
        os.close(fd)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
        os.close(fd)


def _keep_equal(stored: StoredRun, new: StoredRun, difference: Difference) -> str:
    """What is done when `new` is a record of a run the store holds in `stored`, with the same
    results (`difference`: identical or float-level): the optional tables `stored` lacks are added
    from `new`, nothing else is touched. The outcome's words (+ each table added, and the
    float-level differences where there are)."""
    added = stored.missing(new)
    copy_record(new.folder, stored.folder, added)
    return "".join(f" (+ {name})" for name in added) + (f" ({difference.describe()})" if difference.kind == FLOAT_LEVEL else "")


def put(source: Path | str, destination: Path | str, beside_other_run: bool = False) -> str:
    """Copy the record in `source` to the folder `destination`, under the store's lock; returns
    'added', or 'present' when the same run's record is there with the same results (then only the
    optional tables it lacks and `source`'s workflow labels are added: ' (+ clients.csv)',
    ' (labels)'; its results are never rewritten). Refuses (StoreConflict) to replace a record of
    another run, or one of the same run with other results, and (UserError) an invalid one. With
    `beside_other_run`, a record of another run at `destination` stays and this one goes beside it
    (`seed0-<digest>`, as `merge` does): the workflow's train job (`fedgmh train --put-record`), after a config edit; the
    outcome then names the folder."""
    new = read_record(source)
    destination = Path(destination)
    with locked(destination.parent):  # the lock a merge takes to write a record there
        if beside_other_run and os.path.lexists(destination / "run.json") and read_record(destination).spec != new.spec:
            destination = destination.with_name(f"{destination.name}-{new.digest[:8]}")
            where = f" in {destination} (beside the record of another run)"
        else:
            where = ""
        if not os.path.lexists(destination / "run.json"):
            copy_record(new.folder, destination)
            return "added" + where
        old = read_record(destination)
        if old.spec != new.spec:
            raise StoreConflict(f"{destination} holds the record of another run ({'; '.join(old.spec.difference(new.spec))}); "
                                "move it elsewhere (e.g. another store folder) before writing this one")
        difference = old.compare(new)
        if difference.kind == DIFFERENT:
            raise StoreConflict(conflict_message([old, new]))
        outcome = "present" + where + _keep_equal(old, new, difference)
        labels = new.record.get("workflow")
        if labels and old.record.get("workflow") != labels:  # where the workflow files it: not part of the results
            write_json({**read_json(destination / "run.json"), "workflow": labels}, destination / "run.json")
            outcome += " (labels)"
        return outcome


def _destination(run: StoredRun, source: Path) -> Path | str:
    """Where, relative to the store, a record found below `source` goes: its path below `source`, or
    for a single record (`source` is its folder) the workflow's place by its labels; a string says
    why it has none."""
    relative = run.folder.relative_to(source)
    if relative != Path("."):
        return relative
    labels = run.record.get("workflow") or {}
    if not (labels.get("experiment") and labels.get("setting")):
        return (f"{run.folder} is a single record with no workflow labels (experiment, setting) to place it by: "
                "merge the folder of records above it, or `fedgmh store put` it to a folder of your choice")
    return Path(run_subfolder(labels["experiment"], labels["setting"], run.record["algorithm"], run.record["seed"]))


def _same_run_at(target: Path, run: StoredRun) -> StoredRun | None:
    """The valid record of `run`'s run in `target`, if there is one."""
    with contextlib.suppress(UserError):
        there = read_record(target)
        if there.spec == run.spec:
            return there
    return None


def _add(run: StoredRun, target: Path, into: Path) -> Path | StoredRun | str:
    """Copy a record that is new to the store `into` to `target`, or beside it when another run took
    that place (`seed0-<digest>`); under the lock of the folder it goes in (`put` takes the same), and
    only inside `into`. The folder written; the record of the same run found there (`put` wrote it
    since the store was read: to be compared, not passed by); or a string saying why none was."""
    if not target.resolve().is_relative_to(into.resolve()):  # a link in the store leads elsewhere
        return f"{run.folder} cannot go to {target}: it leads to {target.resolve()}, outside the store"
    with locked(target.parent) if target.parent != into else contextlib.nullcontext():  # `into`'s is held already
        if os.path.lexists(target / "run.json"):
            there = _same_run_at(target, run)
            if there is not None:
                return there
            target = target.with_name(f"{target.name}-{run.digest[:8]}")
        if os.path.lexists(target / "run.json"):
            return f"{run.folder} cannot go to {target}: taken"
        copy_record(run.folder, target)
    return target


def count_entries(folder: Path, limit: int) -> int:
    """The files and folders below `folder` (links not followed), counted only up to `limit` + 1."""
    count, pending = 0, [folder]
    while pending and count <= limit:
        with os.scandir(pending.pop()) as entries:
            for entry in entries:
                count += 1
                if entry.is_dir(follow_symlinks=False):
                    pending.append(Path(entry.path))
    return count


def require_folders(folders: Iterable[Path | str]) -> None:
    """UserError naming the first of `folders` that is not a folder: a store or source the user names
    must exist (a mistyped one is not an empty store)."""
    for folder in folders:
        if not Path(folder).is_dir():
            raise UserError(f"{folder} is not a folder of run records")


def merge(sources: Iterable[Path | str], into: Path | str) -> dict[str, list[str]]:
    """Add every record found below `sources` to the store folder `into`, keeping each record's
    path relative to its source folder (a source that is one record: its labels' place), under the
    store's lock (`locked(into)`: the store is read under it, so a second merge waits and sees what
    the first added). Records already in the store (same key, same results) are skipped, completed
    with the optional tables they lack; conflicting, invalid and unplaceable ones are reported and
    left out. A source of more than MAX_SOURCE_ENTRIES files and folders is refused before anything is
    copied. Returns lines per outcome."""
    into, sources = Path(into), [Path(source) for source in sources]
    require_folders(sources)
    for source in sources:  # before anything is copied: a bundle of junk would take hours and fill the store
        if count_entries(source, MAX_SOURCE_ENTRIES) > MAX_SOURCE_ENTRIES:
            raise UserError(f"{source} holds more than {MAX_SOURCE_ENTRIES:,} files and folders, more than a merge takes; "
                            "nothing was merged: merge its folders one at a time, or remove what is not a record")
    outcome: dict[str, list[str]] = {"added": [], "present": [], "conflict": [], "invalid": [], "refused": []}
    with locked(into):
        present, _ = scan([into])
        by_spec: dict[RunSpec, StoredRun] = {}
        for run in present:
            by_spec.setdefault(run.spec, run)
        for source in sources:
            runs, problems = scan([source])
            outcome["invalid"] += problems
            for run in runs:
                existing = by_spec.get(run.spec)
                if existing is None:
                    relative = _destination(run, source)
                    target = relative if isinstance(relative, str) else _add(run, into / relative, into)
                    if isinstance(target, StoredRun):  # `put` filed the run there since the store was read
                        existing = by_spec[run.spec] = target
                if existing is not None:
                    difference = existing.compare(run)
                    if difference.kind == DIFFERENT:
                        outcome["conflict"].append(conflict_message([existing, run]))
                    else:
                        outcome["present"].append(f"{run.folder} = {existing.folder}{_keep_equal(existing, run, difference)}")
                    continue
                if isinstance(target, str):
                    outcome["refused"].append(target)
                    continue
                by_spec[run.spec] = StoredRun(target, run.record, run.spec)
                outcome["added"].append(f"{run.folder} -> {target}")
    return outcome
