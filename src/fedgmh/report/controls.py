"""How much of a method's gain over FedAvg the label set alone explains (the `controls` experiment).

Per setting: what the label distribution predicts with no model (`prior_only`), the share of test
samples whose label the client never trains on (`unreachable`), and per method its accuracy with
and without the mask prior (engine option `eval_prior=mask`), its gain over FedAvg, and the share
of that gain that FedAvg + mask already reaches. Means over seeds, in percent.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from fedgmh.errors import UserError
from fedgmh.filing import parse_setting_id
from fedgmh.io import write_csv, write_text
from fedgmh.cards import algorithm_name
from fedgmh.report.outputs import check_outputs
from fedgmh.report.settings import setting_label

BASELINE = "fedavg"


def _partition_facts(stats_paths: list[Path]) -> dict[str, tuple[float, float]]:
    """partition id (file name without .stats.csv) -> (prior-only accuracy, unreachable share), in percent."""
    facts = {}
    for path in stats_paths:
        stats = pd.read_csv(path)
        missing = {"prior_only_correct", "unreachable_test"} - set(stats.columns)
        if missing:
            raise UserError(f"{path}: no {', '.join(sorted(missing))} column; partition it again with this version of `fedgmh partition`")
        test = stats["num_test"].sum()
        facts[Path(path).name.removesuffix(".stats.csv")] = (
            100.0 * stats["prior_only_correct"].sum() / test, 100.0 * stats["unreachable_test"].sum() / test)
    return facts


def control_summary(results: pd.DataFrame, stats_paths: list[Path]) -> pd.DataFrame:
    """One row per (partition, method) of the runs in `results` (rows of `fedgmh aggregate`); a partition
    is read from each row's setting id (`filing.parse_setting_id`: clients of its own and chained ones
    included), so the variants of a setting (with and without the mask) meet in one row."""
    if results.empty:
        raise UserError("no runs to summarise")
    if "setting" not in results.columns:
        raise UserError("the results have no setting column; make them with `fedgmh aggregate`")
    frame = results.copy()
    options = frame["options"].map(lambda text: json.loads(text) if isinstance(text, str) and text else {})
    frame["masked"] = options.map(lambda o: o.get("eval_prior", "none") == "mask")
    frame["acc"] = 100.0 * frame["best_test_acc"]
    frame["partition"] = [parse_setting_id(setting).partition for setting in frame["setting"]]
    labels = {row["partition"]: setting_label(row, row["partition"]) for row in frame.to_dict("records")}
    facts = _partition_facts(stats_paths)
    means = frame.groupby(["partition", "algorithm", "masked"], sort=False)["acc"].mean()
    rows = []
    for partition, group in means.groupby(level=0, sort=False):
        dataset, setting = labels[partition]
        acc = {(alg, masked): value for (*_, alg, masked), value in group.items()}
        fedavg, fedavg_mask = acc.get((BASELINE, False), np.nan), acc.get((BASELINE, True), np.nan)
        prior_only, unreachable = facts.get(partition, (np.nan, np.nan))
        for algorithm in dict.fromkeys(alg for alg, _ in acc):
            plain, masked = acc.get((algorithm, False), np.nan), acc.get((algorithm, True), np.nan)
            gain = plain - fedavg
            rows.append({
                "dataset": dataset, "setting": setting,
                "prior_only": prior_only, "unreachable": unreachable,
                "algorithm": algorithm, "method": algorithm_name(algorithm), "acc": plain, "acc_with_mask": masked,
                "gain_over_fedavg": gain,
                # the share of the gain FedAvg reaches by knowing the label set (FedAvg's own row: none)
                "prior_share_of_gain": 100.0 * (fedavg_mask - fedavg) / gain if algorithm != BASELINE and gain > 0 else np.nan,
            })
    return pd.DataFrame(rows)


def _markdown(summary: pd.DataFrame, title: str) -> str:
    lines = [f"# {title}", "",
             "Accuracy in percent (best round, mean over seeds). `prior only`: predicting each client's most frequent "
             "training label; `unreachable`: test samples whose label the client never trains on (never right with the "
             "mask). `share of gain`: (FedAvg + mask - FedAvg) / (method - FedAvg).", "",
             "| dataset | setting | prior only | unreachable | method | acc | acc + mask | gain over FedAvg | share of gain explained by the label set |",
             "| --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: |"]
    number = lambda v: "" if pd.isna(v) else f"{v:.2f}"  # noqa: E731
    for row in summary.to_dict("records"):
        lines.append(f"| {row['dataset']} | {row['setting']} | {number(row['prior_only'])} | {number(row['unreachable'])} | {row['method']} | "
                     f"{number(row['acc'])} | {number(row['acc_with_mask'])} | {number(row['gain_over_fedavg'])} | "
                     f"{number(row['prior_share_of_gain'])}{' %' if not pd.isna(row['prior_share_of_gain']) else ''} |")
    return "\n".join(lines) + "\n"


def write_control_summary(results_path: Path, stats_paths: list[Path], out_md: Path, out_csv: Path, title: str) -> pd.DataFrame:
    check_outputs(out_csv, out_md)
    summary = control_summary(pd.read_csv(results_path), stats_paths)
    write_csv(summary, out_csv)
    write_text(_markdown(summary, title), out_md)
    return summary
