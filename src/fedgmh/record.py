"""A run record's files, read safely and checked against each other: the one validation that every
reader of a record applies (the results store, `fedgmh train`'s reuse of a stored or finished
record, the report's tables), so that an invalid record is reported and never used.

This module owns the record: what run.json holds (`new_record`, written by `write_record`) and how it
is read and checked (`load_record`); which run it is, is its `fedgmh.runspec.RunSpec`.

A record is the folder `fedgmh train --out` fills: run.json, metrics.csv and its other tables
(every other CSV of the folder, `optional_files`). Safe to read (`check_file`): each of them is a
regular file (no symbolic link, FIFO or folder) of at most MAX_FILE_BYTES, and run.json is strict
JSON (NaN and Infinity refused). Consistent (`load_record`, docs/store.md "Validation"):
- metrics.csv is numeric and has one row per round its engine options evaluate (eval_every,
  eval_last: `EngineOptions.evaluates`), in order;
- every accuracy (a column or field named *acc*) is finite and in [0, 1]; no number is infinite
  but a loss its options explain (`INFINITE_LOSS_OPTIONS`), and only train_loss may be empty (a
  round in which no sample was trained: the final evaluation);
- run.json's results (RESULT_FIELDS) are what metrics.csv gives (`results_of`, the rule `fedgmh
  train` writes them by), and clients.csv, where there is one, pools to the same best and final
  accuracies;
- what run.json says twice agrees (`check_identity`): a record relabelled in one place is refused;
- it holds at most MAX_TABLES tables.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fedgmh.cards import card, resolve_options
from fedgmh.config import EngineOptions, TrainConfig, build_options, option_names
from fedgmh.errors import UserError
from fedgmh.io import write_csv, write_json
from fedgmh.runspec import with_option_defaults

RECORD_FILES = ("metrics.csv", "run.json")  # run.json last: its presence marks a complete record
#: the largest file a record may hold; the largest committed one is 29 KB (a 200-round metrics.csv),
#: a 100-client pFedLA layer_weights.csv about 2.5 MB
MAX_FILE_BYTES = 16 * 2**20
#: run.json's results, all derived from metrics.csv (`results_of`)
RESULT_FIELDS = ("best_test_acc", "best_round", "final_test_acc", "evaluated_rounds")
#: what every record of a finished `fedgmh train` holds (the report refuses a run.json without them)
REQUIRED_FIELDS = ("algorithm", "dataset", "seed", "config", "best_test_acc", "best_round", "final_test_acc", "wall_time_s")
#: loss columns that may read +inf, and the engine option (name, value) that explains it: a masked
#: label's test sample has probability 0 (eval_prior=mask); with drop_last a client may count no
#: sample of a class it trains on, and BSM's loss is infinite (docs/baselines.md)
INFINITE_LOSS_OPTIONS = {"test_loss": ("eval_prior", "mask"), "train_loss": ("drop_last", True)}
#: the one metrics.csv column that may be empty: no sample was trained in that round
MAY_BE_EMPTY = ("train_loss",)
#: counts and durations: never below 0
NON_NEGATIVE = ("bytes_up", "bytes_down", "clients_up", "seconds", "test_samples")
#: clients.csv's pooled accuracies and the run.json fields they equal (up to float rounding)
CLIENT_POOLS = {"test_acc_best": "best_test_acc", "test_acc_last": "final_test_acc"}
POOL_TOLERANCE = 1e-9
#: the fields run.json holds twice: the top-level one and its copies (section, field), which must agree
DUPLICATED_FIELDS = {"algorithm": (("config", "algorithm"),), "dataset": (("config", "dataset"), ("partition", "dataset")),
                     "seed": (("config", "seed"),), "num_clients": (("partition", "num_clients"),)}
#: the most CSV tables a record may hold (metrics.csv included); the engine and the algorithms write at most 4
MAX_TABLES = 32
#: seeds are numpy's (`TrainConfig`)
SEED_LIMIT = 2**32


def is_accuracy(name: str) -> bool:
    """An accuracy column or field (test_acc, test_acc_mean, test_acc_std, clients.csv's test_acc_best...)."""
    return re.search(r"(^|_)acc(_|$)", name) is not None


def optional_files(folder: Path | str) -> list[str]:
    """A record's other tables: every CSV of its folder besides metrics.csv (clients.csv and the
    algorithm's `extra_records`), whatever kind of file each is (a link is refused on reading).
    Temporaries of a write in progress (dot files) are not part of it."""
    return sorted(p.name for p in Path(folder).glob("*.csv") if p.name not in RECORD_FILES and not p.name.startswith("."))


def check_file(path: Path) -> None:
    """Raise UserError unless `path` is a regular file (not a link) of at most MAX_FILE_BYTES."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise UserError(f"{path} is missing") from None
    except OSError as err:
        raise UserError(f"{path} cannot be read ({err.strerror or err})") from None
    if stat.S_ISLNK(info.st_mode):
        raise UserError(f"{path} is a symbolic link; a record holds regular files only")
    if not stat.S_ISREG(info.st_mode):
        raise UserError(f"{path} is not a regular file; a record holds regular files only")
    if info.st_size > MAX_FILE_BYTES:
        raise UserError(f"{path} is {info.st_size} bytes, more than a record file may hold ({MAX_FILE_BYTES} bytes)")


def read_bytes(path: Path) -> bytes:
    """The content of a record file, opened without following a link and checked as it is read
    (a file swapped for a link or a FIFO after `check_file` is refused, not followed or waited on)."""
    check_file(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as err:
        raise UserError(f"{path} cannot be read ({err.strerror or err})") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise UserError(f"{path} is not a regular file; a record holds regular files only")
        data = handle.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise UserError(f"{path} is more than {MAX_FILE_BYTES} bytes, more than a record file may hold")
    return data


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def read_json(path: Path) -> dict[str, Any]:
    """A record's run.json (or another JSON file of it), parsed strictly: NaN and Infinity refused."""
    try:
        data = json.loads(read_bytes(path).decode("utf-8"), parse_constant=_refuse_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise UserError(f"{path} is not valid JSON ({err})") from None
    if not isinstance(data, dict):
        raise UserError(f"{path} does not hold a JSON object")
    return data


def read_table(path: Path) -> pd.DataFrame:
    """A record's CSV table, its floats exactly as written, so that they compare with run.json's.

    pandas' own float parser is not exact in every version (some read 17-digit values one unit in
    the last place off), so the float columns are read again as text and converted by Python's
    `float`, which is exact."""
    import io

    data = read_bytes(path)
    try:
        table = pd.read_csv(io.BytesIO(data))
        floats = [column for column in table.columns if pd.api.types.is_float_dtype(table[column])]
        if floats:
            text = pd.read_csv(io.BytesIO(data), usecols=floats, dtype=str, keep_default_na=False)
            for column in floats:
                table[column] = np.array([float(value) if value else np.nan for value in text[column]])
    except (UnicodeDecodeError, ValueError) as err:  # pandas' parser and empty-data errors are ValueErrors
        raise UserError(f"{path} is not a readable CSV table ({err})") from None
    return table


def engine_options(record: dict[str, Any]) -> EngineOptions:
    """The record's engine options (an option it predates at its default; one it does not know ignored)."""
    given = record.get("engine_options") or {}
    if not isinstance(given, dict):
        raise UserError("engine_options is not a mapping")
    known = {f.name for f in dataclasses.fields(EngineOptions)}
    try:
        return EngineOptions(**{k: v for k, v in given.items() if k in known})
    except (TypeError, UserError) as err:
        raise UserError(f"engine_options are not valid ({err})") from None


def results_of(metrics: pd.DataFrame) -> dict[str, Any]:
    """run.json's results as `fedgmh train` computes them from the metrics rows: the best test
    accuracy and its round (the first round of the best, pandas' idxmax), the last row's accuracy and
    the number of rows."""
    best = metrics["test_acc"].idxmax()
    return {"best_test_acc": float(metrics.at[best, "test_acc"]), "best_round": int(metrics.at[best, "round"]),
            "final_test_acc": float(metrics["test_acc"].iloc[-1]), "evaluated_rounds": len(metrics)}


def _describe_rounds(rounds: list[int]) -> str:
    return f"{len(rounds)} row(s): rounds " + (", ".join(map(str, rounds)) if len(rounds) <= 6 else
                                               f"{', '.join(map(str, rounds[:3]))}, ..., {', '.join(map(str, rounds[-2:]))}")


def check_table(path: Path, frame: pd.DataFrame, options: EngineOptions | None = None) -> None:
    """Accuracies finite and in [0, 1]; no number infinite unless a loss that `options` explain
    (INFINITE_LOSS_OPTIONS; None: none may be); in metrics.csv every column numeric and none empty
    but MAY_BE_EMPTY."""
    metrics = path.name == "metrics.csv"
    for column in frame.columns:
        dtype = frame[column].dtype
        if dtype.kind not in "iuf":
            if metrics:
                raise UserError(f"{path}: column {column} is not numeric")
            continue
        values = frame[column].to_numpy(dtype=float)
        empty = np.isnan(values)
        if empty.any() and (metrics and column not in MAY_BE_EMPTY or is_accuracy(column)):
            raise UserError(f"{path}: column {column} has an empty or NaN value in row {int(empty.argmax())}")
        infinite = np.isinf(values)
        explained = column in INFINITE_LOSS_OPTIONS and options is not None \
            and getattr(options, INFINITE_LOSS_OPTIONS[column][0]) == INFINITE_LOSS_OPTIONS[column][1]
        if infinite.any() and not (explained and (values[infinite] > 0).all()):
            row = int(infinite.argmax())
            raise UserError(f"{path}: column {column} holds {values[row]} (row {row}); a record's numbers are finite")
        if column in NON_NEGATIVE and (values < 0).any():
            row = int((values < 0).argmax())
            raise UserError(f"{path}: column {column} is {values[row]} in row {row}; it counts, so it is never below 0")
        outside = ~empty & ((values < 0) | (values > 1))
        if is_accuracy(column) and outside.any():
            row = int(outside.argmax())
            raise UserError(f"{path}: accuracy {column} is {values[row]} in row {row}, outside [0, 1]")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_numbers(folder: Path, record: dict[str, Any], metrics: pd.DataFrame) -> None:
    """The record's metrics rows against its options, and run.json's results against its metrics."""
    run_json, metrics_csv = folder / "run.json", folder / "metrics.csv"
    try:
        options, rounds = engine_options(record), record["config"]["rounds"]
    except (KeyError, TypeError) as err:
        raise UserError(f"{run_json}: not a run record of fedgmh train (missing {err})") from None
    except UserError as err:
        raise UserError(f"{run_json}: {err}") from None
    if not isinstance(rounds, int) or isinstance(rounds, bool) or rounds < 0:
        raise UserError(f"{run_json}: config.rounds {rounds!r} is not a number of rounds")
    for column in ("round", "test_acc"):
        if column not in metrics.columns:
            raise UserError(f"{metrics_csv} lacks the column {column}")
    if metrics.empty:
        raise UserError(f"{metrics_csv} has no rows")
    check_table(metrics_csv, metrics, options)
    expected = [rnd for rnd in range(rounds + 1) if options.evaluates(rnd, rounds)]
    found = metrics["round"].tolist()
    if found != expected:
        row = next((i for i, (a, b) in enumerate(zip(found, expected)) if a != b), min(len(found), len(expected)))
        where = f"row {row} is round {found[row] if row < len(found) else '(none)'}, not {expected[row] if row < len(expected) else '(none)'}"
        raise UserError(f"{metrics_csv} has {_describe_rounds(found)}; its run of {rounds} rounds "
                        f"(eval_every {options.eval_every}, eval_last {options.eval_last}) evaluates {_describe_rounds(expected)}: {where}")
    derived = results_of(metrics)
    for field in RESULT_FIELDS:
        if field not in record:
            if field == "evaluated_rounds":  # the rows are checked above; a record may predate the field
                continue
            raise UserError(f"{run_json} lacks {field}")
        value = record[field]
        if not _number(value) or not math.isfinite(value):
            raise UserError(f"{run_json}: {field} is {value!r}, not a finite number")
        if is_accuracy(field) and not 0 <= value <= 1:
            raise UserError(f"{run_json}: {field} is {value}, outside [0, 1]")
        if field == "best_round" and not 0 <= value <= rounds:
            raise UserError(f"{run_json}: best_round {value} is not a round of its {rounds} rounds")
        if value != derived[field]:
            raise UserError(f"{run_json}: {field} is {value!r} but metrics.csv gives {derived[field]!r}")
    wall = record.get("wall_time_s", 0)
    if not (_number(wall) and math.isfinite(wall) and wall >= 0):
        raise UserError(f"{run_json}: wall_time_s is {wall!r}, not a number of seconds")
    for field in SAMPLE_PASS_FIELDS:
        if field in record:
            check_sample_passes(run_json, record[field], field, record["config"].get("batch_size"))


#: run.json's counts of sample passes: training's and evaluation's (a record may predate either)
SAMPLE_PASS_FIELDS = ("sample_passes", "evaluation_sample_passes")


def check_sample_passes(run_json: Path, passes: Any, field: str = "sample_passes", batch_size: Any = None) -> None:
    """run.json's `field` (one of `SAMPLE_PASS_FIELDS`): whole numbers of sample passes,
    0 <= useful <= executed, executed > 0, useful_share their quotient, and for training
    executed <= batch_size x useful (an executed batch holds at least one real sample)."""
    if not isinstance(passes, dict) or set(passes) != {"useful", "executed", "useful_share"}:
        raise UserError(f"{run_json}: {field} is {passes!r}, not {{useful, executed, useful_share}}")
    useful, executed, share = passes["useful"], passes["executed"], passes["useful_share"]
    if not (_whole(useful) and _whole(executed) and 0 <= useful <= executed and executed > 0):
        raise UserError(f"{run_json}: {field} useful {useful!r} and executed {executed!r} "
                        "are not counts with useful <= executed")
    if field == "sample_passes" and _whole(batch_size) and executed > batch_size * useful:
        raise UserError(f"{run_json}: sample_passes executed {executed} exceeds batch size {batch_size} x useful {useful}: "
                        "impossible counts (useful <= executed <= batch size x useful)")
    if share != useful / executed:
        raise UserError(f"{run_json}: {field}.useful_share is {share!r} but useful / executed is {useful / executed!r}")


def _copies(record: dict[str, Any], field: str) -> list[tuple[str, Any]]:
    """The field's copies that run.json holds, as ('section.field', value), the top-level one first."""
    found = [(field, record[field])] if field in record else []
    for section, name in DUPLICATED_FIELDS[field]:
        part = record.get(section)
        if isinstance(part, dict) and name in part:
            found.append((f"{section}.{name}", part[name]))
    return found


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _option_differences(record: dict[str, Any]) -> list[str]:
    """The `--set` options of config.overrides that resolve (`fedgmh.cards`) to other values than the
    record's algorithm_options or engine_options say; none when they cannot be resolved with this code
    (an option since renamed: a RunSpec compares the resolved ones)."""
    config = record.get("config")
    overrides = config.get("overrides") if isinstance(config, dict) else None
    if not isinstance(overrides, dict) or not overrides:
        return []
    try:
        algorithm_options, engine = resolve_options(str(config.get("algorithm")), overrides)
        filled = with_option_defaults(record)
    except (UserError, KeyError, TypeError, AttributeError):
        return []
    resolved = {**dataclasses.asdict(engine), **dataclasses.asdict(algorithm_options)}
    recorded = {**filled["engine_options"], **filled["algorithm_options"]}
    return [f"config.overrides.{key} {overrides[key]!r} but {key} {recorded[key]!r}" for key in overrides
            if key in resolved and key in recorded and resolved[key] != recorded[key]]


def check_identity(run_json: Path, record: dict[str, Any]) -> None:
    """What run.json says twice says the same (DUPLICATED_FIELDS, and each `--set` option as the
    resolved option), and its seed is a seed: a record relabelled in one place (a FedAvg run called
    fedgmh at the top, seed 7 over config.seed 0) would be filed and reported under the new label."""
    for field in DUPLICATED_FIELDS:
        copies = _copies(record, field)
        if any(value != copies[0][1] for _, value in copies):
            raise UserError(f"{run_json}: {' but '.join(f'{where} {value!r}' for where, value in copies)}; "
                            "the copies of a field disagree: the record was edited")
    for where, seed in _copies(record, "seed"):
        if not (_whole(seed) and 0 <= seed < SEED_LIMIT):
            raise UserError(f"{run_json}: {where} {seed!r} is not a seed (a whole number in 0..{SEED_LIMIT - 1})")
    differences = _option_differences(record)
    if differences:
        raise UserError(f"{run_json}: {differences[0]}: the record was edited")


#: stand-ins for the TrainConfig fields without a default that a record's config lacks
SETTINGS_NOT_CHECKED = {"dataset": "", "root": "", "partition": "", "algorithm": "", "rounds": 1}


def check_settings(run_json: Path, record: dict[str, Any]) -> None:
    """The run's settings pass the checks a run's start makes: `config` is a TrainConfig (its types
    and ranges), the recorded options build their algorithm's options and the engine's (types,
    choices, ranges: `config.build_options`). Keys of options since removed are left out."""
    config = record["config"]
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    try:  # the values it holds are checked; one it lacks is not a value out of range
        TrainConfig(**{**SETTINGS_NOT_CHECKED, **{key: value for key, value in config.items() if key in fields}})
    except UserError as err:
        raise UserError(f"{run_json}: config: {err}") from None
    try:
        algorithm_options = card(str(config.get("algorithm", record.get("algorithm")))).options
    except UserError as err:
        raise UserError(f"{run_json}: {err}") from None
    for section, options in (("algorithm_options", algorithm_options), ("engine_options", EngineOptions)):
        given = record.get(section) or {}
        if not isinstance(given, dict):
            raise UserError(f"{run_json}: {section} is not a mapping")
        try:
            build_options(options, {key: value for key, value in given.items() if key in option_names(options)})
        except UserError as err:
            raise UserError(f"{run_json}: {section}: {err}") from None


def check_clients(path: Path, clients: pd.DataFrame, record: dict[str, Any]) -> None:
    """clients.csv's accuracies, pooled over the clients' test samples, are run.json's best and final."""
    if "test_samples" not in clients.columns or clients["test_samples"].sum() <= 0:
        raise UserError(f"{path} lacks the clients' test_samples")
    weights = clients["test_samples"] / clients["test_samples"].sum()
    for column, field in CLIENT_POOLS.items():
        if column in clients.columns:
            pooled = float((clients[column] * weights).sum())
            if abs(pooled - record[field]) > POOL_TOLERANCE:
                raise UserError(f"{path}: {column} pools to {pooled!r} but run.json's {field} is {record[field]!r}")


def load_record(folder: Path | str) -> tuple[dict[str, Any], pd.DataFrame]:
    """A record's run.json and metrics.csv, after every check of this module (UserError naming the
    file and the reason otherwise); its other tables are checked too."""
    folder = Path(folder)
    names = optional_files(folder)
    if len(names) + 1 > MAX_TABLES:
        raise UserError(f"{folder} holds {len(names) + 1} tables (CSV files); a record holds at most {MAX_TABLES}")
    record = read_json(folder / "run.json")
    metrics = read_table(folder / "metrics.csv")
    check_numbers(folder, record, metrics)
    check_identity(folder / "run.json", record)
    check_settings(folder / "run.json", record)
    options = engine_options(record)
    for name in names:
        table = read_table(folder / name)
        check_table(folder / name, table, options)
        if name == "clients.csv":
            check_clients(folder / name, table, record)
    return record, metrics


# --- writing -------------------------------------------------------------------------------------


def new_record(config: dict[str, Any], identity: dict[str, Any], metrics: pd.DataFrame, num_clients: int,
               facts: dict[str, Any], workflow: dict[str, str] | None = None) -> dict[str, Any]:
    """run.json of a finished run: what it ran (its whole `config`; from its `identity` the resolved
    options and the partition),
    its results (`results_of` its metrics), `facts` about how it ran (wall time, device, versions...,
    never part of its RunSpec) and the `workflow` labels, when it has any."""
    return {
        "algorithm": config["algorithm"],
        "dataset": config["dataset"],
        "seed": config["seed"],
        "config": config,
        **{k: identity[k] for k in ("algorithm_options", "engine_options", "partition")},
        "num_clients": num_clients,
        **results_of(metrics),
        **facts,
        "results_version": identity["results_version"],
        **({"workflow": workflow} if workflow else {}),
    }


def write_record(folder: Path, record: dict[str, Any], metrics: pd.DataFrame, tables: dict[str, pd.DataFrame]) -> None:
    """Write a record atomically: metrics.csv, the other tables (by file name), run.json last (its
    presence marks a finished run)."""
    write_csv(metrics, folder / "metrics.csv")
    for name, table in tables.items():
        write_csv(table, folder / name)
    write_json(record, folder / "run.json")


def check_fields(record: dict[str, Any]) -> list[str]:
    """The `REQUIRED_FIELDS` that a run.json lacks."""
    return [k for k in REQUIRED_FIELDS if k not in record]
