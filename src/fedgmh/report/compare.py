"""The paper's numbers next to ours: per table cell, and the whole comparison report."""

from __future__ import annotations

import numpy as np
import pandas as pd

from fedgmh.errors import UserError
from fedgmh.report.names import _norm_name

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

