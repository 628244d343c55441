"""Paper-style tables: rows = algorithms in the paper's order (or named variants), columns = settings.

Cells are "mean ± std" in percent over seeds of each run's accuracy (`fedgmh.report.summary`: the
best over all evaluated rounds by default, as the paper reports it; or the last round, or the mean
of the last 10 evaluated rounds); the std is the population std (ddof=0, i.e. `numpy.std`), as
PFLlib's `average_data` reports it. The best mean of a column (at the printed precision; ties all
count) is bold. With the paper's numbers, `make_table` also writes the table with the paper's value
beside ours (`beside`: the report document's version).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from fedgmh.io import write_csv, write_text
from fedgmh.report.compare import attach_reference
from fedgmh.report.latex import latex_table
from fedgmh.report.labels import DATASET_ORDER, OPTION_LABELS, STD_DDOF, SWEEP_DIMS, format_number
from fedgmh.report.outputs import check_outputs
from fedgmh.report.paper import PAPER_SEEDS, read_reference
from fedgmh.report.runs import read_results
from fedgmh.filing import assignment_of
from fedgmh.report.settings import setting_label
from fedgmh.report.summary import ACCURACIES, DEFAULT_ACCURACY, cell_text, summarize, with_adaptation
from fedgmh.report.parsing import order_key, parse_scalar, sort_value


def dim_label(column: str, value: Any) -> str:
    """'ρ=0.4', 'β=0.1', 'E=4': a swept dimension's value in a column header."""
    if column.startswith("opt_"):
        text = OPTION_LABELS.get(column[4:], column[4:])
    else:
        text = SWEEP_DIMS[column][1]
    return f"{text}={format_number(value)}"


def column_label(cell: dict[str, Any], dim_columns: Sequence[str]) -> tuple[str, str]:
    """(dataset, 'ExDir(C, alpha)' plus the swept values) of a table column; a chain partition reads
    'chain(C, alpha)', and a setting whose number of clients differs from the config's adds ', N clients'."""
    dataset, sub = setting_label(cell, cell.get("column") or cell.get("setting") or "")
    extra = [dim_label(c, cell[c]) for c in dim_columns]
    if extra:
        sub += " " + ", ".join(extra)
    return dataset, sub


def _column_order(cells: pd.DataFrame, dim_columns: Sequence[str]) -> list[str]:
    ds_key = order_key(DATASET_ORDER)
    settings = cells.drop_duplicates("column")
    keyed = sorted(
        settings.to_dict("records"),
        key=lambda c: (ds_key(c["dataset"]), c["classes_per_client"], c["alpha"], assignment_of(c), sort_value(parse_scalar(str(c.get("clients", "")))),
                       *[sort_value(c[d]) for d in dim_columns]),
    )
    return [c["column"] for c in keyed]


def _describe(values: Iterable[str]) -> str:
    flat = sorted({v for value in values for v in str(value).split("/") if v}, key=lambda v: sort_value(parse_scalar(v)))
    return "/".join(flat)


def _caption(cells: pd.DataFrame, dim_columns: Sequence[str], title: str, accuracy: str) -> tuple[str, list[str]]:
    """(the caption: title, accuracy and seeds; the notes under the table: protocol and how to read it)."""
    n_seeds = sorted(set(cells["n_seeds"]))
    seeds_text = str(n_seeds[0]) if len(n_seeds) == 1 else f"{n_seeds[0]}–{n_seeds[-1]}"
    spread = "" if n_seeds[-1] == 1 else f", mean ± std over {seeds_text} seeds"
    caption = f"{title}: {ACCURACIES[accuracy][1]}" + (spread or ", 1 seed") + "."
    parts = []
    for column, words in (("clients", "client"), ("rounds", "round"), ("join_ratio", "join ratio"), ("local_epochs", "local epoch")):
        if column in dim_columns or column not in cells:
            continue
        desc = _describe(cells[column])
        if desc:
            parts.append(f"{words} {desc}" if column == "join_ratio" else f"{desc} {words}{'' if desc == '1' else 's'}")
    note = (("; ".join(parts) + ". ") if parts else "") + f"std: population std (ddof={STD_DDOF}). Bold: best mean in each column."
    if n_seeds[0] < PAPER_SEEDS:
        note += f" (n=k): a cell of k seeds, fewer than the paper's {PAPER_SEEDS}; one seed has no std."
    return caption, [note]


def make_table(results: pd.DataFrame, experiment: str, title: str | None = None, label: str | None = None,
               reference: pd.DataFrame | None = None, accuracy: str = DEFAULT_ACCURACY) -> dict[str, Any]:
    """The table of `experiment`: LaTeX text, the same table as a wide frame, and the cells frame.

    Rows: algorithms in the paper's order, or variants (experiments with `variants`) in config
    order. Columns: settings (dataset, ExDir and swept values). `reference`: see attach_reference;
    with it, `beside` is the LaTeX table with the paper's value next to each of ours (else None).
    """
    cells, dim_columns = summarize(results, experiment, accuracy)
    settings = _column_order(cells, dim_columns)
    rows = list(dict.fromkeys(cells["row"]))  # already in table order
    row_names = dict(zip(cells["row"], cells["row_name"]))
    first = {s: cells[cells["column"] == s].iloc[0].to_dict() for s in settings}
    corner = "Variant" if (cells["variant"] != "").any() else "Method"
    cells["cell"] = [cell_text(m, s, n) for m, s, n in zip(cells["mean"], cells["std"], cells["n_seeds"])]
    if "adaptation_budget" in cells:
        cells["cell"] = [with_adaptation(*texts) for texts in zip(cells["cell"], cells["before_adaptation"], cells["adaptation_budget"])]
    rounded = cells["mean"].round(2)
    cells["is_best"] = rounded == rounded.groupby(cells["column"]).transform("max")
    if reference is not None:
        cells = attach_reference(cells, reference)

    columns = pd.MultiIndex.from_tuples([column_label(first[s], dim_columns) for s in settings], names=["dataset", "setting"])
    wide = pd.DataFrame("", index=pd.Index([row_names[r] for r in rows], name=corner), columns=columns)
    bold = pd.DataFrame(False, index=wide.index, columns=columns)
    for rec in cells.to_dict("records"):
        r, c = rows.index(rec["row"]), settings.index(rec["column"])
        wide.iat[r, c], bold.iat[r, c] = rec["cell"], bool(rec["is_best"])
    wide_csv = wide.copy()
    wide_csv.columns = [f"{a} {b}" for a, b in wide.columns]
    wide_csv = wide_csv.reset_index()

    title = title or experiment
    caption, notes = _caption(cells, dim_columns, title, accuracy)
    printed, adapted = _adaptation_notes(cells, rows, settings, wide)
    runs = len(results[results["experiment"] == experiment])
    comment = (f"{title}, generated by `fedgmh table` from {runs} runs.\n"
               f"Cells: mean ± std over seeds of each run's {ACCURACIES[accuracy][1]}, std with ddof={STD_DDOF} (numpy.std).")
    latex = latex_table(printed.replace("", "—"), caption, label or f"tab:{experiment}", corner=corner, bold=bold,
                        notes=[*adapted, *notes], comment=comment)
    beside = None
    if reference is not None and (cells["paper_row"] >= 0).any():
        beside = _beside(cells, rows, settings, printed, bold, corner, caption, [*adapted, *notes], label or f"tab:{experiment}-paper")
    return {"latex": latex, "wide": wide_csv, "cells": cells, "caption": caption, "settings": settings, "beside": beside}


def _adaptation_notes(cells: pd.DataFrame, rows: list[str], settings: list[str], wide: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """The printed table, where a cell of a method with an adaptation (FedBABU, Per-FedAvg) keeps its number and
    a mark [k], and the notes [k] under the table that say its accuracy before the adaptation and the budget (a
    cell with both would be wider than the page)."""
    printed, notes = wide.copy(), []
    if "adaptation_budget" not in cells:
        return printed, notes
    for rec in cells.to_dict("records"):
        if isinstance(rec["adaptation_budget"], str):
            mark = f"[{len(notes) + 1}]"
            r, c = rows.index(rec["row"]), settings.index(rec["column"])
            printed.iat[r, c] = f"{cell_text(rec['mean'], rec['std'], rec['n_seeds'])} {mark}"
            where = " ".join(part for part in wide.columns[c] if part)
            notes.append(f"{mark} {wide.index[r]}, {where}: before adaptation {rec['before_adaptation']:.2f}, "
                         f"adapted {rec['adaptation_budget']}.")
    return printed, notes


def _beside(cells: pd.DataFrame, rows: list[str], settings: list[str], wide: pd.DataFrame, bold: pd.DataFrame, corner: str,
            caption: str, notes: list[str], label: str) -> str:
    """The table with a 'paper' column next to each of ours (the paper's mean ± std over its 5 seeds)."""
    paper = pd.DataFrame("—", index=wide.index, columns=wide.columns)
    for rec in cells.to_dict("records"):
        if rec["paper_row"] >= 0:
            paper.iat[rows.index(rec["row"]), settings.index(rec["column"])] = cell_text(rec["paper_mean"], rec["paper_std"], PAPER_SEEDS)
    pairs = [(*key, who) for key in wide.columns for who in ("ours", "paper")]
    text = pd.DataFrame({(*key, "ours"): wide[key].replace("", "—") for key in wide.columns} |
                        {(*key, "paper"): paper[key] for key in wide.columns})[pairs]
    text.columns = pd.MultiIndex.from_tuples(pairs)
    strong = pd.DataFrame({pair: (bold[pair[:2]] if pair[2] == "ours" else False) for pair in pairs})[pairs]
    return latex_table(text, caption, label, corner=corner, bold=strong, size="small", fit=True,
                       notes=[*notes, f"Paper: the paper's mean ± std over its {PAPER_SEEDS} seeds."])


def write_table(results_path: Path | str, experiment: str, out_tex: Path | str, out_csv: Path | str | None = None,
                cells_csv: Path | str | None = None, title: str | None = None, reference_path: Path | str | None = None,
                accuracy: str = DEFAULT_ACCURACY, beside_tex: Path | str | None = None) -> dict[str, Any]:
    """`make_table` of a results CSV, written as LaTeX (+ CSV, cells CSV, the table beside the paper's)."""
    check_outputs(out_tex, out_csv, cells_csv, beside_tex)
    results = read_results(results_path)
    reference = read_reference(reference_path) if reference_path else None
    table = make_table(results, experiment, title=title, reference=reference, accuracy=accuracy)
    write_text(table["latex"], out_tex)
    if out_csv:
        write_csv(table["wide"], out_csv)
    if cells_csv:
        write_csv(table["cells"], cells_csv)
    if beside_tex and table["beside"]:
        write_text(table["beside"], beside_tex)
    return table
