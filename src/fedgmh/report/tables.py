"""Paper-style tables: rows = algorithms in the paper's order (or named variants), columns = settings.

Cells are "mean ± std" of the best test accuracy in percent over seeds; the std is the population
std (ddof=0, i.e. `numpy.std`), as PFLlib's `average_data` reports it. The best mean of a column
(at the printed precision; ties all count) is bold.
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
from fedgmh.io import write_csv, write_text
from fedgmh.report.names import (
    ALGORITHM_ORDER, DATASET_ORDER, OPTION_LABELS, STD_DDOF, SWEEP_DIMS, _freeze, _order_key, _parse_scalar, _sort_value,
    algorithm_name, dataset_name, format_number,
)
from fedgmh.report.compare import PAPER_SEEDS, attach_reference, read_reference
from fedgmh.report.runs import read_results
from fedgmh.report.settings import _dim_value, base_setting, sweep_dimensions, variant_of


def _option_dims(frame: pd.DataFrame) -> tuple[list[str], list[dict[str, Any]]]:
    records = []
    for rec in frame.to_dict("records"):
        opts = rec.get("options")
        rec["options"] = json.loads(opts) if isinstance(opts, str) and opts else {}
        records.append(rec)
    return sweep_dimensions(records), records


def summarize(results: pd.DataFrame, experiment: str) -> tuple[pd.DataFrame, list[str]]:
    """One row per (setting, algorithm) of `experiment`: mean / std (percent) over seeds.

    Returns the cells frame (sorted in table order) and the swept dimensions. Each cell also says
    where it goes in the table: `row` / `row_name` (the algorithm, or the variant for runs of a
    named variant, in order of appearance) and `column` (the setting id without `@<variant>`).
    """
    frame = results[results["experiment"] == experiment]
    if frame.empty:
        known = sorted(set(results["experiment"]))
        raise UserError(f"no runs of experiment {experiment!r} in the results; experiments present: {', '.join(known) or 'none'}")
    dims, records = _option_dims(frame)
    variant_order = list(dict.fromkeys(variant_of(rec) for rec in records))
    several_algorithms = len({rec["algorithm"] for rec in records}) > 1
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
            "variant": variant_of(rec),
            "row": f"{rec['algorithm']}@{variant_of(rec)}" if variant_of(rec) else rec["algorithm"],
            "row_name": _row_name(rec["algorithm"], variant_of(rec), several_algorithms),
            "column": base_setting(rec["setting"]),
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
    out["_variant"] = out["variant"].map(variant_order.index)
    sort_by = ["_variant", "_alg", "algorithm", "_ds", "dataset", "classes_per_client", "alpha"] + dim_columns
    out = out.sort_values(sort_by, kind="stable").drop(columns=["_ds", "_alg", "_variant"]).reset_index(drop=True)
    return out, dim_columns


def cell_text(mean: float, std: float, n_seeds: int, latex: bool) -> str:
    """'mean ± std', without the std for one seed, and '(n=k)' where k is below the paper's 5 seeds."""
    pm = " $\\pm$ " if latex else " ± "
    text = f"{mean:.2f}" if n_seeds == 1 else f"{mean:.2f}{pm}{std:.2f}"
    return text + (f" (n={n_seeds})" if n_seeds < PAPER_SEEDS else "")


def _row_name(algorithm: str, variant: str, several_algorithms: bool) -> str:
    if not variant:
        return algorithm_name(algorithm)
    return f"{algorithm_name(algorithm)} ({variant})" if several_algorithms else variant


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


def _column_order(cells: pd.DataFrame, dim_columns: Sequence[str]) -> list[str]:
    ds_key = _order_key(DATASET_ORDER)
    settings = cells.drop_duplicates("column")
    keyed = sorted(
        settings.to_dict("records"),
        key=lambda c: (ds_key(c["dataset"]), c["classes_per_client"], c["alpha"], *[_sort_value(c[d]) for d in dim_columns]),
    )
    return [c["column"] for c in keyed]


def _latex_escape(text: str) -> str:
    return "".join("\\" + ch if ch in "_&%#$" else ch for ch in str(text))


def _describe(values: Iterable[str]) -> str:
    flat = sorted({v for value in values for v in str(value).split("/") if v}, key=lambda v: _sort_value(_parse_scalar(v)))
    return "/".join(flat)


def make_table(results: pd.DataFrame, experiment: str, title: str | None = None, label: str | None = None,
               reference: pd.DataFrame | None = None) -> dict[str, Any]:
    """The table of `experiment`: LaTeX text, the same table as a wide frame, and the cells frame.

    Rows: algorithms in the paper's order, or variants (experiments with `variants`) in config
    order. Columns: settings (dataset, ExDir and swept values). `reference`: see attach_reference.
    """
    cells, dim_columns = summarize(results, experiment)
    settings = _column_order(cells, dim_columns)
    rows = list(dict.fromkeys(cells["row"]))  # already in table order
    row_names = dict(zip(cells["row"], cells["row_name"]))
    first = {s: cells[cells["column"] == s].iloc[0].to_dict() for s in settings}
    corner = "Variant" if (cells["variant"] != "").any() else "Method"

    cells["cell"] = [cell_text(m, s, n, latex=False) for m, s, n in zip(cells["mean"], cells["std"], cells["n_seeds"])]
    rounded = cells["mean"].round(2)
    best = rounded.groupby(cells["column"]).transform("max")
    cells["is_best"] = rounded == best
    if reference is not None:
        cells = attach_reference(cells, reference)

    def frame_for(latex: bool) -> tuple[pd.DataFrame, pd.DataFrame]:
        # LaTeX: "Method" sits top-left (as the name of the first column level), no index-name row
        names = [corner, ""] if latex else ["dataset", "setting"]
        columns = pd.MultiIndex.from_tuples([_column_label(first[s], dim_columns, latex) for s in settings], names=names)
        labels = [_latex_escape(row_names[r]) if latex else row_names[r] for r in rows]
        index = pd.Index(labels, name=None if latex else corner)
        text = pd.DataFrame("--" if latex else "", index=index, columns=columns)
        bold = pd.DataFrame(False, index=index, columns=columns)
        for rec in cells.to_dict("records"):
            r = rows.index(rec["row"])
            c = settings.index(rec["column"])
            value = cell_text(rec["mean"], rec["std"], rec["n_seeds"], latex=True) if latex else rec["cell"]
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
    if n_seeds[0] < PAPER_SEEDS:
        caption += f" (n=k): a cell of k seeds, fewer than the paper's {PAPER_SEEDS}; one seed has no std."

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


def write_table(results_path: Path | str, experiment: str, out_tex: Path | str, out_csv: Path | str | None = None,
                cells_csv: Path | str | None = None, title: str | None = None, reference_path: Path | str | None = None) -> dict[str, Any]:
    results = read_results(results_path)
    reference = read_reference(reference_path) if reference_path else None
    table = make_table(results, experiment, title=title, reference=reference)
    write_text(table["latex"], out_tex)
    if out_csv:
        write_csv(table["wide"], out_csv)
    if cells_csv:
        write_csv(table["cells"], cells_csv)
    return table

