"""Run directories -> tidy results, paper-style LaTeX tables and accuracy-per-round figures.

A run directory is what `fedgmh train --out RUNDIR` writes: `metrics.csv` (one row per evaluated
round) and `run.json` (the run record with its `config`). The workflow adds `run_info.json` with
the partition parameters (dataset, classes_per_client, alpha, clients, ...); without it the
partition file named in the run's config is read for them.

Three steps, each a library function with a CLI wrapper in `fedgmh.cli_report`:

- `aggregate_runs`: one tidy row per run (`results.csv`) and the per-round curves in long format
  (`curves.csv`).
- `make_table`: rows = algorithms in the paper's order, columns = dataset settings, cells =
  "mean ± std" of the best test accuracy in percent over seeds. The std is the population std
  (ddof=0, i.e. `numpy.std`), as PFLlib's `average_data` reports it. The best mean of a column
  (at the printed precision; ties all count) is bold.
- `plot_curves`: test accuracy per round, mean over seeds with a ±1 std band, one line per
  algorithm, one panel per setting.

Settings are identified by `setting_id`: `<dataset>_c<C>_a<alpha>`, plus one suffix per
dimension that an experiment sweeps for a fixed algorithm and dataset (e.g. `_e4` for local
epochs 4 in Table 3, `_j0.4` for join ratio 0.4 in Table 4, `_beta0.1` in Table 6). The workflow
names its run directories with the same function, so ids in results.csv match the folder names.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fedgmh.errors import UserError
from fedgmh.io import atomic_path, write_csv, write_text

# The paper's row order (Table 2, then the ablations of Table 5 before FedGMH).
ALGORITHM_NAMES: dict[str, str] = {
    "fedavg": "FedAvg",
    "fedprox": "FedProx",
    "ditto": "Ditto",
    "fedamp": "FedAMP",
    "fedcp": "FedCP",
    "fedfomo": "FedFomo",
    "fedgh": "FedGH",
    "fedper": "FedPer",
    "fedrep": "FedRep",
    "fedrod": "FedRoD",
    "lgfedavg": "LG-FedAvg",
    "gmh_o": "GMH-o",
    "gmh_a": "GMH-a",
    "gmh_oa": "GMH-oa",
    "fedgmh": "FedGMH",
}
ALGORITHM_ORDER = list(ALGORITHM_NAMES)

DATASET_NAMES: dict[str, str] = {
    "mnist": "MNIST",
    "fashion_mnist": "Fashion-MNIST",
    "cifar10": "CIFAR-10",
    "cifar100": "CIFAR-100",
    "digits": "Digits",
}
DATASET_ORDER = list(DATASET_NAMES)

STD_DDOF = 0  # population std over seeds, like numpy.std / PFLlib's average_data

RUN_JSON_KEYS = ("algorithm", "dataset", "seed", "config", "best_test_acc", "best_round", "final_test_acc", "wall_time_s")
METRICS_COLUMNS = ("round", "test_acc")
PARTITION_FIELDS = ("classes_per_client", "alpha")
# algorithm options that get a results.csv column even when a run did not set them (--set), taken
# from run.json's resolved `algorithm_options`
REPORTED_OPTIONS = ("beta", "eta_h", "preset")

# Dimensions (besides dataset, C, alpha) that an experiment may sweep: results.csv column ->
# (suffix in setting ids, label in CSV tables, label in LaTeX tables).
SWEEP_DIMS: dict[str, tuple[str, str, str]] = {
    "local_epochs": ("e", "E", "$E$"),
    "join_ratio": ("j", "ρ", r"$\rho$"),
    "rounds": ("r", "R", "$R$"),
}
OPTION_LABELS: dict[str, tuple[str, str]] = {
    "beta": ("β", r"$\beta$"),
    "eta_h": ("η_h", r"$\eta_h$"),
    "mu": ("μ", r"$\mu$"),
}

BASE_COLUMNS = [
    "experiment", "setting", "dataset", "classes_per_client", "alpha", "clients", "algorithm", "seed",
    "rounds", "local_epochs", "join_ratio", "batch_size", "lr", "options",
]
RESULT_COLUMNS = ["best_test_acc", "best_round", "final_test_acc", "rounds_evaluated", "wall_time_s", "run_dir"]


# --------------------------------------------------------------------------------------------
# small helpers


def format_number(value: Any) -> str:
    """Shortest faithful text for a number: 0.5 -> '0.5', 5 -> '5', 5.0 -> '5', 1e-3 -> '0.001'."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        if float(value).is_integer():
            return str(int(value))
        return f"{float(value):.10g}"
    return str(value)


def algorithm_name(algorithm: str) -> str:
    return ALGORITHM_NAMES.get(algorithm, algorithm)


def dataset_name(dataset: str) -> str:
    return DATASET_NAMES.get(dataset, dataset)


def _order_key(order: Sequence[str]):
    position = {name: i for i, name in enumerate(order)}
    return lambda name: (position.get(name, len(position)), str(name))


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    return value


def parse_options(raw: Any) -> dict[str, Any]:
    """The `overrides` of a run's config: a dict, or a list of 'key=value' strings."""
    if raw is None:
        return {}
    if isinstance(raw, dict):  # `fedgmh train` keeps the --set values as strings: '0.5' -> 0.5
        return {str(k): _parse_scalar(v) if isinstance(v, str) else _jsonable(v) for k, v in raw.items()}
    if isinstance(raw, (list, tuple)):
        out: dict[str, Any] = {}
        for item in raw:
            key, sep, value = str(item).partition("=")
            if not sep:
                raise UserError(f"option {item!r} is not of the form key=value")
            out[key.strip()] = _parse_scalar(value.strip())
        return out
    raise UserError(f"options must be a mapping or a list of key=value strings, got {raw!r}")


def _parse_scalar(text: str) -> Any:
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


# --------------------------------------------------------------------------------------------
# setting ids (shared with the workflow)


def sweep_dimensions(records: Iterable[dict[str, Any]]) -> list[str]:
    """Fields that vary for a fixed (algorithm, dataset, C, alpha) among `records`.

    `records` are dicts with dataset, classes_per_client, alpha, algorithm, local_epochs,
    join_ratio, rounds and options (a dict). Option dimensions are returned as 'opt:<key>'.
    Order: local_epochs, join_ratio, rounds, then option keys alphabetically.
    """
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for rec in records:
        key = (rec["algorithm"], rec["dataset"], int(rec["classes_per_client"]), float(rec["alpha"]))
        groups.setdefault(key, []).append(rec)
    dims: list[str] = []
    for field in SWEEP_DIMS:
        if any(len({_freeze(r.get(field)) for r in group}) > 1 for group in groups.values()):
            dims.append(field)
    option_keys = sorted({k for group in groups.values() for r in group for k in (r.get("options") or {})})
    for key in option_keys:
        if any(len({_freeze((r.get("options") or {}).get(key)) for r in group}) > 1 for group in groups.values()):
            dims.append(f"opt:{key}")
    return dims


def _freeze(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _dim_value(record: dict[str, Any], dim: str) -> Any:
    if dim.startswith("opt:"):
        return (record.get("options") or {}).get(dim[4:])
    return record.get(dim)


def setting_id(record: dict[str, Any], dims: Sequence[str] = ()) -> str:
    """`<dataset>_c<C>_a<alpha>` plus `_<suffix><value>` for every swept dimension in `dims`."""
    text = f"{record['dataset']}_c{int(record['classes_per_client'])}_a{format_number(record['alpha'])}"
    for dim in dims:
        value = _dim_value(record, dim)
        suffix = dim[4:] if dim.startswith("opt:") else SWEEP_DIMS[dim][0]
        text += f"_{suffix}{format_number(value) if value is not None else 'default'}"
    return text


def assign_setting_ids(records: Sequence[dict[str, Any]]) -> list[str]:
    """Setting id of every record, sweeping the dimensions that vary inside this set of records."""
    dims = sweep_dimensions(records)
    return [setting_id(rec, dims) for rec in records]


# --------------------------------------------------------------------------------------------
# aggregation


def _read_json(path: Path, run_dir: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise UserError(f"run {run_dir}: {path.name} is not valid JSON ({err}); re-run the training") from err
    if not isinstance(data, dict):
        raise UserError(f"run {run_dir}: {path.name} does not hold a JSON object")
    return data


def _partition_meta(config: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    raw = config.get("partition")
    if not raw:
        return {}
    candidates = [Path(raw)] if Path(raw).is_absolute() else [Path(raw), run_dir / raw]
    for path in candidates:
        if path.is_file():
            try:
                with np.load(path, allow_pickle=False) as npz:
                    return json.loads(str(npz["meta"])) if "meta" in npz.files else {}
            except (OSError, ValueError, KeyError):
                return {}
    return {}


def load_run(run_dir: Path | str) -> tuple[dict[str, Any], pd.DataFrame]:
    """One run's tidy record (without experiment / setting) and its metrics frame.

    A missing or incomplete run raises a UserError that names the run directory.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise UserError(f"run {run_dir}: directory not found (has the training run?)")
    run_json, metrics_csv = run_dir / "run.json", run_dir / "metrics.csv"
    missing = [p.name for p in (run_json, metrics_csv) if not p.is_file()]
    if missing:
        raise UserError(f"run {run_dir}: {' and '.join(missing)} missing; the run is incomplete or failed (see its log) - re-run it")
    record = _read_json(run_json, run_dir)
    absent = [k for k in RUN_JSON_KEYS if k not in record]
    if absent:
        raise UserError(f"run {run_dir}: run.json lacks {', '.join(absent)}; it was not written by a finished `fedgmh train`")
    config = record["config"]
    if not isinstance(config, dict):
        raise UserError(f"run {run_dir}: run.json's config is not a mapping")
    try:
        metrics = pd.read_csv(metrics_csv)
    except (pd.errors.EmptyDataError, pd.errors.ParserError) as err:
        raise UserError(f"run {run_dir}: metrics.csv is unreadable ({err})") from err
    absent = [c for c in METRICS_COLUMNS if c not in metrics.columns]
    if absent:
        raise UserError(f"run {run_dir}: metrics.csv lacks column(s) {', '.join(absent)}")
    if metrics.empty:
        raise UserError(f"run {run_dir}: metrics.csv has no evaluated round")

    info_path = run_dir / "run_info.json"
    info = _read_json(info_path, run_dir) if info_path.is_file() else {}
    meta = record.get("partition") if isinstance(record.get("partition"), dict) else {}
    if any(info.get(k) is None and meta.get(k) is None for k in PARTITION_FIELDS):
        meta = {**_partition_meta(config, run_dir), **meta}

    def field(name: str, *sources: dict[str, Any], default: Any = None) -> Any:
        for source in sources:
            if source.get(name) is not None:
                return source[name]
        return default

    row: dict[str, Any] = {
        "dataset": field("dataset", info, record, config),
        "classes_per_client": field("classes_per_client", info, meta),
        "alpha": field("alpha", info, meta),
        "clients": field("clients", info, default=field("num_clients", record, meta)),
        "algorithm": field("algorithm", record, config),
        "seed": int(field("seed", record, config)),
        "rounds": field("rounds", config),
        "local_epochs": field("local_epochs", config),
        "join_ratio": field("join_ratio", config),
        "batch_size": field("batch_size", config),
        "lr": field("lr", config),
        "options": parse_options(config.get("overrides")),
        "resolved_options": {k: _jsonable(v) for k, v in (record.get("algorithm_options") or {}).items()
                             if k in REPORTED_OPTIONS and isinstance(v, (str, int, float, bool))},
        "best_test_acc": float(record["best_test_acc"]),
        "best_round": int(record["best_round"]),
        "final_test_acc": float(record["final_test_acc"]),
        "rounds_evaluated": int(len(metrics)),
        "wall_time_s": float(record["wall_time_s"]),
        "run_dir": str(run_dir),
    }
    absent = [k for k in PARTITION_FIELDS if row[k] is None]
    if absent:
        raise UserError(
            f"run {run_dir}: cannot tell {' and '.join(absent)}: no run_info.json in the run directory and the "
            f"partition file {config.get('partition')!r} is not readable from here"
        )
    return row, metrics


def aggregate_runs(run_dirs: Sequence[Path | str], experiment: str | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Tidy results (one row per run) and curves (one row per run and evaluated round).

    `experiment` labels every row (the workflow passes the table id); otherwise each run's
    run_info.json `experiment` is used, or '' when absent. Setting ids are assigned per experiment.
    """
    if not run_dirs:
        raise UserError("no run directories given")
    rows, curves = [], []
    seen: dict[str, str] = {}
    for run_dir in run_dirs:
        key = str(Path(run_dir).resolve())
        if key in seen:
            raise UserError(f"run {run_dir} is listed twice")
        seen[key] = str(run_dir)
        row, metrics = load_run(run_dir)
        if experiment is not None:
            row["experiment"] = experiment
        else:
            info_path = Path(run_dir) / "run_info.json"
            info = _read_json(info_path, Path(run_dir)) if info_path.is_file() else {}
            row["experiment"] = str(info.get("experiment", ""))
        rows.append(row)
        curves.append(metrics)

    # setting ids, per experiment
    by_experiment: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        by_experiment.setdefault(row["experiment"], []).append(i)
    for indices in by_experiment.values():
        ids = assign_setting_ids([rows[i] for i in indices])
        for i, sid in zip(indices, ids):
            rows[i]["setting"] = sid
        _check_duplicates([rows[i] for i in indices])

    option_keys = sorted({k for row in rows for k in (*row["options"], *row["resolved_options"])})
    option_columns = {k: (k if k not in BASE_COLUMNS + RESULT_COLUMNS else f"opt_{k}") for k in option_keys}
    records = []
    for row in rows:
        rec = {c: row.get(c) for c in BASE_COLUMNS}
        rec["options"] = json.dumps(row["options"], sort_keys=True)
        for key, column in option_columns.items():
            rec[column] = row["options"].get(key, row["resolved_options"].get(key))
        rec.update({c: row[c] for c in RESULT_COLUMNS})
        records.append(rec)
    results = pd.DataFrame.from_records(records)

    long_frames = []
    id_columns = ["experiment", "setting", "dataset", "classes_per_client", "alpha", "algorithm", "seed", "run_dir"]
    for rec, metrics in zip(records, curves):
        keep = [c for c in ("round", "test_acc", "test_acc_mean", "test_acc_std", "train_loss") if c in metrics.columns]
        frame = metrics[keep].copy()
        for column in reversed(id_columns):
            frame.insert(0, column, rec[column])
        long_frames.append(frame)
    curves_frame = pd.concat(long_frames, ignore_index=True)
    return results, curves_frame


def _check_duplicates(rows: Sequence[dict[str, Any]]) -> None:
    seen: dict[tuple, str] = {}
    for row in rows:
        key = (row["setting"], row["algorithm"], row["seed"])
        if key in seen:
            raise UserError(
                f"runs {seen[key]} and {row['run_dir']} are the same cell (experiment {row['experiment']!r}, "
                f"setting {row['setting']}, algorithm {row['algorithm']}, seed {row['seed']}); pass each run once"
            )
        seen[key] = row["run_dir"]


# --------------------------------------------------------------------------------------------
# tables


def read_results(path: Path | str) -> pd.DataFrame:
    path = Path(path)
    if not path.is_file():
        raise UserError(f"results file {path} not found; make it with `fedgmh aggregate --out {path}`")
    frame = pd.read_csv(path)
    needed = ["experiment", "setting", "dataset", "classes_per_client", "alpha", "algorithm", "seed", "best_test_acc"]
    absent = [c for c in needed if c not in frame.columns]
    if absent:
        raise UserError(f"results file {path} lacks column(s) {', '.join(absent)}; was it written by `fedgmh aggregate`?")
    frame["experiment"] = frame["experiment"].fillna("").astype(str)
    return frame


def _option_dims(frame: pd.DataFrame) -> tuple[list[str], list[dict[str, Any]]]:
    records = []
    for rec in frame.to_dict("records"):
        opts = rec.get("options")
        rec["options"] = json.loads(opts) if isinstance(opts, str) and opts else {}
        records.append(rec)
    return sweep_dimensions(records), records


def summarize(results: pd.DataFrame, experiment: str) -> tuple[pd.DataFrame, list[str]]:
    """One row per (setting, algorithm) of `experiment`: mean / std (percent) over seeds.

    Returns the cells frame (sorted in table order) and the swept dimensions.
    """
    frame = results[results["experiment"] == experiment]
    if frame.empty:
        known = sorted(set(results["experiment"]))
        raise UserError(f"no runs of experiment {experiment!r} in the results; experiments present: {', '.join(known) or 'none'}")
    dims, records = _option_dims(frame)
    cells: dict[tuple, dict[str, Any]] = {}
    for rec in records:
        key = (rec["setting"], rec["algorithm"])
        cell = cells.setdefault(key, {
            "experiment": experiment,
            "setting": rec["setting"],
            "dataset": rec["dataset"],
            "classes_per_client": int(rec["classes_per_client"]),
            "alpha": float(rec["alpha"]),
            **{dim: _dim_value(rec, dim) for dim in dims},
            "algorithm": rec["algorithm"],
            "algorithm_name": algorithm_name(rec["algorithm"]),
            "_acc": [], "_seeds": [], "_rounds": set(), "_clients": set(), "_join": set(), "_epochs": set(),
        })
        cell["_acc"].append(100.0 * float(rec["best_test_acc"]))
        cell["_seeds"].append(int(rec["seed"]))
        for field, column in (("_rounds", "rounds"), ("_clients", "clients"), ("_join", "join_ratio"), ("_epochs", "local_epochs")):
            value = rec.get(column)
            if value is not None and not (isinstance(value, float) and math.isnan(value)):
                cell[field].add(_freeze(value))
    rows = []
    for cell in cells.values():
        acc = np.array(cell.pop("_acc"))
        seeds = sorted(cell.pop("_seeds"))
        cell["mean"] = float(acc.mean())
        cell["std"] = float(acc.std(ddof=STD_DDOF)) if len(acc) > 1 else 0.0
        cell["n_seeds"] = len(acc)
        cell["seeds"] = " ".join(str(s) for s in seeds)
        for field, column in (("_rounds", "rounds"), ("_clients", "clients"), ("_join", "join_ratio"), ("_epochs", "local_epochs")):
            values = sorted(cell.pop(field))
            if column not in dims:
                cell[column] = "/".join(format_number(v) for v in values) if values else ""
        rows.append(cell)
    out = pd.DataFrame(rows)
    out = out.rename(columns={d: (f"opt_{d[4:]}" if d.startswith("opt:") else d) for d in dims})
    dim_columns = [f"opt_{d[4:]}" if d.startswith("opt:") else d for d in dims]
    ds_key = _order_key(DATASET_ORDER)
    alg_key = _order_key(ALGORITHM_ORDER)
    out["_ds"] = out["dataset"].map(lambda d: ds_key(d)[0])
    out["_alg"] = out["algorithm"].map(lambda a: alg_key(a)[0])
    sort_by = ["_alg", "algorithm", "_ds", "dataset", "classes_per_client", "alpha"] + dim_columns
    out = out.sort_values(sort_by, kind="stable").drop(columns=["_ds", "_alg"]).reset_index(drop=True)
    return out, dim_columns


def _dim_label(column: str, value: Any, latex: bool) -> str:
    if column.startswith("opt_"):
        key = column[4:]
        text, tex = OPTION_LABELS.get(key, (key, key.replace("_", r"\_")))
    else:
        _, text, tex = SWEEP_DIMS[column]
    return f"{tex if latex else text}={format_number(value)}"


def _column_label(cell: dict[str, Any], dim_columns: Sequence[str], latex: bool) -> tuple[str, str]:
    sub = f"ExDir({cell['classes_per_client']}, {format_number(cell['alpha'])})"
    extra = [_dim_label(c, cell[c], latex) for c in dim_columns]
    if extra:
        sub += " " + ", ".join(extra)
    return dataset_name(cell["dataset"]), sub


def _setting_order(cells: pd.DataFrame, dim_columns: Sequence[str]) -> list[str]:
    ds_key = _order_key(DATASET_ORDER)
    settings = cells.drop_duplicates("setting")
    keyed = sorted(
        settings.to_dict("records"),
        key=lambda c: (ds_key(c["dataset"]), c["classes_per_client"], c["alpha"], *[_sort_value(c[d]) for d in dim_columns]),
    )
    return [c["setting"] for c in keyed]


def _sort_value(value: Any) -> tuple:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return (1, 0, "")
    if isinstance(value, (int, float, np.number)):
        return (0, float(value), "")
    return (0, 0, str(value))


def _describe(values: Iterable[str]) -> str:
    flat = sorted({v for value in values for v in str(value).split("/") if v}, key=lambda v: _sort_value(_parse_scalar(v)))
    return "/".join(flat)


def make_table(results: pd.DataFrame, experiment: str, title: str | None = None, label: str | None = None,
               reference: pd.DataFrame | None = None) -> dict[str, Any]:
    """The table of `experiment`: LaTeX text, the same table as a wide frame, and the cells frame."""
    cells, dim_columns = summarize(results, experiment)
    settings = _setting_order(cells, dim_columns)
    algorithms = list(dict.fromkeys(cells["algorithm"]))  # already in paper order
    first = {s: cells[cells["setting"] == s].iloc[0].to_dict() for s in settings}

    cells["cell"] = [f"{m:.2f} ± {s:.2f}" for m, s in zip(cells["mean"], cells["std"])]
    rounded = cells["mean"].round(2)
    best = rounded.groupby(cells["setting"]).transform("max")
    cells["is_best"] = rounded == best
    if reference is not None:
        cells = attach_reference(cells, reference)

    def frame_for(latex: bool) -> tuple[pd.DataFrame, pd.DataFrame]:
        # LaTeX: "Method" sits top-left (as the name of the first column level), no index-name row
        names = ["Method", ""] if latex else ["dataset", "setting"]
        columns = pd.MultiIndex.from_tuples([_column_label(first[s], dim_columns, latex) for s in settings], names=names)
        index = pd.Index([algorithm_name(a) for a in algorithms], name=None if latex else "Method")
        text = pd.DataFrame("--" if latex else "", index=index, columns=columns)
        bold = pd.DataFrame(False, index=index, columns=columns)
        for rec in cells.to_dict("records"):
            r = algorithms.index(rec["algorithm"])
            c = settings.index(rec["setting"])
            value = f"{rec['mean']:.2f} $\\pm$ {rec['std']:.2f}" if latex else rec["cell"]
            text.iat[r, c] = value
            bold.iat[r, c] = bool(rec["is_best"])
        return text, bold

    wide, _ = frame_for(latex=False)
    wide_csv = wide.copy()
    wide_csv.columns = [f"{a} {b}" for a, b in wide.columns]
    wide_csv = wide_csv.reset_index()

    tex_frame, bold = frame_for(latex=True)
    n_seeds = sorted(set(cells["n_seeds"]))
    seeds_text = str(n_seeds[0]) if len(n_seeds) == 1 else f"{n_seeds[0]}--{n_seeds[-1]}"
    parts = [
        f"{title or experiment}: best test accuracy (\\%) over all evaluated rounds, mean $\\pm$ std over "
        f"{seeds_text} seed{'s' if n_seeds[-1] != 1 else ''} (population std, ddof={STD_DDOF})"
    ]
    for column, words in (("clients", "client"), ("rounds", "round"), ("join_ratio", "join ratio"), ("local_epochs", "local epoch")):
        if column in dim_columns or column not in cells:
            continue
        desc = _describe(cells[column])
        if desc:
            parts.append(f"{words} {desc}" if column == "join_ratio" else f"{desc} {words}{'' if desc == '1' else 's'}")
    caption = "; ".join(parts) + ". Bold: best mean in each column."

    styler = tex_frame.style
    styler = styler.apply(lambda col: np.where(bold[col.name].to_numpy(), "textbf:--rwrap;", ""), axis=0)
    latex = styler.to_latex(
        hrules=True,
        caption=caption,
        label=label or f"tab:{experiment}",
        position_float="centering",
        column_format="l" + "c" * len(settings),
        multicol_align="c",
        position="htbp",
    )
    header = (
        f"% {title or experiment}, generated by `fedgmh table` from {len(results[results['experiment'] == experiment])} runs.\n"
        f"% Cells: mean ± std of each run's best test accuracy (percent), std with ddof={STD_DDOF} (numpy.std).\n"
        "% Needs \\usepackage{booktabs}.\n"
    )
    return {"latex": header + latex, "wide": wide_csv, "cells": cells, "caption": caption, "settings": settings}


def _norm_name(text: Any) -> str:
    return "".join(ch for ch in str(text).lower() if ch.isalnum())


def attach_reference(cells: pd.DataFrame, reference: pd.DataFrame) -> pd.DataFrame:
    """Add the paper's mean/std (columns paper_mean, paper_std, diff) where a reference row matches.

    `reference` has the columns of shared/reference/fedgmh_paper_tables.csv: table, dataset, C,
    alpha, algorithm (display name), local_epochs, join_ratio, beta, eta_h, mean, std. A cell
    matches on table = experiment, dataset and algorithm names (case and punctuation ignored), C,
    alpha, and every swept dimension the reference has (local_epochs, join_ratio, beta, eta_h).
    """
    needed = {"table", "dataset", "C", "alpha", "algorithm", "mean", "std"}
    absent = needed - set(reference.columns)
    if absent:
        raise UserError(f"reference table lacks column(s) {', '.join(sorted(absent))}")
    ref = reference.copy()
    ref["_key"] = [
        (str(t), _norm_name(d), int(c), float(a), _norm_name(alg))
        for t, d, c, a, alg in zip(ref["table"], ref["dataset"], ref["C"], ref["alpha"], ref["algorithm"])
    ]
    paper_mean, paper_std = [], []
    for rec in cells.to_dict("records"):
        key = (rec["experiment"], _norm_name(rec["dataset"]), rec["classes_per_client"], rec["alpha"], _norm_name(rec["algorithm_name"]))
        match = ref[ref["_key"] == key]
        for column, ref_column in (("local_epochs", "local_epochs"), ("join_ratio", "join_ratio"), ("opt_beta", "beta"), ("opt_eta_h", "eta_h")):
            if column in rec and ref_column in match.columns and rec[column] not in (None, ""):
                try:
                    wanted = float(str(rec[column]).split("/")[0])
                except ValueError:
                    continue
                match = match[np.isclose(match[ref_column].astype(float), wanted)]
        if len(match) == 1:
            paper_mean.append(float(match["mean"].iloc[0]))
            paper_std.append(float(match["std"].iloc[0]))
        else:
            paper_mean.append(np.nan)
            paper_std.append(np.nan)
    out = cells.copy()
    out["paper_mean"] = paper_mean
    out["paper_std"] = paper_std
    out["diff"] = out["mean"] - out["paper_mean"]
    return out


def write_table(results_path: Path | str, experiment: str, out_tex: Path | str, out_csv: Path | str | None = None,
                cells_csv: Path | str | None = None, title: str | None = None, reference_path: Path | str | None = None) -> dict[str, Any]:
    results = read_results(results_path)
    reference = None
    if reference_path:
        reference_path = Path(reference_path)
        if not reference_path.is_file():
            raise UserError(f"reference table {reference_path} not found")
        reference = pd.read_csv(reference_path)
    table = make_table(results, experiment, title=title, reference=reference)
    write_text(table["latex"], out_tex)
    if out_csv:
        write_csv(table["wide"], out_csv)
    if cells_csv:
        write_csv(table["cells"], cells_csv)
    return table


# --------------------------------------------------------------------------------------------
# curves


def read_curves(path: Path | str) -> pd.DataFrame:
    path = Path(path)
    if not path.is_file():
        raise UserError(f"curves file {path} not found; make it with `fedgmh aggregate --curves {path}`")
    frame = pd.read_csv(path)
    needed = ["experiment", "setting", "dataset", "classes_per_client", "alpha", "algorithm", "seed", "round", "test_acc"]
    absent = [c for c in needed if c not in frame.columns]
    if absent:
        raise UserError(f"curves file {path} lacks column(s) {', '.join(absent)}; was it written by `fedgmh aggregate --curves`?")
    frame["experiment"] = frame["experiment"].fillna("").astype(str)
    return frame


def plot_curves(curves: pd.DataFrame, out: Path | str, png: Path | str | None = None, settings: Sequence[str] | None = None,
                experiment: str | None = None, algorithms: Sequence[str] | None = None, title: str | None = None) -> list[str]:
    """Accuracy (%) per round: mean over seeds with a ±1 std band; one panel per setting.

    Returns the settings drawn. Raises a UserError when the selection is empty.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns
    from matplotlib.ticker import MaxNLocator

    frame = curves
    if experiment is not None:
        frame = frame[frame["experiment"] == experiment]
        if frame.empty:
            raise UserError(f"no curves of experiment {experiment!r}; present: {', '.join(sorted(set(curves['experiment']))) or 'none'}")
    if settings:
        unknown = [s for s in settings if s not in set(frame["setting"])]
        if unknown:
            raise UserError(f"setting(s) {', '.join(unknown)} not in the curves; present: {', '.join(sorted(set(frame['setting'])))}")
        frame = frame[frame["setting"].isin(settings)]
    if algorithms:
        frame = frame[frame["algorithm"].isin(algorithms)]
    if frame.empty:
        raise UserError("nothing to plot: the selection of curves is empty")
    frame = frame.copy()
    frame["accuracy (%)"] = 100.0 * frame["test_acc"]
    alg_key = _order_key(ALGORITHM_ORDER)
    order = [algorithm_name(a) for a in sorted(set(frame["algorithm"]), key=alg_key)]
    frame["method"] = frame["algorithm"].map(algorithm_name)
    ds_key = _order_key(DATASET_ORDER)
    panels = sorted(set(frame["setting"]), key=lambda s: (ds_key(frame.loc[frame["setting"] == s, "dataset"].iloc[0]), s))

    palette = dict(zip(order, sns.color_palette("tab20" if len(order) > 10 else "tab10", n_colors=len(order))))
    ncols = min(len(panels), 3)
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, 3.8 * nrows), squeeze=False, sharey=False)
    for ax, setting in zip(axes.flat, panels):
        data = frame[frame["setting"] == setting]
        n_seeds = data.groupby("method")["seed"].nunique().max()
        sns.lineplot(data=data, x="round", y="accuracy (%)", hue="method", hue_order=[m for m in order if m in set(data["method"])],
                     palette=palette, errorbar="sd", ax=ax, linewidth=1.2)
        first = data.iloc[0]
        label = f"{dataset_name(first['dataset'])} ExDir({int(first['classes_per_client'])}, {format_number(first['alpha'])})"
        extra = setting[len(setting_id(first.to_dict())):]
        ax.set_title(f"{label}{' ' + extra.strip('_') if extra else ''} ({n_seeds} seed{'s' if n_seeds != 1 else ''})", fontsize=10)
        ax.set_xlabel("round")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, title=None)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    outputs = [Path(out)] + ([Path(png)] if png else [])
    for path in outputs:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=path.suffix.lstrip(".") or "pdf", dpi=150)
    plt.close(fig)
    return panels


def write_aggregate(run_dirs: Sequence[Path | str], out: Path | str, curves_out: Path | str | None = None,
                    experiment: str | None = None) -> pd.DataFrame:
    results, curves = aggregate_runs(run_dirs, experiment=experiment)
    write_csv(results, out)
    if curves_out:
        write_csv(curves, curves_out)
    return results
