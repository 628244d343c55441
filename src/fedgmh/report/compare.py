"""The paper's numbers next to ours: per table cell, with a verdict, and the whole comparison report.

The reference is a CSV with the columns of reference/fedgmh_paper_tables.csv: table, dataset, C,
alpha, algorithm (display name), local_epochs, join_ratio, beta, eta_h, mean, std (one row per
cell of the paper's Tables 2-7; an empty mean or std: no reference). A cell of ours matches a
reference row on table = experiment id, dataset and algorithm names (case and punctuation
ignored), C, alpha, and every dimension the reference table varies (Table 3: local_epochs, Table 4:
join_ratio, Table 6: beta, Table 7: eta_h). Cells of named variants never match. Two of our cells
matching one paper cell, or one matching several, is an error: the comparison never picks one.

Status of a paper cell (`compare_with_paper`), the first that applies:

- 'no reference': the reference row has no mean or std;
- 'not run': we have no such cell;
- 'other protocol' / 'reduced protocol': our runs differ from the paper's protocol (the `protocol`
  column says how: `fedgmh.report.protocol`), or the cell has fewer than MIN_SEEDS distinct seeds
  ('reduced protocol'). Not judged: the difference is shown for information only;
- the verdict of `fedgmh.report.verdicts.welch_tost`: 'reproduced', 'not reproduced' or
  'inconclusive', at the equivalence margin `margin` (accuracy points) and level `alpha`.

Every cell is compared on both readings of the paper's "average accuracy of all clients"
(`summary.READINGS_OF_ACCURACY`):
the accuracy pooled over the clients' test samples, which decides (the paper's numbers match it,
docs/verdicts.md), and the unweighted mean of the clients' accuracies, in the `clients_*` columns.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from fedgmh.errors import UserError
from fedgmh.io import write_csv, write_text
from fedgmh.report.comparison_text import comparison_latex, comparison_markdown
from fedgmh.report.labels import OPTION_LABELS, STD_DDOF, SWEEP_DIMS, format_number
from fedgmh.report.outputs import check_outputs
from fedgmh.report.paper import (
    PAPER_ACCURACY, PAPER_SEEDS, PAPER_STD_DDOF, REFERENCE_DIMS, check_reference, read_reference, reference_cell, reference_dataset,
)
from fedgmh.report.protocol import (
    OTHER, REDUCED, cell_numbers, cell_option_sets, check_reading, protocol_differences, resolved_protocol,
)
from fedgmh.report.runs import read_results
from fedgmh.report.summary import ACCURACIES, summarize
from fedgmh.report.parsing import norm_name
from fedgmh.report.verdicts import (
    DEFAULT_ALPHA, DEFAULT_MARGIN, INCONCLUSIVE, MIN_SEEDS, NOT_REPRODUCED, REPRODUCED, check_test_settings, sample_std, welch_tost,
)

NO_REFERENCE, NOT_RUN = "no reference", "not run"
#: the columns of a cell compared on the other accuracy, each as `clients_<column>`
CLIENT_COLUMNS = ("our_mean", "our_std", "n_seeds", "diff", "ci_low", "ci_high", "status")
STATUSES = (REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE, REDUCED, OTHER, NO_REFERENCE, NOT_RUN)
#: the reference dimensions that are algorithm options (our cells' column: opt_<name> where swept)
OPTION_DIMS = ("beta", "eta_h")
#: the reference's dimensions -> their labels in setting names
DIM_LABELS = {**{d: SWEEP_DIMS[d][1] for d in ("local_epochs", "join_ratio")}, **{d: OPTION_LABELS[d] for d in OPTION_DIMS}}


def _swept(reference: pd.DataFrame) -> dict[str, list[str]]:
    """Per reference table: the dimensions it varies (REFERENCE_DIMS with several values)."""
    return {str(table): [d for d in REFERENCE_DIMS if d in group.columns and group[d].nunique() > 1]
            for table, group in reference.groupby("table", sort=False)}


def _cell_name(rec: dict) -> str:
    where = f" of {rec['source']}" if rec.get("source") else ""
    return f"{rec['experiment']} {rec.get('setting', rec['dataset'])} {rec.get('row', rec['algorithm'])}{where}"


def _cell_value(rec: dict, dim: str) -> float | None:
    """Our cell's value of reference dimension `dim` (None when its runs do not share one)."""
    if dim in OPTION_DIMS:
        if not pd.isna(rec.get(f"opt_{dim}", np.nan)):
            return float(rec[f"opt_{dim}"])
        values = {resolved_protocol(rec["algorithm"], overrides).get(dim) for overrides in cell_option_sets(rec) or []}
        return float(values.pop()) if len(values) == 1 and None not in values else None
    values = cell_numbers(rec.get(dim))
    return values[0] if len(values) == 1 else None


def match_rows(cells: pd.DataFrame, reference: pd.DataFrame) -> list[int]:
    """Per cell of ours, the index of its reference row (-1: none); an error where a cell matches
    several rows or two cells match one."""
    keys = [(str(t), norm_name(d), int(c), float(a), norm_name(alg)) if not pd.isna(c) and not pd.isna(a) else None
            for t, d, c, a, alg in zip(reference["table"], reference["dataset"], reference["C"], reference["alpha"], reference["algorithm"])]
    swept = _swept(reference)
    rows, taken = [], {}
    for rec in cells.to_dict("records"):
        if rec.get("variant"):
            rows.append(-1)
            continue
        key = (str(rec["experiment"]), norm_name(rec["dataset"]), int(rec["classes_per_client"]), float(rec["alpha"]),
               norm_name(rec["algorithm_name"]))
        match = reference[[k == key for k in keys]]
        for dim in swept.get(key[0], []):
            value = _cell_value(rec, dim)
            if value is not None:
                match = match[np.isclose(match[dim].astype(float), value)]
        if len(match) > 1:
            raise UserError(f"cell {_cell_name(rec)} matches {len(match)} paper cells ({reference_cell(match.iloc[0])} ...): its runs do "
                            f"not say its {', '.join(swept.get(key[0], [])) or 'setting'}")
        row = int(match.index[0]) if len(match) else -1
        if row in taken:
            raise UserError(f"cells {_cell_name(taken[row])} and {_cell_name(rec)} both match the paper's "
                            f"{reference_cell(reference.loc[row])}; compare one of them (e.g. one number of clients per experiment)")
        if row >= 0:
            taken[row] = rec
        rows.append(row)
    return rows


def attach_reference(cells: pd.DataFrame, reference: pd.DataFrame, reading: str = "paper") -> pd.DataFrame:
    """Add the paper's mean/std (columns paper_mean, paper_std, diff, paper_row, protocol) where a
    reference row matches: `paper_row` is its index in `reference` (-1: none), `protocol` how our
    runs differ from the paper's protocol (`fedgmh.report.protocol`; empty: the same)."""
    check_reference(reference)
    out = cells.copy()
    out["paper_row"] = match_rows(cells, reference) if len(cells) else []
    swept = _swept(reference)
    matched = [reference.loc[row] if row >= 0 else None for row in out["paper_row"]]
    out["paper_mean"] = [float(ref["mean"]) if ref is not None else np.nan for ref in matched]
    out["paper_std"] = [float(ref["std"]) if ref is not None else np.nan for ref in matched]
    out["diff"] = out["mean"] - out["paper_mean"] if len(out) else []
    out["protocol"] = [protocol_differences(rec, ref, swept.get(str(ref["table"]), []), reading).text() if ref is not None else ""
                       for rec, ref in zip(out.to_dict("records"), matched)]
    return out


def _judge(cell: dict, paper_mean: float, paper_std: float, margin: float, alpha: float) -> dict:
    """The Welch/TOST columns of a cell judged at the paper's protocol."""
    n = int(cell["n_seeds"])
    welch = welch_tost((float(cell["mean"]), sample_std(float(cell["std"]), n, STD_DDOF), n),
                       (paper_mean, sample_std(paper_std, PAPER_SEEDS, PAPER_STD_DDOF), PAPER_SEEDS), margin, alpha)
    return {"ci_low": welch.ci_low, "ci_high": welch.ci_high, "welch_df": welch.df, "margin": margin, "p_tost": welch.p_tost,
            "p_beyond": welch.p_beyond, "p_welch": welch.p_welch, "status": welch.verdict}


STAT_COLUMNS = ("ci_low", "ci_high", "welch_df", "margin", "p_tost", "p_beyond", "p_welch")


def compare_with_paper(cells: pd.DataFrame, reference: pd.DataFrame, margin: float = DEFAULT_MARGIN, alpha: float = DEFAULT_ALPHA,
                       reading: str = "paper") -> pd.DataFrame:
    """One row per reference cell: the paper's mean ± std, ours, the difference, the statistics and a status.

    `cells`: our table cells (`fedgmh.report.summarize` of any number of experiments, concatenated;
    an optional `source` column names where each came from). Status: see the module docstring.
    `reading`: which options count as the paper's protocol (`fedgmh.report.protocol.READINGS`).
    """
    check_test_settings(margin, alpha)
    check_reading(reading)
    check_reference(reference)
    rows_of_cells = match_rows(cells, reference) if len(cells) else []
    ours = {row: rec for row, rec in zip(rows_of_cells, cells.to_dict("records")) if row >= 0}
    swept = _swept(reference)
    rows = []
    for index, ref in reference.iterrows():
        table = str(ref["table"])
        dataset = reference_dataset(ref["dataset"])
        extra = [f"{DIM_LABELS[dim]}={format_number(float(ref[dim]))}" for dim in swept.get(table, [])]
        row = {
            "table": table, "dataset": dataset, "C": int(ref["C"]), "alpha": float(ref["alpha"]),
            "setting": " ".join([f"{dataset} ExDir({int(ref['C'])}, {format_number(float(ref['alpha']))})", *extra]),
            "algorithm": ref["algorithm"], **{d: ref[d] for d in REFERENCE_DIMS if d in reference.columns},
            "paper_mean": float(ref["mean"]), "paper_std": float(ref["std"]),
            "paper_sample_std": sample_std(float(ref["std"]), PAPER_SEEDS, PAPER_STD_DDOF),
            "our_mean": np.nan, "our_std": np.nan, "our_sample_std": np.nan, "n_seeds": 0, "seeds": "", "diff": np.nan,
            "ci_level": 1 - 2 * alpha, **dict.fromkeys(STAT_COLUMNS, np.nan), "status": NOT_RUN, "protocol": "",
        }
        cell = ours.get(int(index))
        if cell is not None:
            n = int(cell["n_seeds"])
            differences = protocol_differences(cell, ref, swept.get(table, []), reading)
            row.update(our_mean=float(cell["mean"]), our_std=float(cell["std"]), our_sample_std=sample_std(float(cell["std"]), n, STD_DDOF),
                       n_seeds=n, seeds=str(cell.get("seeds", "")), diff=float(cell["mean"]) - row["paper_mean"],
                       protocol=differences.text())
            if differences.status or n < MIN_SEEDS:
                row["status"] = differences.status or REDUCED
        if math.isnan(row["paper_mean"]) or math.isnan(row["paper_std"]):
            row["status"] = NO_REFERENCE
        elif cell is not None and row["status"] == NOT_RUN:
            row.update(_judge(cell, row["paper_mean"], row["paper_std"], margin, alpha))
        rows.append(row)
    return pd.DataFrame(rows)


def summary_counts(comparison: pd.DataFrame) -> pd.DataFrame:
    """Per table (and 'all'): how many cells have each status."""
    counts = pd.crosstab(comparison["table"], comparison["status"]).reindex(columns=list(STATUSES), fill_value=0)
    counts = counts.reindex(list(dict.fromkeys(comparison["table"])))
    counts.loc["all"] = counts.sum()
    counts["cells"] = counts.sum(axis=1)
    return counts.reset_index().rename(columns={"index": "table"})


def _cells_of(results_paths: Sequence[Path | str],
              accuracy: str = PAPER_ACCURACY) -> tuple[pd.DataFrame, list[str], list[pd.DataFrame]]:
    """Our cells of every experiment of the results files on `accuracy` (column `source`: the file),
    the experiments and the results frames; the same cell in two files is an error. A cell whose
    runs lack that accuracy (records older than its column) is left out: no verdict from a NaN."""
    frames, experiments, all_results, seen = [], [], [], {}
    for path in results_paths:
        results = read_results(path)
        all_results.append(results)
        if ACCURACIES[accuracy][0] not in results.columns and accuracy != PAPER_ACCURACY:
            continue  # aggregated before the column existed: the cells are not run on this accuracy
        for experiment in dict.fromkeys(results["experiment"]):
            cells = summarize(results, experiment, accuracy)[0].assign(source=str(path))
            for rec in cells.to_dict("records"):
                key = (rec["experiment"], rec["setting"], rec["row"])
                if key in seen:
                    raise UserError(f"cell {' '.join(key)} is in both {seen[key]} and {path}; compare each cell once")
                seen[key] = str(path)
            experiments.append(experiment)
            frames.append(cells[cells["mean"].notna()])
    return (pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()), list(dict.fromkeys(experiments)), all_results


def with_client_mean(comparison: pd.DataFrame, clients: pd.DataFrame) -> pd.DataFrame:
    """`comparison` (on the pooled accuracy) with each cell's comparison on the mean over clients
    (`clients`: the same reference rows) as `clients_*` columns."""
    out = comparison.copy()
    for column in CLIENT_COLUMNS:
        out[f"clients_{column}"] = clients[column].to_numpy()
    return out


def write_comparison(results_paths: Sequence[Path | str], reference_path: Path | str, out_md: Path | str,
                     out_tex: Path | str | None = None, out_csv: Path | str | None = None, margin: float = DEFAULT_MARGIN,
                     alpha: float = DEFAULT_ALPHA, reading: str = "paper", other_paths: Sequence[Path | str] = (),
                     out_other_csv: Path | str | None = None) -> pd.DataFrame:
    """Summarize every experiment of the results files, compare with the reference, write the report.

    `other_paths`: reference values of other documents (`fedgmh.report.other_documents`), listed after the
    paper's cells in their own section of the Markdown and LaTeX (with their own summary) and in
    `out_other_csv`; the paper's comparison (the returned frame, `out_csv`) does not include them."""
    from fedgmh.report.other_documents import compare_other_references, others_latex, others_markdown

    check_test_settings(margin, alpha)
    check_reading(reading)
    if out_other_csv and not other_paths:
        raise UserError("--other-csv needs --other (the other documents' reference values)")
    check_outputs(out_md, out_tex, out_csv, out_other_csv)
    reference = read_reference(reference_path)
    cells, experiments, all_results = _cells_of(results_paths)
    comparison = compare_with_paper(cells, reference, margin=margin, alpha=alpha, reading=reading)
    clients = compare_with_paper(_cells_of(results_paths, "best_clients")[0], reference, margin=margin, alpha=alpha, reading=reading)
    comparison = with_client_mean(comparison, clients)
    counts = summary_counts(comparison)
    others = compare_other_references(all_results, other_paths) if other_paths else None
    markdown = comparison_markdown(comparison, counts, margin, alpha, reading, experiments)
    latex = comparison_latex(comparison, counts, margin, alpha, reading, summarised=NOT_RUN)
    if others is not None and len(others):
        markdown += others_markdown(others)
        latex += "\n" + others_latex(others)
    write_text(markdown, out_md)
    if out_tex:
        write_text(latex, out_tex)
    if out_csv:
        write_csv(comparison, out_csv)
    if out_other_csv:
        write_csv(others, out_other_csv)
    return comparison
