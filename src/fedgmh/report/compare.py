"""The paper's numbers next to ours: per table cell, and the whole comparison report.

The reference is a CSV with the columns of reference/fedgmh_paper_tables.csv: table, dataset, C,
alpha, algorithm (display name), local_epochs, join_ratio, beta, eta_h, mean, std (one row per
cell of the paper's Tables 2-7). A cell of ours matches a reference row on table = experiment id,
dataset and algorithm names (case and punctuation ignored), C, alpha, and every swept dimension
the reference table varies (Table 3: local_epochs, Table 4: join_ratio, Table 6: beta, Table 7:
eta_h). Cells of named variants never match. Where our run's protocol differs from the paper's in a
dimension the table does not vary (rounds, clients, local epochs, participation, number of seeds:
e.g. config/mini.yaml), the cell is still compared and its `protocol` column says how it differs.

Status of a cell (`compare_with_paper`): 'not run' without a cell of ours; 'reduced protocol' (not
comparable) when the run's protocol differs from the paper's (the `protocol` column says how) or the
cell has fewer than MIN_SEEDS seeds; otherwise 'agree' when |ours - paper| <= k * sqrt(std_paper^2 +
std_ours^2), k = 2 by default, with both std the population std over seeds as each side reports
it, else 'disagree'.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from fedgmh.errors import UserError
from fedgmh.io import write_csv, write_text
from fedgmh.report.latex import latex_table
from fedgmh.report.names import OPTION_LABELS, SWEEP_DIMS, format_number
from fedgmh.report.paper import PAPER_ACCURACY, PAPER_CLIENTS, PAPER_ROUNDS, PAPER_SEEDS, REFERENCE_COLUMNS, read_reference, reference_dataset
from fedgmh.report.runs import read_results
from fedgmh.report.summary import summarize
from fedgmh.report.values import norm_name

# our cells' column -> the reference's column, for the swept dimensions
MATCHED_DIMS = (("local_epochs", "local_epochs"), ("join_ratio", "join_ratio"), ("opt_beta", "beta"), ("opt_eta_h", "eta_h"))
#: the reference's swept columns -> their labels
DIM_LABELS = {"local_epochs": SWEEP_DIMS["local_epochs"][1], "join_ratio": SWEEP_DIMS["join_ratio"][1],
              "beta": OPTION_LABELS["beta"], "eta_h": OPTION_LABELS["eta_h"]}
#: fewer seeds than this and a cell is not compared: its spread over seeds is unknown
MIN_SEEDS = 3
STATUSES = ("agree", "disagree", "reduced protocol", "not run")


def _reference_keys(reference: pd.DataFrame) -> list[tuple]:
    return [
        (str(t), norm_name(d), int(c), float(a), norm_name(alg))
        for t, d, c, a, alg in zip(reference["table"], reference["dataset"], reference["C"], reference["alpha"], reference["algorithm"])
    ]


def _protocol_differences(rec: dict, ref: pd.Series, swept: list[str]) -> str:
    """How our cell's run differs from the paper's protocol outside the table's swept dimensions."""
    notes = []
    paper_rounds = PAPER_ROUNDS.get(norm_name(rec["dataset"]))
    if paper_rounds and rec.get("rounds") not in (None, "") and int(rec["rounds"]) != paper_rounds:
        notes.append(f"{int(rec['rounds'])} rounds (paper {paper_rounds})")
    if rec.get("clients") not in (None, "") and int(rec["clients"]) != PAPER_CLIENTS:
        notes.append(f"{int(rec['clients'])} clients (paper {PAPER_CLIENTS})")
    for column in ("local_epochs", "join_ratio"):
        if column in swept or column not in ref.index or rec.get(column) in (None, ""):
            continue
        ours = float(str(rec[column]).split("/")[0])
        if not math.isnan(ours) and not np.isclose(ours, float(ref[column])):
            notes.append(f"{DIM_LABELS[column]}={format_number(ours)} (paper {format_number(float(ref[column]))})")
    if rec.get("n_seeds") not in (None, "") and int(rec["n_seeds"]) != PAPER_SEEDS:
        notes.append(f"{int(rec['n_seeds'])} seed{'s' if int(rec['n_seeds']) != 1 else ''} (paper {PAPER_SEEDS})")
    return ", ".join(notes)


def cell_status(diff: float, tolerance: float, n_seeds: int, protocol: str) -> str:
    """agree / disagree for a cell at the paper's protocol with enough seeds, else 'reduced protocol'."""
    other = [note for note in protocol.split(", ") if note and "seed" not in note]
    if other or n_seeds < MIN_SEEDS:
        return "reduced protocol"
    return "agree" if abs(diff) <= tolerance + 1e-9 else "disagree"


def attach_reference(cells: pd.DataFrame, reference: pd.DataFrame) -> pd.DataFrame:
    """Add the paper's mean/std (columns paper_mean, paper_std, diff, paper_row, protocol) where a
    reference row matches.

    `paper_row` is the matching row's index in `reference` (-1: none); `protocol` lists how our run
    differs from the paper's protocol (empty: same protocol).
    """
    absent = set(REFERENCE_COLUMNS) - set(reference.columns)
    if absent:
        raise UserError(f"reference table lacks column(s) {', '.join(sorted(absent))}")
    ref = reference.copy()
    ref["_key"] = _reference_keys(ref)
    swept = _swept(reference)
    paper_mean, paper_std, paper_row, protocol = [], [], [], []
    for rec in cells.to_dict("records"):
        match = ref.iloc[0:0]
        if not rec.get("variant"):
            key = (rec["experiment"], norm_name(rec["dataset"]), rec["classes_per_client"], rec["alpha"], norm_name(rec["algorithm_name"]))
            match = ref[ref["_key"] == key]
        table_swept = swept.get(str(rec["experiment"]), [])
        for column, ref_column in MATCHED_DIMS:
            if ref_column not in table_swept:
                continue
            if column in rec and ref_column in match.columns and rec[column] not in (None, ""):
                try:
                    wanted = float(str(rec[column]).split("/")[0])
                except ValueError:
                    continue
                if not math.isnan(wanted):
                    match = match[np.isclose(match[ref_column].astype(float), wanted)]
        if len(match) == 1:
            paper_mean.append(float(match["mean"].iloc[0]))
            paper_std.append(float(match["std"].iloc[0]))
            paper_row.append(int(match.index[0]))
            protocol.append(_protocol_differences(rec, match.iloc[0], table_swept))
        else:
            paper_mean.append(np.nan)
            paper_std.append(np.nan)
            paper_row.append(-1)
            protocol.append("")
    out = cells.copy()
    out["paper_mean"] = paper_mean
    out["paper_std"] = paper_std
    out["diff"] = out["mean"] - out["paper_mean"]
    out["paper_row"] = paper_row
    out["protocol"] = protocol
    return out


def _swept(reference: pd.DataFrame) -> dict[str, list[str]]:
    """Per reference table: the dimensions it varies (its columns besides dataset and ExDir)."""
    out = {}
    for table, group in reference.groupby("table", sort=False):
        out[str(table)] = [d for d in DIM_LABELS if d in group.columns and group[d].nunique() > 1]
    return out


def compare_with_paper(cells: pd.DataFrame, reference: pd.DataFrame, k: float = 2.0) -> pd.DataFrame:
    """One row per reference cell: the paper's mean ± std, ours, the difference and a status.

    `cells`: our table cells (`fedgmh.report.summarize` of any number of experiments, concatenated).
    status: see the module docstring (`cell_status`); 'not run' when we have no such cell (experiment
    not configured, dataset or value not run).
    """
    matched = attach_reference(cells, reference) if len(cells) else cells.assign(paper_row=[])
    ours = {int(r): rec for r, rec in zip(matched["paper_row"], matched.to_dict("records")) if int(r) >= 0}
    swept = _swept(reference)
    rows = []
    for index, ref in reference.iterrows():
        table = str(ref["table"])
        dataset = reference_dataset(ref["dataset"])
        setting = f"{dataset} ExDir({int(ref['C'])}, {format_number(float(ref['alpha']))})"
        extra = [f"{DIM_LABELS[d]}={format_number(float(ref[d]))}" for d in swept.get(table, [])]
        row = {
            "table": table, "dataset": dataset, "C": int(ref["C"]), "alpha": float(ref["alpha"]),
            "setting": " ".join([setting, *extra]), "algorithm": ref["algorithm"],
            **{d: ref[d] for d in DIM_LABELS if d in reference.columns},
            "paper_mean": float(ref["mean"]), "paper_std": float(ref["std"]),
        }
        cell = ours.get(int(index))
        if cell is None:
            row.update(our_mean=np.nan, our_std=np.nan, n_seeds=0, diff=np.nan, tolerance=np.nan, status="not run", protocol="")
        else:
            diff = float(cell["mean"]) - row["paper_mean"]
            tolerance = k * math.sqrt(row["paper_std"] ** 2 + float(cell["std"]) ** 2)
            protocol = cell.get("protocol", "") or ""
            row.update(our_mean=float(cell["mean"]), our_std=float(cell["std"]), n_seeds=int(cell["n_seeds"]), diff=diff,
                       tolerance=tolerance, status=cell_status(diff, tolerance, int(cell["n_seeds"]), protocol),
                       protocol=protocol)
        rows.append(row)
    return pd.DataFrame(rows)


def summary_counts(comparison: pd.DataFrame) -> pd.DataFrame:
    """Per table (and 'all'): how many cells have each status."""
    counts = pd.crosstab(comparison["table"], comparison["status"]).reindex(columns=list(STATUSES), fill_value=0)
    counts = counts.reindex(list(dict.fromkeys(comparison["table"])))
    counts.loc["all"] = counts.sum()
    counts["cells"] = counts.sum(axis=1)
    return counts.reset_index().rename(columns={"table": "table"})


def _pm(mean: float, std: float, n_seeds: int = PAPER_SEEDS) -> str:
    """'mean ± std', 'mean' for one seed (no spread to show), '—' for no value."""
    if math.isnan(mean):
        return "—"
    return f"{mean:.2f}" if n_seeds == 1 else f"{mean:.2f} ± {std:.2f}"


def comparison_markdown(comparison: pd.DataFrame, k: float, experiments: Sequence[str] = ()) -> str:
    counts = summary_counts(comparison)
    lines = [
        "# Our results next to the paper's",
        "",
        f"Every cell of the paper's Tables 2-7 (reference CSV), the paper's mean ± std next to ours (best test accuracy, %, "
        f"mean ± population std over seeds). A cell at the paper's protocol with at least {MIN_SEEDS} seeds *agrees* when "
        f"|ours − paper| ≤ {format_number(k)}·√(std_paper² + std_ours²) and *disagrees* otherwise. *Reduced protocol*: not "
        f"comparable, because our runs differ from the paper's protocol outside the table's swept dimension or have fewer "
        f"than {MIN_SEEDS} seeds (the *protocol* column says how; the difference is shown for information only). "
        "*Not run*: we have no such cell (experiment not in this config, or dataset / swept value not run).",
        "",
        f"Experiments in this config: {', '.join(experiments) if experiments else '(none)'}.",
        "",
        "## Summary",
        "",
        "| table | cells | agree | disagree | reduced protocol (not comparable) | not run |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for rec in counts.to_dict("records"):
        name = f"**{rec['table']}**" if rec["table"] == "all" else rec["table"]
        lines.append(f"| {name} | {rec['cells']} | {rec['agree']} | {rec['disagree']} | {rec['reduced protocol']} | {rec['not run']} |")
    for table, group in comparison.groupby("table", sort=False):
        lines += ["", f"## {table}", "", "| setting | method | paper | ours | seeds | diff | tolerance | status | protocol |",
                  "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | --- |"]
        for rec in group.to_dict("records"):
            diff = "" if math.isnan(rec["diff"]) else f"{rec['diff']:+.2f}"
            tol = "" if math.isnan(rec["tolerance"]) else f"{rec['tolerance']:.2f}"
            lines.append(f"| {rec['setting']} | {rec['algorithm']} | {_pm(rec['paper_mean'], rec['paper_std'])} | "
                         f"{_pm(rec['our_mean'], rec['our_std'], rec['n_seeds'])} | {rec['n_seeds'] or ''} | {diff} | {tol} | {rec['status']} | "
                         f"{rec.get('protocol') or ''} |")
    return "\n".join(lines) + "\n"


def comparison_latex(comparison: pd.DataFrame, k: float) -> str:
    """Every paper cell next to ours as a LaTeX longtable, through the reports' one writer."""
    counts = summary_counts(comparison).set_index("table").loc["all"]
    rows = []
    previous = None
    for rec in comparison.to_dict("records"):
        diff = "" if math.isnan(rec["diff"]) else f"{rec['diff']:+.2f}"
        rows.append({"Table": rec["table"] if rec["table"] != previous else "", "Setting": rec["setting"], "Method": rec["algorithm"],
                     "Paper": _pm(rec["paper_mean"], rec["paper_std"]), "Ours": _pm(rec["our_mean"], rec["our_std"], rec["n_seeds"]),
                     "Seeds": str(rec["n_seeds"] or ""), "Δ": diff, "Status": rec["status"]})
        previous = rec["table"]
    caption = (f"The paper's numbers next to ours (best test accuracy, %, mean ± std over seeds). A cell agrees when "
               f"|ours − paper| ≤ {format_number(k)}·√(std_paper² + std_ours²) at the paper's protocol with at least "
               f"{MIN_SEEDS} seeds. {counts['agree']} agree, {counts['disagree']} disagree, {counts['reduced protocol']} at a "
               f"reduced protocol (not comparable), {counts['not run']} not run.")
    return latex_table(pd.DataFrame(rows), caption, "tab:comparison", column_format="lllrrrrl", long=True, size="small",
                       comment="Generated by `fedgmh compare`.")


def write_comparison(results_paths: Sequence[Path | str], reference_path: Path | str, out_md: Path | str,
                     out_tex: Path | str | None = None, out_csv: Path | str | None = None, k: float = 2.0,
                     other_paths: Sequence[Path | str] = (), out_other_csv: Path | str | None = None) -> pd.DataFrame:
    """Summarize every experiment of the results files, compare with the reference, write the report.

    `other_paths`: reference values of other documents (`fedgmh.report.others`), listed after the
    paper's cells in their own section of the Markdown and LaTeX (with their own summary) and in
    `out_other_csv`; the paper's comparison (the returned frame, `out_csv`) does not include them."""
    from fedgmh.report.others import compare_other_references, others_latex, others_markdown

    if not k > 0:
        raise UserError(f"k must be positive, got {k}")
    reference = read_reference(reference_path)
    frames, experiments, all_results = [], [], []
    for path in results_paths:
        results = read_results(path)
        all_results.append(results)
        for experiment in dict.fromkeys(results["experiment"]):
            experiments.append(experiment)
            frames.append(summarize(results, experiment, PAPER_ACCURACY)[0])  # the paper reports the best
    cells = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    comparison = compare_with_paper(cells, reference, k=k)
    others = compare_other_references(all_results, other_paths) if other_paths else None
    markdown = comparison_markdown(comparison, k, experiments)
    latex = comparison_latex(comparison, k)
    if others is not None and len(others):
        markdown += others_markdown(others)
        latex += "\n" + others_latex(others)
    write_text(markdown, out_md)
    if out_tex:
        write_text(latex, out_tex)
    if out_csv:
        write_csv(comparison, out_csv)
    if out_other_csv:
        if others is None:
            raise UserError("--other-csv needs --other (the other documents' reference values)")
        write_csv(others, out_other_csv)
    return comparison
