"""The paper's claims under each reading of the protocol, with the robustness of every decided verdict:
claims.md (one row per claim, a verdict per reading) and one claims.csv per reading (`fedgmh claims`).

The rules and the claims' frames: `fedgmh.report.claims_report`; robust or fragile:
`fedgmh.report.robustness`; what it all means: docs/claims.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fedgmh.errors import UserError
from fedgmh.filing import parse_setting_id
from fedgmh.io import write_csv, write_text
from fedgmh.report import claims as kinds
from fedgmh.report.claim_file import Claim, read_claims
from fedgmh.report.outputs import check_outputs
from fedgmh.report.claims_report import (
    READING_NAMES, UNAVAILABLE, Runs, counts_text, evaluate_claims, read_frames,
)
from fedgmh.report.robustness import alternatives, robustness
from fedgmh.report.runs import read_curves, read_results
from fedgmh.report.summary import READINGS_OF_ACCURACY


def md_text(text: Any) -> str:
    """`text` for one cell of a Markdown table."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def _verdict_cell(rec: dict[str, Any]) -> str:
    """A reading's verdict as the first table shows it: bold, then robust or fragile (and what flips it)."""
    text = f"**{rec['verdict']}**"
    if rec["robustness"]:
        text += f", {rec['robustness']}" + (f": {rec['flips']}" if rec["flips"] else "")
        text += f" (not evaluated: {rec['untested']})" if rec["untested"] else ""
    return text


def claims_markdown(frames: dict[str, pd.DataFrame], parts: dict[str, dict[str, list[kinds.Part]]], title: str, source: str) -> str:
    """claims.md: one row per claim with its verdict under each reading (`frames`: reading -> `evaluate_claims`
    frame with the robustness columns, the first reading's evidence), then every comparison."""
    first = next(iter(frames))
    names = {reading: READING_NAMES.get(reading, reading) for reading in frames}
    lines = [f"# {title}", "",
             f"The paper's claims in our words ({source}), each tested with a stated rule (docs/claims.md): *holds*, *does not "
             "hold*, *inconclusive* (too few seeds, or the data decide neither way), *not run* (waiting for runs) or *"
             f"{UNAVAILABLE}* (the data cannot be obtained on the machines that made these records; the workflow downloads them "
             "where there is internet). A claim of several comparisons holds when each does and does not hold when one does not; "
             "its numbers are those of the comparison that decides it. Accuracies in percentage points, pooled over the test "
             "samples as the paper's numbers are (docs/verdicts.md).", "",
             "Each decided verdict is decided again with the other defensible choices (docs/claims.md, Robustness): the mean "
             "over clients instead of the pooled accuracy, the other reading's runs, the rule's other settings, each seed left "
             "out. *Robust*: every alternative was evaluated and none changes it (a seed left out where the rest can "
             "still decide, else every seed going the verdict's way); *fragile*: what flips it follows; *partly tested*: none flips it, but the alternatives listed "
             "could not be evaluated; *exact*: a computation.", ""]
    lines += [f"**{names[reading]}**: {counts_text(frame)}" + ("" if i == len(frames) - 1 else "  ") for i, (reading, frame)
              in enumerate(frames.items())]
    lines += ["", "| claim | where | what the paper says (our words) | test | " + " | ".join(names.values())
              + f" | evidence ({names[first]}) |", "| --- | --- | --- | --- | " + " | ".join("---" for _ in frames) + " | --- |"]
    by_reading = {reading: frame.set_index("id", drop=False).to_dict("index") for reading, frame in frames.items()}
    for rec in frames[first].to_dict("records"):
        evidence = rec["evidence"] + (f" — runs differ from the paper's protocol: {rec['protocol']}" if rec["protocol"] else "")
        verdicts = " | ".join(md_text(_verdict_cell(by_reading[reading][rec["id"]])) for reading in frames)
        lines.append(f"| `{rec['id']}` | {md_text(rec['where'])} | {md_text(rec['claim'])} | {rec['test']} | {verdicts} | "
                     f"{md_text(evidence)} |")
    lines += ["", "## Every comparison", ""]
    for rec in frames[first].to_dict("records"):
        lines += [f"### `{rec['id']}`", "", f"{rec['claim']} ({rec['where']}; test: {rec['test']}).", ""]
        for reading in frames:
            row = by_reading[reading][rec["id"]]
            lines += [f"**{names[reading]}: {row['verdict']}** ({row['parts']}; "
                      f"on the mean over clients: {row['verdict_client_mean']})"
                      + (f"; {row['robustness']}" if row["robustness"] else "")
                      + (f": flipped by {row['flips']}" if row["flips"] else "")
                      + (f"; evaluated: {row['tested']}" if row["robustness"] and row["tested"] else "")
                      + (f"; not evaluated: {row['untested']}" if row["robustness"] and row["untested"] else "")
                      + (f"; not decided under this reading until these run: {row['not_run']}"
                         if row["verdict"] == kinds.INCONCLUSIVE and row["not_run"] else "") + ".", ""]
            if row["protocol"]:
                lines += [f"Runs differ from the paper's protocol: {row['protocol']}.", ""]
            if row["verdict"] in (kinds.NOT_RUN, UNAVAILABLE):
                continue
            lines += ["| comparison | verdict | evidence |", "| --- | --- | --- |"]
            lines += [f"| {md_text(p.label)} | {p.verdict} | {md_text(p.evidence)} |" for p in parts[reading][rec["id"]]]
            lines.append("")
    return "\n".join(lines)


def unavailable(frame: pd.DataFrame, claims: Sequence[Claim], runs: Runs, datasets: Sequence[str]) -> pd.DataFrame:
    """`frame` with the claims not run for want of data that cannot be obtained (each cell they miss of
    one of `datasets`, e.g. CIFAR-10 offline) as UNAVAILABLE: "not run" then means waiting for runs."""
    if not datasets:
        return frame
    out = frame.copy()
    for i, claim in enumerate(claims):
        missing = [need for need in claim.needs() if not runs.has(need)]
        if out.at[i, "verdict"] == kinds.NOT_RUN and missing and all(_dataset(need.setting) in datasets for need in missing):
            out.at[i, "verdict"] = UNAVAILABLE
    return out


def _dataset(setting: str) -> str | None:
    """The dataset of a claim's setting id; None for a cell that is no setting id (it never runs)."""
    try:
        return parse_setting_id(setting).dataset
    except ValueError:
        return None


def decide_claims(claims: Sequence[Claim], readings: dict[str, Runs],
                  datasets_unavailable: Sequence[str] = ()) -> tuple[dict[str, pd.DataFrame], dict[str, dict[str, list[kinds.Part]]]]:
    """Per reading (the first is the one the report's evidence is of): the claims' frame (COLUMNS, with
    the verdict on the mean over clients and the robustness of each decided verdict) and comparisons."""
    frames, parts = {}, {}
    for reading, runs in readings.items():
        frame, parts[reading] = evaluate_claims(claims, runs)
        others = [(f"{READING_NAMES.get(name, name)}", other) for name, other in readings.items() if name != reading]
        alternative = alternatives(claims, runs, others[0] if others else None)
        robust = robustness(claims, dict(zip(frame["id"], frame["verdict"])), parts[reading], alternative,
                            {claim.id: runs.claim_seeds(claim) for claim in claims}, others[0][0] if others else None)
        clients = alternative.get(READINGS_OF_ACCURACY["best_clients"][1], parts[reading])
        frame["verdict_client_mean"] = [kinds.combine(clients[claim_id]) for claim_id in frame["id"]]
        frame["robustness"] = [robust[claim_id].status for claim_id in frame["id"]]
        frame["flips"] = ["; ".join(robust[claim_id].flips) for claim_id in frame["id"]]
        frame["untested"] = [", ".join(robust[claim_id].untested) for claim_id in frame["id"]]
        frame["tested"] = [", ".join(robust[claim_id].tested) for claim_id in frame["id"]]
        frames[reading] = unavailable(frame, claims, runs, datasets_unavailable)
    return frames, parts


def read_costs(path: Path | str) -> pd.DataFrame:
    """costs.csv of `fedgmh costs`, checked: the computed costs the cost claims are judged on."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"costs table {path} not found; make it with `fedgmh costs --out {path}`")
    frame = pd.read_csv(path)
    absent = [c for c in ("kind", "dataset", "algorithm", "preset", "quantity", "analytic", "note") if c not in frame.columns]
    if absent:
        raise UserError(f"costs table {path} lacks column(s) {', '.join(absent)}; was it written by `fedgmh costs`?")
    values = pd.to_numeric(frame["analytic"], errors="coerce")
    bad = (frame["kind"] == "algorithm") & ~np.isfinite(values)
    if bad.any():
        raise UserError(f"costs table {path}: row {int(bad.to_numpy().argmax()) + 1} below the header has no finite analytic cost")
    return frame


def write_claims(claims_path: Path | str, readings: dict[str, tuple[Sequence[Path | str], Sequence[Path | str]]], out_md: Path | str,
                 out_csvs: dict[str, Path | str], title: str = "The paper's claims", datasets_unavailable: Sequence[str] = (),
                 costs: Path | str | None = None) -> dict[str, pd.DataFrame]:
    """`readings`: reading -> (results CSVs, curves CSVs); `out_csvs`: reading -> its claims.csv; `costs`:
    costs.csv of `fedgmh costs` (the cost claims: not run without it)."""
    check_outputs(out_md, *out_csvs.values())
    claims = read_claims(claims_path)
    cost_table = read_costs(costs) if costs else None
    runs = {reading: Runs(read_frames(results, read_results), read_frames(curves, read_curves), costs=cost_table)
            for reading, (results, curves) in readings.items()}
    frames, parts = decide_claims(claims, runs, datasets_unavailable)
    write_text(claims_markdown(frames, parts, title, Path(claims_path).name) + "\n", out_md)
    for reading, path in out_csvs.items():
        write_csv(frames[reading], path)
    return frames
