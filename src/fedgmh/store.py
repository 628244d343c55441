"""The results store: finished runs are kept, found by what they ran, and reused instead of retrained.

A *record* is a run folder holding `run.json` and `metrics.csv` (what `fedgmh train` writes), and
its other tables when the code that made it wrote them (every other CSV of the folder:
`clients.csv`, per-client accuracy, and an algorithm's own, e.g. pFedLA's `layer_weights.csv`):
records without them stay valid, and one is added to a stored record of the same run that lacks it
(merge, put). A
*store* is any folder of records, at any depth (by default the workflow searches `paper_artifacts/`,
where every config's records are committed). A record's *run key* is everything that decides its
numbers: the results version of the code, dataset and its fingerprint, the partition (parameters
and the digest of its index arrays), algorithm and resolved options, rounds, join ratio, local
epochs, batch size, learning rate (with its decay, an engine option) and seed. Left out, because
they change how a run is computed but not what it computes: device, threads, host, file paths and
the execution-only engine options of `EXECUTION_OPTIONS`.

A record is reused only when its run key equals the run's exactly. Options added to the code after
a record was written are compared at their default (adding an option whose default reproduces the
old behaviour needs no new results version); any change to the numbers a run produces bumps
`fedgmh.RESULTS_VERSION`, after which no older record is reused. docs/store.md has the policy.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from fedgmh.algorithms.options import option_set
from fedgmh.config import EngineOptions
from fedgmh.errors import UserError
from fedgmh.io import atomic_path, write_json

RECORD_FILES = ("metrics.csv", "run.json")  # run.json last: its presence marks a complete record

#: engine options that choose how a run is computed, not what: never part of the key
EXECUTION_OPTIONS = frozenset({"eval_batch_size", "eval_cache", "eval_batched", "vectorise", "memory_format", "conv"})
CONFIG_KEYS = ("dataset", "algorithm", "rounds", "join_ratio", "local_epochs", "batch_size", "lr", "seed")
PARTITION_KEYS = ("scheme", "dataset", "dataset_fingerprint", "num_samples", "num_classes", "num_clients",
                  "classes_per_client", "alpha", "train_ratio", "seed", "digest")
#: metrics.csv columns that measure time, not results: ignored when two records are compared
TIMING_COLUMNS = ("seconds",)
#: metrics.csv columns added after records were written: compared only when both records have them
#: (an older record without one is the same run as a newer one with it)
ADDED_COLUMNS = ("clients_up",)
#: what run.json's `workflow` may hold: where the workflow files the run (`fedgmh train --config-name
#: ...`); never part of the run key
WORKFLOW_LABELS = ("config_name", "experiment", "setting", "variant")


def optional_files(folder: Path) -> list[str]:
    """A record's other tables: every CSV of its folder besides metrics.csv (clients.csv and the
    algorithm's `extra_records`), compared like metrics.csv where both records have one, never
    required. Temporaries of a write in progress (dot files) are not part of it."""
    return sorted(p.name for p in Path(folder).glob("*.csv")
                  if p.name not in RECORD_FILES and not p.name.startswith(".") and p.is_file())


class StoreConflict(UserError):
    """Two records of the same run disagree: the store needs a person to decide which one is right."""


def _option_defaults(options_class: type) -> dict[str, Any]:
    return {f.name: f.default for f in dataclasses.fields(options_class) if f.default is not dataclasses.MISSING}


def with_option_defaults(record: dict[str, Any]) -> dict[str, Any]:
    """The record (or run identity) with every option it predates added at its default: a record
    written before an option existed ran as the option's default runs. (The dataclass default:
    an option a preset or variant sets otherwise counts as a difference, the safe side.)"""
    algorithm_options = {**_option_defaults(option_set(record["config"]["algorithm"]).Options), **record["algorithm_options"]}
    return {**record, "algorithm_options": algorithm_options,
            "engine_options": {**_option_defaults(EngineOptions), **record["engine_options"]}}


def run_key(record: dict[str, Any]) -> dict[str, Any]:
    """The results-deciding part of a run record (or of the identity of a run about to start)."""
    try:
        config = record["config"]
        filled = with_option_defaults(record)
        algorithm_options, engine_options = filled["algorithm_options"], filled["engine_options"]
        partition = record["partition"]
        return {
            "results_version": record.get("results_version"),
            **{k: config[k] for k in CONFIG_KEYS},
            "algorithm_options": dict(sorted(algorithm_options.items())),
            "engine_options": {k: v for k, v in sorted(engine_options.items()) if k not in EXECUTION_OPTIONS},
            "partition": {k: partition.get(k) for k in PARTITION_KEYS}
            # a chain partition says so (its digest differs anyway); ExDir's random draw has no such key, as before
            | ({"assignment": partition["assignment"]} if partition.get("assignment", "random") != "random" else {}),
        }
    except (KeyError, TypeError, AttributeError) as err:
        raise UserError(f"not a run record of fedgmh train (missing {err})") from None


def key_digest(key: dict[str, Any]) -> str:
    """A short, stable name for a run key (sha256 of its canonical JSON)."""
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def describe_key(key: dict[str, Any]) -> str:
    return f"{key['algorithm']} on {key['dataset']} ExDir({key['partition']['classes_per_client']}, {key['partition']['alpha']}), " \
           f"{key['rounds']} rounds, seed {key['seed']}"


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: value}


def key_differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """'field: a vs b' for every field where two run keys differ."""
    fa, fb = _flat(a), _flat(b)
    return [f"{k}: {fa.get(k)!r} vs {fb.get(k)!r}" for k in sorted(set(fa) | set(fb)) if fa.get(k) != fb.get(k)]


@dataclass
class StoredRun:
    """One record of a store."""

    folder: Path
    record: dict[str, Any]
    key: dict[str, Any]

    @property
    def digest(self) -> str:
        return key_digest(self.key)

    def metrics(self) -> pd.DataFrame:
        frame = pd.read_csv(self.folder / "metrics.csv")
        return frame.drop(columns=[c for c in TIMING_COLUMNS if c in frame.columns])

    def optional(self, name: str) -> pd.DataFrame | None:
        """One of its `optional_files`, or None when this record has none."""
        path = self.folder / name
        return pd.read_csv(path) if path.is_file() else None

    def same_results(self, other: "StoredRun") -> bool:
        """Same key, the same metrics in every round (timing columns aside) and the same optional
        files where both records have them."""
        if self.key != other.key:
            return False
        mine, theirs = self.metrics(), other.metrics()
        one_sided = [c for c in ADDED_COLUMNS if (c in mine.columns) != (c in theirs.columns)]
        if not _same_frame(mine.drop(columns=one_sided, errors="ignore"), theirs.drop(columns=one_sided, errors="ignore")):
            return False
        for name in sorted(set(optional_files(self.folder)) & set(optional_files(other.folder))):
            mine, theirs = self.optional(name), other.optional(name)
            if mine is not None and theirs is not None and not _same_frame(mine, theirs):
                return False
        return True

    def missing(self, other: "StoredRun") -> list[str]:
        """The optional files that `other` has and this record lacks."""
        return sorted(set(optional_files(other.folder)) - set(optional_files(self.folder)))


def _same_frame(mine: pd.DataFrame, theirs: pd.DataFrame) -> bool:
    return mine.shape == theirs.shape and list(mine.columns) == list(theirs.columns) and mine.equals(theirs)


def read_record(folder: Path | str) -> StoredRun:
    folder = Path(folder)
    for name in RECORD_FILES:
        if not (folder / name).is_file():
            raise UserError(f"{folder} is not a run record: {name} is missing")
    try:
        record = json.loads((folder / "run.json").read_text())
    except (OSError, ValueError, RecursionError) as err:  # RecursionError: JSON nested too deeply
        raise UserError(f"{folder / 'run.json'} is unreadable ({err})") from None
    try:
        return StoredRun(folder, record, run_key(record))
    except UserError as err:
        raise UserError(f"{folder / 'run.json'}: {err}") from None


def scan(stores: Iterable[Path | str]) -> tuple[list[StoredRun], list[str]]:
    """Every record below the store folders (missing folders are empty stores), and a line for
    each run.json that could not be read as a record."""
    runs, problems, seen = [], [], set()
    for store in stores:
        store = Path(store)
        if not store.is_dir():
            continue
        for path in sorted(store.rglob("run.json")):
            folder = path.parent.resolve()
            if folder in seen:
                continue
            seen.add(folder)
            try:
                runs.append(read_record(path.parent))
            except UserError as err:
                problems.append(str(err))
    return runs, problems


def conflicts(runs: list[StoredRun]) -> list[list[StoredRun]]:
    """Groups of records with the same run key whose results differ."""
    by_key: dict[str, list[StoredRun]] = {}
    for run in runs:
        by_key.setdefault(run.digest, []).append(run)
    return [group for group in by_key.values() if any(not group[0].same_results(other) for other in group[1:])]


def conflict_message(group: list[StoredRun]) -> str:
    folders = ", ".join(str(run.folder) for run in group)
    return (f"{len(group)} records of the same run ({describe_key(group[0].key)}) have different results: {folders}; "
            "keep the one you trust and move the others out of the store (`fedgmh store check` lists every such case)")


def find(stores: Iterable[Path | str], key: dict[str, Any]) -> tuple[StoredRun | None, list[str]]:
    """The record of the run with this key, and notes on records of the same run that were not
    used because their keys differ (the differing fields). Raises StoreConflict when two records of
    the run disagree."""
    runs, _ = scan(stores)
    matches = [run for run in runs if run.key == key]
    matches.sort(key=lambda run: -len(optional_files(run.folder)))  # the most complete first
    if any(not matches[0].same_results(other) for other in matches[1:]):
        raise StoreConflict(conflict_message(matches))
    notes = []
    if not matches:
        for run in runs:
            if all(run.key[k] == key[k] for k in ("algorithm", "dataset", "seed")):
                notes.append(f"record {run.folder} not reused: " + "; ".join(key_differences(run.key, key)))
    return (matches[0] if matches else None), notes


def copy_record(source: Path, destination: Path, names: Iterable[str] | None = None) -> None:
    """Copy a record's files (RECORD_FILES and its `optional_files`, or `names`; run.json
    last), each atomically; nothing else of the folder (a checkpoint, a legacy run_info.json)."""
    destination.mkdir(parents=True, exist_ok=True)
    if names is None:
        names = [*optional_files(source), *RECORD_FILES]
    for name in sorted(names, key=lambda n: n == "run.json"):
        with atomic_path(destination / name) as tmp:
            shutil.copyfile(source / name, tmp)


def put(source: Path | str, destination: Path | str) -> str:
    """Copy the record in `source` to the folder `destination`; returns 'added' or 'updated' (the
    same run's record was there). Refuses (StoreConflict) to replace a record of another run, or
    one of the same run with other results."""
    new = read_record(source)
    destination = Path(destination)
    if (destination / "run.json").exists():
        old = read_record(destination)
        if old.key != new.key:
            raise StoreConflict(f"{destination} holds the record of another run ({'; '.join(key_differences(old.key, new.key))}); "
                                "move it elsewhere (e.g. another store folder) before writing this one")
        if not old.same_results(new):
            raise StoreConflict(conflict_message([old, new]))
        copy_record(new.folder, destination)
        return "updated"
    copy_record(new.folder, destination)
    return "added"


def merge(sources: Iterable[Path | str], into: Path | str) -> dict[str, list[str]]:
    """Add every record found below `sources` to the store folder `into`, keeping each record's
    path relative to its source folder. Records already in the store (same key, same results) are
    skipped; conflicting ones are reported and left out. Returns lines per outcome."""
    into = Path(into)
    present, _ = scan([into])
    by_digest = {run.digest: run for run in present}
    outcome: dict[str, list[str]] = {"added": [], "present": [], "conflict": [], "unreadable": []}
    for source in sources:
        source = Path(source)
        if not source.is_dir():
            raise UserError(f"{source} is not a folder of run records")
        runs, problems = scan([source])
        outcome["unreadable"] += problems
        for run in runs:
            existing = by_digest.get(run.digest)
            if existing is not None:
                if existing.same_results(run):
                    added = existing.missing(run)  # e.g. clients.csv for a record made before it existed
                    copy_record(run.folder, existing.folder, added)
                    outcome["present"].append(f"{run.folder} = {existing.folder}" + "".join(f" (+ {name})" for name in added))
                else:
                    outcome["conflict"].append(conflict_message([existing, run]))
                continue
            target = into / run.folder.relative_to(source)
            if (target / "run.json").exists():
                target = target.with_name(f"{target.name}-{run.digest[:8]}")  # that place holds another run
            copy_record(run.folder, target)
            by_digest[run.digest] = StoredRun(target, run.record, run.key)
            outcome["added"].append(f"{run.folder} -> {target}")
    return outcome


#: what the workflow wrote beside run.json before run.json held the workflow's labels (`workflow`)
LEGACY_INFO = "run_info.json"
#: its keys besides the WORKFLOW_LABELS: run.json holds them already, here
LEGACY_DUPLICATES = {"dataset": ("partition", "dataset"), "classes_per_client": ("partition", "classes_per_client"),
                     "alpha": ("partition", "alpha"), "clients": ("partition", "num_clients"),
                     "train_ratio": ("partition", "train_ratio"), "partition_seed": ("partition", "seed"),
                     "partition": ("config", "partition")}


def fold_legacy_info(folder: Path | str) -> bool:
    """Fold a record's run_info.json into its run.json (config name, experiment, setting and variant,
    when it has one, under `workflow`, as `fedgmh train` records the workflow's labels) and delete
    it; False when the record has none. Refuses (UserError, nothing changed) a run_info.json that
    contradicts run.json or holds keys it does not know; the run key stays what it was."""
    folder = Path(folder)
    info_path = folder / LEGACY_INFO
    if not info_path.is_file():
        return False
    run = read_record(folder)
    try:
        info = json.loads(info_path.read_text())
    except (OSError, ValueError) as err:
        raise UserError(f"{info_path} is unreadable ({err})") from None
    unknown = sorted(set(info) - set(WORKFLOW_LABELS) - set(LEGACY_DUPLICATES))
    if unknown:
        raise UserError(f"{info_path}: unknown key(s) {', '.join(unknown)}; nothing changed")
    for key, (section, name) in LEGACY_DUPLICATES.items():
        if key in info and info[key] != (run.record.get(section) or {}).get(name):
            raise UserError(f"{info_path}: {key} = {info[key]!r} but run.json's {section}.{name} is "
                            f"{(run.record.get(section) or {}).get(name)!r}; nothing changed")
    labels = {key: info[key] for key in WORKFLOW_LABELS if info.get(key) not in (None, "")}  # no variant: no label, as the workflow's
    if run.record.get("workflow", labels) != labels:
        raise UserError(f"{folder}: run.json's workflow {run.record['workflow']!r} differs from {LEGACY_INFO}'s {labels!r}; nothing changed")
    record = {**run.record, "workflow": labels}
    if run_key(record) != run.key:  # cannot happen (labels are no part of the key): the record stays reusable
        raise UserError(f"{folder}: folding {LEGACY_INFO} would change the run key; nothing changed")
    write_json(record, folder / "run.json")
    info_path.unlink()
    return True


def upgrade(stores: Iterable[Path | str]) -> list[Path]:
    """`fold_legacy_info` for every record below the store folders; the folders it changed."""
    changed = []
    for store in stores:
        store = Path(store)
        if not store.is_dir():
            raise UserError(f"{store} is not a folder of run records")
        for path in sorted(store.rglob(LEGACY_INFO)):
            if fold_legacy_info(path.parent):
                changed.append(path.parent)
    return changed
