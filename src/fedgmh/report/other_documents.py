"""Reference values of the other source documents (e.g. CE-pFL's Table 1, seed 004) next to ours.

A reference CSV (reference/cepfl_paper_table1.csv) has one row per reported number: document, item
(where in the document), dataset, clients, join_ratio, classes_per_client (empty: not stated),
algorithm (our registry name), paper_name, quantity, target, value (empty: '–' in the document),
unit, note. Quantities:

- `uploads_to_target`: cumulative client uploads until the mean client accuracy reaches `target` %
  (`fedgmh.report.to_target.run_uploads` of each run; the median over seeds);
- `mean_client_accuracy`: the best mean client accuracy (%) over the rounds (metrics.csv
  `test_acc_mean`), the mean over seeds.

Ours come from the runs of the configured experiments with the same dataset, clients, join ratio,
algorithm (and classes per client when given). A cell is 'not run' without such runs; otherwise
'not comparable': these documents give no spread over seeds and use their own models and protocols,
so ours is shown next to theirs without an agreement test. These cells are counted in their own
summary, apart from the FedGMH tables' comparison.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from fedgmh.errors import UserError
from fedgmh.report.latex import latex_table
from fedgmh.report.labels import format_number
from fedgmh.report.paper import reference_dataset
from fedgmh.report.to_target import NEVER, run_uploads
from fedgmh.report.parsing import norm_name

OTHER_COLUMNS = ("document", "item", "dataset", "clients", "join_ratio", "algorithm", "quantity", "target", "value", "unit")
QUANTITIES = ("uploads_to_target", "mean_client_accuracy")
OTHER_STATUSES = ("not comparable", "not run")


def read_other_reference(path: Path | str) -> pd.DataFrame:
    """A reference CSV of another document, checked."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"reference values {path} not found")
    try:
        frame = pd.read_csv(path, encoding="utf-8", dtype={"document": str})
    except (UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as err:
        raise UserError(f"reference values {path} are not a CSV table ({' '.join(str(err).split())[:200]})") from None
    absent = [c for c in OTHER_COLUMNS if c not in frame.columns]
    if absent:
        raise UserError(f"reference values {path} lack column(s) {', '.join(absent)}; see reference/cepfl_paper_table1.csv")
    unknown = sorted(set(frame["quantity"]) - set(QUANTITIES))
    if unknown:
        raise UserError(f"reference values {path}: unknown quantity {', '.join(map(str, unknown))}; known: {', '.join(QUANTITIES)}")
    return frame


def _matching_runs(results: pd.DataFrame, ref: dict) -> pd.DataFrame:
    if results.empty:
        return results
    keep = (results["dataset"].map(norm_name) == norm_name(ref["dataset"])) & (results["algorithm"] == ref["algorithm"])
    keep &= pd.to_numeric(results["clients"], errors="coerce") == float(ref["clients"])
    keep &= np.isclose(pd.to_numeric(results["join_ratio"], errors="coerce"), float(ref["join_ratio"]))
    if "classes_per_client" in ref and not pd.isna(ref["classes_per_client"]):
        keep &= pd.to_numeric(results["classes_per_client"], errors="coerce") == float(ref["classes_per_client"])
    return results[keep].drop_duplicates("run_dir")


def _ours(runs: pd.DataFrame, ref: dict) -> tuple[str, str]:
    """(our value as text, a note) from the matching runs' metrics."""
    values, lacking = [], []
    for run_dir in runs["run_dir"]:
        metrics = pd.read_csv(Path(run_dir) / "metrics.csv").sort_values("round")
        if "test_acc_mean" not in metrics.columns or (ref["quantity"] == "uploads_to_target" and "clients_up" not in metrics.columns):
            lacking.append(str(run_dir))
            continue
        accuracy = 100.0 * metrics["test_acc_mean"].to_numpy()
        if ref["quantity"] == "uploads_to_target":
            values.append(run_uploads(metrics["round"].to_numpy(), accuracy, metrics["clients_up"].to_numpy(), float(ref["target"])))
        else:
            values.append(float(accuracy.max()))
    note = f"{len(lacking)} run(s) without clients_up/test_acc_mean" if lacking else ""
    if not values:
        return "", note
    if ref["quantity"] == "uploads_to_target":
        median = float(np.median(values))
        text = NEVER if math.isinf(median) else format_number(median)
        return text, "; ".join(filter(None, [f"median over {len(values)} seed(s)", note]))
    return f"{np.mean(values):.2f}", "; ".join(filter(None, [f"best round, mean over {len(values)} seed(s)", note]))


def compare_others(results: pd.DataFrame, reference: pd.DataFrame) -> pd.DataFrame:
    """One row per reference value: the document's value, ours (where we have runs) and a status."""
    rows = []
    for ref in reference.to_dict("records"):
        runs = _matching_runs(results, ref)
        ours, note = _ours(runs, ref) if len(runs) else ("", "")
        target = "" if pd.isna(ref["target"]) else format_number(float(ref["target"]))
        value = NEVER if pd.isna(ref["value"]) else format_number(float(ref["value"]))
        rows.append({
            "document": str(ref["document"]), "item": ref["item"], "dataset": reference_dataset(ref["dataset"]),
            "clients": int(ref["clients"]), "join_ratio": float(ref["join_ratio"]), "algorithm": ref["algorithm"],
            "paper_name": ref.get("paper_name", ref["algorithm"]), "quantity": ref["quantity"], "target": target,
            "unit": ref["unit"], "paper": value, "ours": ours, "n_runs": len(runs),
            "status": "not comparable" if len(runs) else "not run", "note": note,
        })
    return pd.DataFrame(rows)


def _what(rec: dict) -> str:
    if rec["quantity"] == "uploads_to_target":
        return f"uploads to {rec['target']} %"
    return "mean client accuracy (%)"


def _setting(rec: dict) -> str:
    return f"{rec['dataset']}, N={rec['clients']}, ρ={format_number(rec['join_ratio'])}"


def other_summary(comparison: pd.DataFrame) -> pd.DataFrame:
    labels = comparison["document"].astype(str) + " " + comparison["item"].astype(str)
    counts = pd.crosstab(labels, comparison["status"]).reindex(columns=list(OTHER_STATUSES), fill_value=0)
    counts = counts.reindex(list(dict.fromkeys(labels)))
    counts.loc["all"] = counts.sum()
    counts["cells"] = counts.sum(axis=1)
    return counts.reset_index(names="source")


def others_markdown(comparison: pd.DataFrame) -> str:
    """The section of comparison.md on the other documents' values (its own summary)."""
    lines = [
        "", "# Other source documents' reference values", "",
        "Numbers reported by the other source documents (e.g. CE-pFL's Table 1: cumulative client uploads to reach a "
        "target mean client accuracy), next to ours where this config has runs with the same dataset, number of "
        "clients, participation and method. *Not comparable*: ours is shown, but the document gives no spread over "
        "seeds and uses its own model and protocol. *Not run*: no such runs in this config (e.g. CIFAR-10 offline). "
        f"{NEVER}: never reached (or '–' in the document). These cells are not part of the summary above.",
        "", "## Summary (other documents)", "",
        "| source | cells | not comparable | not run |", "| --- | ---: | ---: | ---: |",
    ]
    for rec in other_summary(comparison).to_dict("records"):
        name = f"**{rec['source']}**" if rec["source"] == "all" else rec["source"]
        lines.append(f"| {name} | {rec['cells']} | {rec['not comparable']} | {rec['not run']} |")
    for (document, item), group in comparison.groupby(["document", "item"], sort=False):
        lines += ["", f"## {document} {item}", "", "| setting | method | quantity | paper | ours | runs | status | note |",
                  "| --- | --- | --- | ---: | ---: | ---: | --- | --- |"]
        for rec in group.to_dict("records"):
            lines.append(f"| {_setting(rec)} | {rec['paper_name']} ({rec['algorithm']}) | {_what(rec)} | {rec['paper']} | "
                         f"{rec['ours']} | {rec['n_runs'] or ''} | {rec['status']} | {rec['note']} |")
    return "\n".join(lines) + "\n"


def others_latex(comparison: pd.DataFrame) -> str:
    counts = other_summary(comparison).set_index("source").loc["all"]
    rows = [{"Source": f"{r['document']} {r['item']}", "Setting": _setting(r), "Method": r["paper_name"], "Quantity": _what(r),
             "Paper": r["paper"], "Ours": r["ours"] or "—", "Status": r["status"]} for r in comparison.to_dict("records")]
    caption = (f"Other source documents' reference values next to ours ({NEVER}: never reached). "
               f"{counts['not comparable']} not comparable (ours shown), {counts['not run']} not run.")
    return latex_table(pd.DataFrame(rows), caption, "tab:comparison-other", column_format="lllllrrl", long=True, size="small",
                       comment="Generated by `fedgmh compare --other`.")


def compare_other_references(results_frames: Sequence[pd.DataFrame], paths: Sequence[Path | str]) -> pd.DataFrame:
    frames = [f for f in results_frames if len(f)]
    results = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["dataset", "algorithm", "clients", "join_ratio", "classes_per_client", "run_dir"])
    parts = [compare_others(results, read_other_reference(path)) for path in paths]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
