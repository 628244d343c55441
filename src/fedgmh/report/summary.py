"""Table cells: one row per (setting, algorithm or variant) of an experiment, mean ± std over seeds.

`summarize` is shared by the tables (`fedgmh.report.tables`) and the comparison with the paper
(`fedgmh.report.compare`). The accuracy of a run is one of ACCURACIES (default: the best over all
evaluated rounds, what the paper reports, section 3.1); the std is the population std (ddof=0).
A cell counts each seed once: the same run listed twice is one seed, two different accuracies of
one seed are an error.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pandas as pd

from fedgmh.errors import UserError
from fedgmh.cards import algorithm_name, algorithm_order
from fedgmh.report.labels import DATASET_ORDER, STD_DDOF, format_number
from fedgmh.report.paper import PAPER_ACCURACY, PAPER_SEEDS
from fedgmh.filing import assignment_of, dim_value, freeze, sweep_dimensions, variant_of
from fedgmh.report.settings import base_setting
from fedgmh.report.parsing import order_key

#: accuracy of a run -> (results.csv column, words for captions)
ACCURACIES: dict[str, tuple[str, str]] = {
    "best": ("best_test_acc", "best test accuracy (%) over all evaluated rounds"),
    "last": ("final_test_acc", "test accuracy (%) of the last round"),
    "last10": ("last10_test_acc", "mean test accuracy (%) of the last 10 evaluated rounds"),
    "best_clients": ("best_test_acc_mean", "best mean of the clients' test accuracies (%) over all evaluated rounds"),
}
DEFAULT_ACCURACY = PAPER_ACCURACY
#: the paper's "average accuracy of all clients" read two ways (docs/verdicts.md): the accuracy (ACCURACIES key) ->
#: the per-round metrics column it is the best of, and words. The first, PFLlib's pooled accuracy, decides.
READINGS_OF_ACCURACY = {PAPER_ACCURACY: ("test_acc", "pooled accuracy"), "best_clients": ("test_acc_mean", "mean over clients")}
PROTOCOL_FIELDS = (("_rounds", "rounds"), ("_clients", "clients"), ("_join", "join_ratio"), ("_epochs", "local_epochs"),
                   ("_batch", "batch_size"), ("_lr", "lr"))


def accuracy_column(results: pd.DataFrame, accuracy: str) -> str:
    """The results column of `accuracy` (a UserError when unknown or absent)."""
    if accuracy not in ACCURACIES:
        raise UserError(f"accuracy {accuracy!r} is not one of {', '.join(ACCURACIES)}")
    column = ACCURACIES[accuracy][0]
    if column not in results.columns:
        raise UserError(f"the results lack column {column} (accuracy {accuracy!r}); aggregate the runs again with this version")
    return column


def option_dims(frame: pd.DataFrame) -> tuple[list[str], list[dict[str, Any]]]:
    """The swept dimensions of these result rows, and the rows as dicts with parsed options."""
    records = []
    for rec in frame.to_dict("records"):
        opts = rec.get("options")
        rec["options"] = json.loads(opts) if isinstance(opts, str) and opts else {}
        records.append(rec)
    return sweep_dimensions(records), records


def summarize(results: pd.DataFrame, experiment: str, accuracy: str = DEFAULT_ACCURACY) -> tuple[pd.DataFrame, list[str]]:
    """One row per (setting, algorithm) of `experiment`: mean / std (percent) over seeds.

    Returns the cells frame (sorted in table order) and the swept dimensions. Each cell also says
    where it goes in the table: `row` / `row_name` (the algorithm, or the variant for runs of a
    named variant, in order of appearance) and `column` (the setting id without `@<variant>`); and
    how its runs ran: rounds, clients, join_ratio, local_epochs, batch_size, lr (where not swept:
    the values of its runs joined by '/') and `options` (the distinct `--set` values of its runs, a
    JSON list).
    """
    frame = results[results["experiment"] == experiment]
    if frame.empty:
        known = sorted(set(results["experiment"]))
        raise UserError(f"no runs of experiment {experiment!r} in the results; experiments present: {', '.join(known) or 'none'}")
    value_column = accuracy_column(results, accuracy)
    dims, records = option_dims(frame)
    variant_order = list(dict.fromkeys(variant_of(rec) for rec in records))
    several_algorithms = len({rec["algorithm"] for rec in records}) > 1
    cells: dict[tuple, dict[str, Any]] = {}
    for rec in records:
        variant = variant_of(rec)
        cell = cells.setdefault((rec["setting"], rec["algorithm"]), {
            "experiment": experiment,
            "setting": rec["setting"],
            "dataset": rec["dataset"],
            "classes_per_client": int(rec["classes_per_client"]),
            "alpha": float(rec["alpha"]),
            "assignment": assignment_of(rec),
            **{dim: dim_value(rec, dim) for dim in dims},
            "algorithm": rec["algorithm"],
            "algorithm_name": algorithm_name(rec["algorithm"]),
            "variant": variant,
            "row": f"{rec['algorithm']}@{variant}" if variant else rec["algorithm"],
            "row_name": row_name(rec["algorithm"], variant, several_algorithms),
            "column": base_setting(rec["setting"]),
            "_acc": {}, "_before": [], "_budget": set(), "_options": set(), **{field: set() for field, _ in PROTOCOL_FIELDS},
        })
        seed, percent = int(rec["seed"]), 100.0 * float(rec[value_column])
        if cell["_acc"].setdefault(seed, percent) != percent:
            raise UserError(f"experiment {experiment}, setting {rec['setting']}, {rec['algorithm']}: seed {seed} is in the results "
                            f"twice with different accuracies ({cell['_acc'][seed]:.4f} and {percent:.4f}); aggregate each run once")
        cell["_options"].add(json.dumps(rec["options"], sort_keys=True))
        if isinstance(rec.get("adaptation_budget"), str):
            cell["_before"].append(100.0 * float(rec["before_adaptation"]))
            cell["_budget"].add(rec["adaptation_budget"])
        for field, column in PROTOCOL_FIELDS:
            value = rec.get(column)
            if value is not None and not (isinstance(value, float) and math.isnan(value)):
                cell[field].add(freeze(value))
    rows = []
    for cell in cells.values():
        by_seed = cell.pop("_acc")
        acc = np.array(list(by_seed.values()))
        cell["accuracy"] = accuracy
        cell["mean"] = float(acc.mean())
        cell["std"] = float(acc.std(ddof=STD_DDOF)) if len(acc) > 1 else 0.0
        cell["n_seeds"] = len(acc)
        cell["seeds"] = " ".join(str(s) for s in sorted(by_seed))
        cell["options"] = json.dumps([json.loads(text) for text in sorted(cell.pop("_options"))])
        before, budget = cell.pop("_before"), cell.pop("_budget")
        if before:  # the accuracy before adaptation (mean over seeds, final round) and its budget
            cell["before_adaptation"], cell["adaptation_budget"] = float(np.mean(before)), " / ".join(sorted(budget))
        for field, column in PROTOCOL_FIELDS:
            values = sorted(cell.pop(field))
            if column not in dims:
                cell[column] = "/".join(format_number(v) for v in values) if values else ""
        rows.append(cell)
    out = pd.DataFrame(rows)
    dim_columns = [f"opt_{d[4:]}" if d.startswith("opt:") else d for d in dims]
    out = out.rename(columns=dict(zip(dims, dim_columns)))
    ds_key, alg_key = order_key(DATASET_ORDER), order_key(algorithm_order())
    out["_ds"] = out["dataset"].map(lambda d: ds_key(d)[0])
    out["_alg"] = out["algorithm"].map(lambda a: alg_key(a)[0])
    out["_variant"] = out["variant"].map(variant_order.index)
    # each method's variants side by side (e.g. "FedAvg (paper)", "FedAvg (official)", "FedProx (paper)", ...)
    sort_by = ["_alg", "algorithm", "_variant", "_ds", "dataset", "classes_per_client", "alpha"] + dim_columns
    out = out.sort_values(sort_by, kind="stable").drop(columns=["_ds", "_alg", "_variant"]).reset_index(drop=True)
    return out, dim_columns


def cell_text(mean: float, std: float, n_seeds: int) -> str:
    """'mean ± std', without the std for one seed, and '(n=k)' where k is below the paper's 5 seeds."""
    if isinstance(mean, float) and math.isnan(mean):
        return "—"
    text = f"{mean:.2f}" if n_seeds == 1 else f"{mean:.2f} ± {std:.2f}"
    return text + (f" (n={n_seeds})" if n_seeds < PAPER_SEEDS else "")


def with_adaptation(text: str, before: float, budget: Any) -> str:
    """A cell of a method whose number includes an adaptation: its accuracy before it and the budget beside."""
    if not isinstance(budget, str):
        return text
    return f"{text}; before adaptation {before:.2f}, adapted {budget}"


def row_name(algorithm: str, variant: str, several_algorithms: bool) -> str:
    """A table row's label: the method, or the variant (with its method when there are several)."""
    if not variant:
        return algorithm_name(algorithm)
    return f"{algorithm_name(algorithm)} ({variant})" if several_algorithms else variant


#: the most cells `fedgmh aggregate` prints (the rest are in its CSV)
SHOWN_CELLS = 30


def summary_lines(results: pd.DataFrame) -> list[str]:
    """The best accuracy of each (experiment, setting, method), mean ± std over its seeds, as lines."""
    lines = []
    for experiment in dict.fromkeys(results["experiment"].fillna("")):
        try:
            cells, _ = summarize(results.fillna({"experiment": ""}), experiment)
        except UserError as err:  # e.g. one seed twice with other settings: the CSV is still written
            lines.append(f"  {experiment or '(no experiment)'}: no summary ({err})")
            continue
        for cell in cells.itertuples():
            where = f"{experiment}: " if experiment else ""
            spread = f"{cell.mean:.2f} %" if cell.n_seeds == 1 else f"{cell.mean:.2f} ± {cell.std:.2f} %"
            seeds = f"seed {cell.seeds}" if cell.n_seeds == 1 else f"{cell.n_seeds} seeds: {cell.seeds}"
            lines.append(f"  {where}{cell.row_name} on {cell.setting}: best test accuracy {spread} ({seeds})")
    if len(lines) > SHOWN_CELLS:
        lines = lines[:SHOWN_CELLS] + [f"  ... {len(lines) - SHOWN_CELLS} more: see the CSV"]
    return lines
