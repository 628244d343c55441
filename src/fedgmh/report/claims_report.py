"""The paper's claims against a config's runs: each claim's verdict and the numbers behind it.

`evaluate_claims` reads what each claim needs (`Claim.needs`) from the aggregated results (the
best accuracy of every run: the paper's claims are about it) and curves (`fedgmh aggregate`), makes
the comparisons of the claim's kind (`fedgmh.report.claim_kinds`, each decided by a rule of
`fedgmh.report.claims`), and returns one row per claim (claims.csv) with its comparisons (`Part`s,
listed in claims.md). A comparison whose cells this config did not run is "not run"; a trend or
bound with some of its points missing is at best inconclusive; a refutation is tested at ALPHA over
the number of the claim's comparisons that make a test (Bonferroni: one not run, or with too few
seeds, cannot refute). Where the runs differ from the paper's protocol (rounds, clients, E, rho,
batch, lr), the `protocol` column says how: the verdict is then about those runs, not the paper's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fedgmh.errors import UserError
from fedgmh.report import claims as kinds
from fedgmh.report.claim_file import Claim
from fedgmh.report.claim_kinds import Comparison, Need, claim_kinds
from fedgmh.report.claim_kinds.cost import QUANTITY
from fedgmh.report.latex import latex_table
from fedgmh.report.labels import SWEEP_DIMS, format_number
from fedgmh.report.paper import PAPER_ACCURACY, PAPER_CLIENTS, PAPER_PROTOCOL, PAPER_ROUNDS, PAPER_SWEEPS
from fedgmh.report.to_target import accuracy_by_seed, first_round_bounds
from fedgmh.report.summary import ACCURACIES, READINGS_OF_ACCURACY, accuracy_column

COLUMNS = ["id", "where", "test", "claim", "verdict", "parts", "deciding_part", "measure", "estimate", "ci_low", "ci_high",
           "p_value", "n_seeds", "reference", "protocol", "not_run", "evidence"]
#: a claim not run because its data cannot be obtained here (`fedgmh claims --unavailable`), not for want of runs
UNAVAILABLE = "data unavailable offline"
#: the readings of the paper's protocol whose runs a claims report can hold (`fedgmh.report.protocol.READINGS`)
READING_NAMES = {"paper": "the paper's text", "official": "PFLlib's reading"}
CELL_KEY = ["experiment", "setting", "algorithm"]


class Runs:
    """The runs' best accuracies (percent, per seed) and curves, by (experiment, setting, algorithm), on
    one reading of the paper's accuracy (`accuracy`, a READINGS_OF_ACCURACY key). A run without that
    accuracy (a record older than its column) is left out: no verdict from a NaN."""

    def __init__(self, results: pd.DataFrame | None, curves: pd.DataFrame | None, accuracy: str = PAPER_ACCURACY,
                 costs: pd.DataFrame | None = None) -> None:
        self.values: dict[tuple, dict[int, float]] = {}
        self.rows: dict[tuple, list[dict[str, Any]]] = {}
        self.frames = results, curves
        self.costs = costs
        self.accuracy = accuracy
        curve_column = READINGS_OF_ACCURACY[accuracy][0]
        if results is not None and not results.empty:
            column = accuracy_column(results, accuracy) if accuracy == PAPER_ACCURACY or ACCURACIES[accuracy][0] in results else None
            twice = results[results.duplicated(CELL_KEY + ["seed"], keep=False)]
            if not twice.empty:
                first = twice.iloc[0]
                raise UserError(f"the results hold run {first['experiment']}/{first['setting']}/{first['algorithm']} seed "
                                f"{first['seed']} twice; give each experiment's results once")
            for rec in results.to_dict("records"):
                key = (rec["experiment"], rec["setting"], rec["algorithm"])
                self.rows.setdefault(key, []).append(rec)
                if column is not None and not pd.isna(rec[column]):
                    self.values.setdefault(key, {})[int(rec["seed"])] = 100.0 * float(rec[column])
        if curves is not None and not curves.empty:
            twice = curves[curves.duplicated(CELL_KEY + ["seed", "round"], keep=False)]
            if not twice.empty:
                first = twice.iloc[0]
                raise UserError(f"the curves hold round {first['round']} of run {first['experiment']}/{first['setting']}/"
                                f"{first['algorithm']} seed {first['seed']} twice; give each experiment's curves once")
        groups = [] if curves is None or curves.empty or curve_column not in curves else [
            (key, frame.dropna(subset=[curve_column])) for key, frame in curves.groupby(CELL_KEY, sort=False)]
        groups = [(key, frame) for key, frame in groups if not frame.empty]
        self.curves = {key: accuracy_by_seed(frame, curve_column) for key, frame in groups}
        # the paper's number of rounds for the curve's dataset (inf: unknown)
        self.paper_rounds = {key: float(PAPER_ROUNDS.get(str(frame["dataset"].iloc[0]), math.inf)) if "dataset" in frame
                             else math.inf for key, frame in groups}

    def variant(self, accuracy: str | None = None, without_seed: int | None = None) -> Runs:
        """The same runs on another accuracy, or without one seed's runs."""
        results, curves = (None if frame is None else frame[frame["seed"] != without_seed] for frame in self.frames)
        return Runs(results, curves, accuracy or self.accuracy, self.costs)

    def cost(self, quantity: str, dataset: str) -> tuple[float, str] | None:
        """(KB, |S_m|) one participating client of `dataset` sends (`<algorithm>.up`) or receives (`.down`)
        a round with the paper preset, from `fedgmh costs`' table; None: not in it."""
        if self.costs is None:
            return None
        match = QUANTITY.fullmatch(quantity)
        if match["way"] == "compute":  # one forward of phi over an epoch's samples: the model's figure
            rows = self.costs[(self.costs["kind"] == "model") & (self.costs["dataset"] == dataset)
                              & (self.costs["quantity"] == "prototype_forward_per_epoch")]
            return (float(rows["analytic"].iloc[0]), "") if not rows.empty else None
        way = "up_per_participant" if match["way"] == "up" else "down_per_participant"
        rows = self.costs[(self.costs["kind"] == "algorithm") & (self.costs["dataset"] == dataset) & (self.costs["preset"] == "paper")
                          & (self.costs["algorithm"] == match["algorithm"]) & (self.costs["quantity"] == way)]
        if rows.empty:
            return None
        note = str(rows["note"].iloc[0]) if not pd.isna(rows["note"].iloc[0]) else ""
        return float(rows["analytic"].iloc[0]), note.removeprefix("|S_m| = ")

    def seeds(self) -> list[int]:
        return sorted({seed for cell in self.values.values() for seed in cell} | {int(s) for acc in self.curves.values() for s in acc})

    def cell(self, need: Need) -> dict[int, float] | None:
        return self.values.get(need[:3])

    def curve(self, need: Need) -> pd.DataFrame | None:
        """Accuracy in percent, round x seed (`accuracy_by_seed`)."""
        return self.curves.get(need[:3])

    def seed_curves(self, need: Need) -> kinds.Curve | None:
        """Each seed's evaluated rounds and accuracy (percent)."""
        acc = self.curve(need)
        return None if acc is None else {int(s): (acc[s].dropna().index.to_numpy(), acc[s].dropna().to_numpy()) for s in acc.columns}

    def first_rounds(self, need: Need, target: float) -> tuple[kinds.Round, dict[int, kinds.Round]] | None:
        """Where the mean-over-seeds curve (the rounds every seed evaluated) and each seed's curve first
        reach `target` percent (`first_round_bounds`); None: no curves."""
        acc = self.curve(need)
        if acc is None:
            return None
        horizon, mean = self.paper_rounds[need[:3]], acc.dropna().mean(axis=1)
        return (first_round_bounds(mean.index.to_numpy(), mean.to_numpy(), target, horizon),
                {s: first_round_bounds(rounds, values, target, horizon) for s, (rounds, values) in self.seed_curves(need).items()})

    def claim_seeds(self, claim: Claim) -> set[int]:
        """The seeds of the runs the claim reads."""
        found: set[int] = set()
        for need in claim.needs():
            if need.curve and need[:3] in self.curves:
                found |= {int(s) for s in self.curves[need[:3]].columns}
            elif not need.curve:
                found |= set(self.values.get(need[:3], {}))
        return found

    def has(self, need: Need) -> bool:
        return need[:3] in (self.curves if need.curve else self.values)

    def protocol(self, needs: Sequence[Need]) -> str:
        """How the runs of `needs` differ from the paper's protocol ('' where they do not, or are unknown)."""
        notes: list[str] = []
        for need in needs:
            for rec in self.rows.get(need[:3], []):
                notes += _differences(rec)
        return ", ".join(dict.fromkeys(notes))


def _differences(rec: dict[str, Any]) -> list[str]:
    out = []
    rounds = PAPER_ROUNDS.get(str(rec.get("dataset")))
    if rounds and _known(rec.get("rounds")) and int(rec["rounds"]) != rounds:
        out.append(f"{int(rec['rounds'])} rounds (paper {rounds})")
    if _known(rec.get("clients")) and int(rec["clients"]) != PAPER_CLIENTS:
        out.append(f"{int(rec['clients'])} clients (paper {PAPER_CLIENTS})")
    for key, paper in PAPER_PROTOCOL.items():
        if PAPER_SWEEPS.get(rec["experiment"]) != key and _known(rec.get(key)) and not np.isclose(float(rec[key]), paper):
            out.append(f"{SWEEP_DIMS[key][1]}={format_number(rec[key])} (paper {format_number(paper)})")
    return out


def _known(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def _run_comparisons(comparisons: Sequence[Comparison]) -> list[kinds.Part]:
    """A claim's comparisons, refuting by Holm's step-down over its k comparisons, k fixed by the
    claim's definition (those not run, or with too few seeds, count too): the smallest p-value against
    the claim refutes below ALPHA / k, the next below ALPHA / (k - 1), and so on while each refutes."""
    k = max(len(comparisons), 1)
    first = [compare(kinds.ALPHA / k) for compare in comparisons]
    order = sorted((i for i, part in enumerate(first) if not math.isnan(part.p_against)), key=lambda i: first[i].p_against)
    levels: dict[int, float] = {}
    stopped = None  # once one does not refute, none after it does
    for step, i in enumerate(order):
        level = kinds.ALPHA / (k - step)
        if stopped is None and not first[i].p_against < level:
            stopped = level
        levels[i] = level if stopped is None else stopped
    return [comparisons[i](levels[i]) if i in levels else part for i, part in enumerate(first)]


def _row(claim: Claim, parts: list[kinds.Part], runs: Runs) -> dict[str, Any]:
    verdict, part = kinds.combine(parts), kinds.deciding(parts)
    counts = pd.Series([p.verdict for p in parts]).value_counts()
    missing = [need for need in claim.needs() if not runs.has(need)]
    by_cell: dict[str, list[str]] = {}
    for need in missing:
        by_cell.setdefault(need.cell, []).append(need.algorithm)
    return {
        "id": claim.id, "where": claim.where, "test": claim.test, "claim": claim.text, "verdict": verdict,
        "parts": ", ".join(f"{counts[v]} {v}" for v in kinds.VERDICTS if v in counts) + f" of {len(parts)}",
        "deciding_part": part.label if part else "", "measure": part.measure if part else "",
        **{column: round(getattr(part, field), 4) if part else math.nan
           for column, field in (("estimate", "estimate"), ("ci_low", "low"), ("ci_high", "high"), ("reference", "reference"))},
        "p_value": float(f"{part.p_value:.4g}") if part else math.nan, "n_seeds": part.n_seeds if part else 0,
        "protocol": runs.protocol([need for need in claim.needs() if runs.has(need)]),
        "not_run": "; ".join(f"{cell} ({', '.join(algs)})" for cell, algs in by_cell.items()),
        "evidence": f"{part.label}: {part.evidence}" if part else "",
    }


def evaluate_claims(claims: Sequence[Claim], runs: Runs, rules: kinds.Rules = kinds.Rules()) -> tuple[pd.DataFrame, dict[str, list[kinds.Part]]]:
    """One row per claim (COLUMNS) and every claim's comparisons, by claim id."""
    parts = {claim.id: _run_comparisons(claim_kinds()[claim.test].comparisons(claim.spec, runs, rules)) for claim in claims}
    rows = [_row(claim, parts[claim.id], runs) for claim in claims]
    return pd.DataFrame(rows, columns=COLUMNS), parts


# ----------------------------------------------------------------------------- claims.csv and the LaTeX section


def counts_text(frame: pd.DataFrame) -> str:
    counts = frame["verdict"].value_counts()
    shown = [v for v in (*kinds.VERDICTS, UNAVAILABLE) if v != UNAVAILABLE or counts.get(v, 0)]
    decided = frame[frame["verdict"].isin([kinds.HOLDS, kinds.FAILS])]
    statuses = decided["robustness"].value_counts() if "robustness" in frame else pd.Series(dtype=int)
    kinds_of = ", ".join(f"{statuses.get(status, 0)} {status}" for status in ("exact", "robust", "fragile", "partly tested"))
    return (", ".join(f"{counts.get(v, 0)} {v}" for v in shown) + f" (of {len(frame)})"
            + (f"; of the {len(decided)} decided, {kinds_of}" if len(decided) and "robustness" in frame else ""))


#: the claims table's columns: ragged right, no word broken by a hyphen ("sec- tion"); needs the array package.
#: A claim's id breaks only after one of its own hyphens (t2-fedgh-fluctuates-cifar100 is wider than its column).
UNBROKEN = r">{\raggedright\arraybackslash\hyphenpenalty=10000\exhyphenpenalty=10000}"
AT_HYPHENS = r">{\raggedright\arraybackslash\hyphenpenalty=10000\exhyphenpenalty=0}"
CLAIM_WIDTHS = ("3.4cm", "2.2cm", "1.6cm", "8cm")


def claims_latex(frame: pd.DataFrame) -> str:
    """The claims' verdicts as a LaTeX longtable (one row per claim), for report.tex."""
    table = pd.DataFrame({"Claim": frame["id"], "Where": frame["where"], "Verdict": frame["verdict"],
                          "Evidence": [e + (f" (runs differ from the paper's protocol: {p})" if p else "")
                                       for e, p in zip(frame["evidence"], frame["protocol"])]})
    caption = (f"The paper's claims tested on this config's runs: {counts_text(frame)}. Each claim's text and every "
               "comparison: claims.md; the rules: docs/claims.md.")
    return latex_table(table, caption, "tab:claims", column_format="".join((AT_HYPHENS if i == 0 else UNBROKEN) + f"p{{{w}}}"
                                                                  for i, w in enumerate(CLAIM_WIDTHS)),
                       long=True, size="small",
                       comment="Generated by `fedgmh claims`.")


def read_claims_table(path: Path | str) -> pd.DataFrame:
    """A claims.csv written by `fedgmh claims`, checked."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"claims table {path} not found; make it with `fedgmh claims --csv {path}`")
    frame = pd.read_csv(path, dtype={"protocol": str, "evidence": str}, keep_default_na=False)
    absent = [c for c in COLUMNS if c not in frame.columns]
    if absent:
        raise UserError(f"claims table {path} lacks column(s) {', '.join(absent)}; was it written by `fedgmh claims`?")
    return frame


def read_frames(paths: Sequence[Path | str], reader) -> pd.DataFrame | None:
    frames = [reader(path) for path in paths]
    return pd.concat(frames, ignore_index=True) if frames else None


