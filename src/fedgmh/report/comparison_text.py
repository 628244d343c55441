"""The comparison with the paper as text: comparison.md (summary, how to read it, one table per
paper table) and comparison.tex (one longtable). The numbers: `fedgmh.report.compare`; what they
mean: docs/verdicts.md."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import pandas as pd

from fedgmh.report.latex import latex_table
from fedgmh.report.labels import format_number
from fedgmh.report.protocol import READINGS
from fedgmh.report.verdicts import INCONCLUSIVE, MIN_SEEDS, NOT_REPRODUCED, REPRODUCED

DOCS = "docs/verdicts.md"


def _pm(mean: float, std: float, n_seeds: int | None = None) -> str:
    """'mean ± std' (+ ' (n)' for ours), 'mean (1)' for one seed (no spread to show), '—' for no value."""
    if math.isnan(mean):
        return "—"
    text = f"{mean:.2f}" if n_seeds == 1 or math.isnan(std) else f"{mean:.2f} ± {std:.2f}"
    return text if n_seeds is None else f"{text} ({n_seeds})"


def _p(value: float) -> str:
    if math.isnan(value):
        return ""
    return "<0.001" if value < 0.001 else f"{value:.3f}"


def metrics_differ(rec: dict) -> bool:
    """Whether a cell judged on both accuracies gets another verdict on each."""
    judged = (REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE)
    return rec["status"] in judged and rec.get("clients_status") in judged and rec["status"] != rec["clients_status"]


def _clients(rec: dict) -> dict[str, str]:
    """The cell on the mean over clients: ours, the difference and the verdict ('differs' where the
    pooled accuracy's verdict is another); empty where the comparison has no such columns."""
    if "clients_status" not in rec:
        return {"ours": "", "diff": "", "verdict": ""}
    n = int(rec["clients_n_seeds"])
    return {"ours": _pm(rec["clients_our_mean"], rec["clients_our_std"], n or None) if n else "—",
            "diff": "" if math.isnan(rec["clients_diff"]) else f"{rec['clients_diff']:+.2f}",
            "verdict": rec["clients_status"] + (" (**differs**)" if metrics_differ(rec) else "")}


def _cells(rec: dict) -> dict[str, str]:
    """One comparison row as the texts both reports show."""
    judged = not math.isnan(rec["p_tost"])
    return {
        "paper": _pm(rec["paper_mean"], rec["paper_std"]),
        "ours": _pm(rec["our_mean"], rec["our_std"], rec["n_seeds"] or None) if rec["n_seeds"] else "—",
        "diff": "" if math.isnan(rec["diff"]) else f"{rec['diff']:+.2f}",
        "ci": f"[{rec['ci_low']:+.2f}, {rec['ci_high']:+.2f}]" if judged else "",
        "margin": f"±{format_number(rec['margin'])}" if judged else "",
        "p_tost": _p(rec["p_tost"]), "p_welch": _p(rec["p_welch"]),
    }


def how_to_read(margin: float, alpha: float, reading: str) -> str:
    level = format_number(round(100 * (1 - 2 * alpha), 6))
    return (
        f"**How to read this** ({DOCS}): *diff* is ours − paper (points); *CI* its {level} % Welch interval (sample stds; the "
        f"paper's from its population std over 5 seeds, × √(5/4)). A cell at the paper's protocol with at least {MIN_SEEDS} "
        f"distinct seeds is *reproduced* when the whole interval lies inside ±{format_number(margin)} (equivalence by two "
        f"one-sided tests: *TOST p* < {format_number(alpha)}), *not reproduced* when it lies wholly beyond +"
        f"{format_number(margin)} or −{format_number(margin)} (the difference is shown to exceed the margin), *inconclusive* "
        "otherwise. *Welch p* tests \"no difference\": a reproduced cell with a small Welch p is within the margin yet "
        "measurably off the paper's mean. Not judged: *reduced protocol* (fewer seeds than "
        f"{MIN_SEEDS}, or another number of rounds, clients or local epochs, or another participation) and *other protocol* (batch size, lr, lr "
        "decay, evaluation or a method's options differ): the *protocol* column names each difference and the diff is "
        "for information only. *No reference*: the paper gives no number; *not run*: we have no such cell. The paper's "
        f"protocol is read as {READINGS[reading]}."
    )


def comparison_markdown(comparison: pd.DataFrame, counts: pd.DataFrame, margin: float, alpha: float, reading: str,
                        experiments: Sequence[str] = ()) -> str:
    statuses = [c for c in counts.columns if c not in ("table", "cells")]
    level = format_number(round(100 * (1 - 2 * alpha), 6))
    lines = [
        "# Our results next to the paper's", "",
        "Every cell of the paper's Tables 2-7 (reference CSV): the paper's mean ± std over its 5 seeds next to ours (best "
        "test accuracy, %; ± is the population std over seeds, the paper's convention; (n): our distinct seeds).", "",
        how_to_read(margin, alpha, reading), "",
        f"**Two accuracies** ({DOCS}): the paper's \"average accuracy of all clients\" is read as the accuracy pooled over the "
        "clients' test samples (*ours*, *verdict*: PFLlib's, and the paper's numbers match it), and as the unweighted mean of "
        "the clients' accuracies (*client mean*, judged the same way). The pooled one decides; **differs** marks a cell whose "
        "verdict is another on the mean over clients.", "",
        f"Experiments in this config: {', '.join(experiments) if experiments else '(none)'}.", "",
        "## Summary", "",
        "| table | cells | " + " | ".join(statuses) + " |", "| --- | ---: | " + " | ".join("---:" for _ in statuses) + " |",
    ]
    for rec in counts.to_dict("records"):
        name = f"**{rec['table']}**" if rec["table"] == "all" else rec["table"]
        lines.append(f"| {name} | {rec['cells']} | " + " | ".join(str(rec[s]) for s in statuses) + " |")
    lines += ["", _metrics_summary(comparison)]
    for table, group in comparison.groupby("table", sort=False):
        lines += ["", f"## {table}", "",
                  f"| setting | method | paper | ours (n) | diff | {level} % CI | margin | TOST p | Welch p | verdict | client mean (n) | "
                  "diff | verdict, client mean | protocol |",
                  "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | --- | --- |"]
        for rec in group.to_dict("records"):
            text, clients = _cells(rec), _clients(rec)
            lines.append(f"| {rec['setting']} | {rec['algorithm']} | {text['paper']} | {text['ours']} | {text['diff']} | {text['ci']} | "
                         f"{text['margin']} | {text['p_tost']} | {text['p_welch']} | {rec['status']} | {clients['ours']} | "
                         f"{clients['diff']} | {clients['verdict']} | {rec['protocol']} |")
    return "\n".join(lines) + "\n"


def _metrics_summary(comparison: pd.DataFrame) -> str:
    """The verdicts' counts on the mean over clients, and the cells whose verdict differs."""
    if "clients_status" not in comparison.columns:
        return ""
    counts = comparison["clients_status"].value_counts()
    judged = [s for s in (REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE) if counts.get(s)]
    differ = [f"{rec['setting']} {rec['algorithm']} ({rec['status']} pooled, {rec['clients_status']} client mean)"
              for rec in comparison.to_dict("records") if metrics_differ(rec)]
    return ("On the mean over clients: " + (", ".join(f"{counts[s]} {s}" for s in judged) or "no cell judged") + ". "
            + (f"The verdict differs in {len(differ)} cell{'s' if len(differ) != 1 else ''}: {'; '.join(differ)}." if differ else
               "No judged cell gets another verdict."))


def table_name(table: str) -> str:
    """'table2' -> 'Table 2' (the paper's name of one of its tables)."""
    return re.sub(r"^table(\d+)$", r"Table \1", str(table))


#: the comparison longtable's columns, narrow enough for the page: 5 pt between columns, the setting and the
#: verdict wrapped in columns of fixed width (ragged right; needs the array package)
_WRAPPED = r">{\raggedright\arraybackslash}p{%s}"
COMPARISON_COLUMNS = "@{}" + r"@{\hspace{5pt}}".join(
    ["l", _WRAPPED % "3.4cm", "l", "r", "r", "r", "r", "r", "r", _WRAPPED % "2.1cm"]) + "@{}"


def comparison_latex(comparison: pd.DataFrame, counts: pd.DataFrame, margin: float, alpha: float, reading: str,
                     summarised: str = "") -> str:
    """The paper's cells next to ours as a LaTeX longtable, through the reports' one writer; the
    cells of status `summarised` (the many 'not run' ones) are counted in a note, not listed."""
    total = counts.set_index("table").loc["all"]
    level = format_number(round(100 * (1 - 2 * alpha), 6))
    listed = comparison[comparison["status"] != summarised] if summarised else comparison
    rows, previous = [], None
    for rec in listed.to_dict("records"):
        text = _cells(rec)
        rows.append({"Table": table_name(rec["table"]) if rec["table"] != previous else "", "Setting": rec["setting"],
                     "Method": rec["algorithm"], "Paper": text["paper"], "Ours (n)": text["ours"], "Δ": text["diff"],
                     f"{level}% CI": text["ci"], "p TOST": text["p_tost"], "p Welch": text["p_welch"], "Verdict": rec["status"]})
        previous = rec["table"]
    tally = ", ".join(f"{total[s]} {s}" for s in counts.columns if s not in ("table", "cells") and total[s])
    caption = f"The paper's numbers next to ours (best test accuracy, %). {tally}."
    notes = [f"Mean ± population std over seeds; (n): our seeds. Δ = ours − paper with its {level}% Welch interval; "
             f"reproduced: the interval within ±{format_number(margin)} (TOST at α = {format_number(alpha)}), not reproduced: "
             f"wholly beyond it; judged at the paper's protocol (read as {READINGS[reading].split(' (')[0]}) with at least "
             f"{MIN_SEEDS} seeds, else not judged ({DOCS})."]
    hidden = comparison[comparison["status"] == summarised] if summarised else comparison.iloc[:0]
    if len(hidden):
        per_table = hidden.groupby("table", sort=False).size()
        notes.append(f"Not listed, {summarised} ({len(hidden)} cells, all in comparison.md): "
                     + ", ".join(f"{table_name(t)} {n}" for t, n in per_table.items()) + ".")
    return latex_table(pd.DataFrame(rows, columns=["Table", "Setting", "Method", "Paper", "Ours (n)", "Δ", f"{level}% CI", "p TOST",
                                                   "p Welch", "Verdict"]),
                       caption, "tab:comparison", column_format=COMPARISON_COLUMNS, long=True, size="footnotesize", notes=notes,
                       comment="Generated by `fedgmh compare`.")
