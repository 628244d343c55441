"""The comparison with the paper: what is compared (the paper's protocol, distinct seeds, one cell
of ours per paper cell) and the verdicts (Welch interval, equivalence by TOST at a margin)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats
from test_report import make_run

from fedgmh import report
from fedgmh.cards import PRESETS
from fedgmh.cli import main as cli_main
from fedgmh.errors import UserError
from fedgmh.report.compare import compare_with_paper, write_comparison
from fedgmh.report.paper import read_reference
from fedgmh.report.protocol import READINGS
from fedgmh.report.verdicts import DEFAULT_ALPHA, DEFAULT_MARGIN, welch_tost

REPO = Path(__file__).resolve().parents[1]
#: five values with population std exactly 1 and mean 0
Z = np.array([-1.5, -0.5, 0.0, 0.5, 1.5])
GMH = {"beta": 0.5, "eta_h": 1.0, "preset": "paper"}


def reference(*rows: tuple) -> pd.DataFrame:
    """Table 2 rows (dataset, C, alpha, algorithm, mean, std) as the reference CSV has them."""
    frame = pd.DataFrame(rows, columns=["dataset", "C", "alpha", "algorithm", "mean", "std"])
    return frame.assign(table="table2", local_epochs=2, join_ratio=0.2, beta=0.5, eta_h=1.0)


FEDAVG, FEDPER, FEDGMH, FEDPROX = (("MNIST", 2, 0.5, "FedAvg", 88.30, 0.95), ("MNIST", 2, 0.5, "FedPer", 98.42, 0.08),
                                   ("MNIST", 2, 0.5, "FedGMH", 98.66, 0.15), ("MNIST", 2, 0.5, "FedProx", 88.52, 1.21))


def seeds(root: Path, algorithm: str, mean: float, std: float, n: int = 5, **kwargs) -> list[Path]:
    """n runs at the paper's protocol (200 rounds) whose best accuracies have this mean and population std."""
    z = Z if n == 5 else (np.arange(n) - (n - 1) / 2) / np.std(np.arange(n))
    return [make_run(root, algorithm=algorithm, seed=s, best=(mean + std * v) / 100, rounds=200, **kwargs) for s, v in enumerate(z[:n])]


def compared(dirs: list[Path], ref: pd.DataFrame, experiment: str = "table2", **kwargs) -> pd.DataFrame:
    results, _ = report.aggregate_runs(dirs, experiment=experiment, default_clients=100)
    cells, _ = report.summarize(results, experiment)
    return compare_with_paper(cells, ref, **kwargs).set_index("algorithm")


def test_a_cell_that_agreed_under_the_old_rule_is_inconclusive(tmp_path: Path) -> None:
    """FedAvg MNIST ExDir(2, 0.5): |+0.59| <= 2 * sqrt(0.95^2 + 1.19^2) = 3.05 was 'agree'; the 90 %
    Welch interval [-0.83, +2.01] neither lies within +-0.5 nor beyond it."""
    row = compared(seeds(tmp_path, "fedavg", 88.89, 1.19), reference(FEDAVG)).loc["FedAvg"]
    assert row["status"] == "inconclusive" and row["n_seeds"] == 5
    assert row["diff"] == pytest.approx(0.59)
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((-0.83, 2.01), abs=0.01)
    assert row["p_tost"] > 0.05 and row["p_welch"] > 0.05 and row["protocol"] == ""


def test_reproduced_and_not_reproduced(tmp_path: Path) -> None:
    """FedGMH-like: +0.28 within the margin (reproduced) yet significantly above the paper (Welch p
    about 0.016); FedPer-like: +0.65 with an interval wholly above +0.5 (not reproduced)."""
    dirs = seeds(tmp_path, "fedgmh", 98.94, 0.08, options=GMH) + seeds(tmp_path, "fedper", 99.07, 0.09)
    comparison = compared(dirs, reference(FEDPER, FEDGMH))
    gmh, per = comparison.loc["FedGMH"], comparison.loc["FedPer"]
    assert gmh["status"] == "reproduced" and gmh["p_tost"] < 0.05 and gmh["p_welch"] == pytest.approx(0.016, abs=0.001)
    assert -0.5 < gmh["ci_low"] < gmh["ci_high"] < 0.5
    assert per["status"] == "not reproduced" and per["ci_low"] > 0.5 and per["p_beyond"] < 0.05 and per["p_tost"] > 0.9
    # a wider margin takes FedPer in; a smaller one leaves FedGMH inconclusive
    assert compared(dirs, reference(FEDPER, FEDGMH), margin=1.0).loc["FedPer", "status"] == "reproduced"
    assert compared(dirs, reference(FEDPER, FEDGMH), margin=0.3).loc["FedGMH", "status"] == "inconclusive"


def test_the_interval_and_the_tests_are_welchs_and_tosts(tmp_path: Path) -> None:
    """Against a hand computation with scipy: Welch's interval from its formula, the p-values from
    scipy's Welch t-test (TOST as two shifted one-sided tests)."""
    values = np.array([98.81, 99.02, 98.90, 99.10, 98.87, 98.95])
    dirs = [make_run(tmp_path, algorithm="fedgmh", seed=s, best=v / 100, rounds=200, options=GMH) for s, v in enumerate(values)]
    margin, alpha = 0.4, 0.1
    row = compared(dirs, reference(FEDGMH), margin=margin, alpha=alpha).loc["FedGMH"]
    m_o, s_o, n_o = values.mean(), values.std(ddof=1), len(values)
    m_p, s_p, n_p = 98.66, 0.15 * np.sqrt(5 / 4), 5
    se = np.sqrt(s_o**2 / n_o + s_p**2 / n_p)
    df = se**4 / ((s_o**2 / n_o) ** 2 / (n_o - 1) + (s_p**2 / n_p) ** 2 / (n_p - 1))
    half = stats.t.ppf(1 - alpha, df) * se
    assert row["welch_df"] == pytest.approx(df) and row["ci_level"] == pytest.approx(0.8)
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((m_o - m_p - half, m_o - m_p + half))
    welch = stats.ttest_ind_from_stats(m_o, s_o, n_o, m_p, s_p, n_p, equal_var=False)
    above_lower = stats.ttest_ind_from_stats(m_o + margin, s_o, n_o, m_p, s_p, n_p, equal_var=False, alternative="greater")
    below_upper = stats.ttest_ind_from_stats(m_o - margin, s_o, n_o, m_p, s_p, n_p, equal_var=False, alternative="less")
    assert row["p_welch"] == pytest.approx(welch.pvalue)
    assert row["p_tost"] == pytest.approx(max(above_lower.pvalue, below_upper.pvalue))
    assert row["our_sample_std"] == pytest.approx(s_o) and row["paper_sample_std"] == pytest.approx(s_p)
    # no spread on either side: the difference is exact
    exact = welch_tost((98.9, 0.0, 3), (98.66, 0.0, 5), margin=0.5, alpha=0.05)
    assert (exact.ci_low, exact.ci_high, exact.verdict) == (pytest.approx(0.24), pytest.approx(0.24), "reproduced")


def test_seeds_are_counted_once(tmp_path: Path) -> None:
    """One run listed five times is one seed (so not judged); one seed with two accuracies is an error."""
    results, _ = report.aggregate_runs([make_run(tmp_path, algorithm="fedavg", best=0.8889, rounds=200)], experiment="table2")
    five = pd.concat([results] * 5, ignore_index=True)
    row = compare_with_paper(report.summarize(five, "table2")[0], reference(FEDAVG)).iloc[0]
    assert (row["n_seeds"], row["status"], row["protocol"]) == (1, "reduced protocol", "1 seed (paper 5)")
    assert report.make_table(five, "table2")["cells"]["n_seeds"].tolist() == [1]
    other = results.assign(best_test_acc=0.87, run_dir="elsewhere")
    with pytest.raises(UserError, match="seed 0 is in the results twice with different accuracies"):
        report.summarize(pd.concat([results, other], ignore_index=True), "table2")


def test_one_cell_of_ours_per_paper_cell(tmp_path: Path) -> None:
    """Two of our cells matching one paper cell, or one cell in two results files, is an error naming both."""
    dirs = seeds(tmp_path, "fedavg", 88.9, 1.0) + [make_run(tmp_path, algorithm="fedavg", seed=s, rounds=200, clients=20) for s in range(3)]
    with pytest.raises(UserError, match=r"cells table2 mnist_c2_a0.5 fedavg and table2 mnist_c2_a0.5_n20 fedavg both match the paper's "
                                        r"table2 MNIST ExDir\(2, 0.5\) FedAvg"):
        compared(dirs, reference(FEDAVG))
    results, _ = report.aggregate_runs(dirs[:5], experiment="table2")
    first, second, ref_csv = tmp_path / "a.csv", tmp_path / "b.csv", tmp_path / "ref.csv"
    results.to_csv(first, index=False)
    results.to_csv(second, index=False)
    reference(FEDAVG).to_csv(ref_csv, index=False)
    with pytest.raises(UserError, match=f"cell table2 mnist_c2_a0.5 fedavg is in both {first} and {second}"):
        write_comparison([first, second], ref_csv, tmp_path / "c.md")
    assert not (tmp_path / "c.md").exists()


def test_a_reference_row_without_numbers_and_a_duplicated_row(tmp_path: Path) -> None:
    dirs = seeds(tmp_path, "fedavg", 88.9, 1.0)
    comparison = compared(dirs, reference(FEDAVG[:4] + (np.nan, 0.95), FEDPER[:4] + (98.42, np.nan)))
    assert comparison["status"].tolist() == ["no reference", "no reference"]
    assert comparison.loc["FedAvg", "our_mean"] == pytest.approx(88.9) and np.isnan(comparison.loc["FedAvg", "p_tost"])
    with pytest.raises(UserError, match=r"rows 1 and 2 below the header are the same cell \(table2 MNIST ExDir\(2, 0.5\) FedAvg\)"):
        compared(dirs, reference(FEDAVG, ("mnist", 2, 0.5, "FedAvg", 88.0, 0.5)))
    with pytest.raises(UserError, match="has no rows"):
        compared(dirs, reference())
    bad = tmp_path / "ref.csv"
    reference(FEDAVG).assign(std="about one").to_csv(bad, index=False)
    with pytest.raises(UserError, match="row 1 below the header .* has std 'about one'"):
        read_reference(bad)


@pytest.mark.parametrize(("runs", "difference"), [
    ({"lr": 0.5}, "lr 0.5 (paper 0.01)"),
    ({"batch_size": 10}, "batch 10 (paper 100)"),
    ({"options": {"lr_decay": 1.0}}, "lr_decay=1 (paper 0.99)"),
    ({"options": {"lr_decay_unit": "round"}}, "lr_decay_unit=round (paper participation)"),
    ({"options": {"eval_last": 20}}, "eval_last=20 (paper 0)"),
    ({"options": {"drop_last": True}}, "drop_last=true (paper false)"),
    ({"algorithm": "fedprox", "options": {"mu": 0.01}}, "mu=0.01 (paper 0)"),
])
def test_runs_off_the_papers_protocol_are_not_judged(tmp_path: Path, runs: dict, difference: str) -> None:
    """Five seeds whose numbers agree with the paper, at another lr, batch size, lr decay, evaluation or option."""
    algorithm = runs.pop("algorithm", "fedavg")
    row = compared(seeds(tmp_path, algorithm, 88.5, 1.0, **runs), reference(FEDAVG, FEDPROX)).loc[report.algorithm_name(algorithm)]
    assert (row["status"], row["protocol"]) == ("other protocol", difference)
    assert np.isnan(row["p_tost"]) and row["diff"] == pytest.approx(88.5 - row["paper_mean"])  # shown, for information


def test_the_reading_of_the_protocol(tmp_path: Path) -> None:
    """preset=official runs are another protocol under the paper's text and judged under PFLlib's
    reading; a paper-text run is the other way round. Options that change only how a run is
    computed, and the beta of a table that sweeps it, are no difference."""
    official = seeds(tmp_path / "o", "fedper", 98.47, 0.09, n=3, options={"preset": "official"})
    assert compared(official, reference(FEDPER)).loc["FedPer", "protocol"] == "drop_last=true (paper false), 3 seeds (paper 5)"
    assert compared(official, reference(FEDPER), reading="official").loc["FedPer", "status"] == "reproduced"
    paper = seeds(tmp_path / "p", "fedgmh", 98.66, 0.15, options={**GMH, "eval_batched": True, "vectorise": "off"})
    assert compared(paper, reference(FEDGMH)).loc["FedGMH", "status"] == "reproduced"
    row = compared(paper, reference(FEDGMH), reading="official").loc["FedGMH"]
    assert row["status"] == "other protocol" and row["protocol"].startswith("mix=critical (paper noncritical), ")
    assert "eval_last=0 (paper 20)" in row["protocol"] and "eval_batched" not in row["protocol"]
    # Table 6 sweeps beta: one beta's runs match its row, and beta is not a difference
    table6 = reference(("Cifar100", 5, 0.5, "FedGMH", 77.76, 0.19), ("Cifar100", 5, 0.5, "FedGMH", 77.52, 0.39)).assign(
        table="table6", beta=[0.1, 0.2])
    beta = [make_run(tmp_path / "b", experiment="table6", dataset="cifar100", c=5, algorithm="fedgmh", seed=s, best=b, rounds=300,
                     options={**GMH, "beta": 0.1}) for s, b in enumerate((0.776, 0.778, 0.777))]
    comparison = compared(beta, table6, experiment="table6")
    assert comparison["status"].tolist() == ["reproduced", "not run"] and comparison["setting"].iloc[0] == "CIFAR-100 ExDir(5, 0.5) β=0.1"


def test_the_margin_and_alpha_are_checked(tmp_path: Path, capsys) -> None:
    dirs = seeds(tmp_path, "fedavg", 88.9, 1.0)
    for margin in (0.0, -0.5, float("inf"), float("nan")):
        with pytest.raises(UserError, match="margin must be a finite number > 0"):
            compared(dirs, reference(FEDAVG), margin=margin)
    for alpha in (0.0, 0.5, 1.0, float("nan")):
        with pytest.raises(UserError, match=r"alpha must be in \(0, 0.5\)"):
            compared(dirs, reference(FEDAVG), alpha=alpha)
    results, _ = report.aggregate_runs(dirs, experiment="table2")
    results_csv, ref_csv, md = tmp_path / "r.csv", tmp_path / "ref.csv", tmp_path / "c.md"
    results.to_csv(results_csv, index=False)
    reference(FEDAVG).to_csv(ref_csv, index=False)
    args = ["compare", "--results", str(results_csv), "--reference", str(ref_csv), "--out", str(md)]
    assert cli_main([*args, "--margin", "inf"]) != 0
    err = capsys.readouterr().err
    assert "margin must be a finite number > 0" in err and len(err.strip().splitlines()) == 1 and not md.exists()
    assert cli_main([*args, "--k", "2"]) == 2  # the old tolerance rule is gone
    assert "unrecognized arguments: --k" in capsys.readouterr().err


def test_the_report_states_its_statistics(tmp_path: Path) -> None:
    dirs = seeds(tmp_path, "fedavg", 88.89, 1.19) + seeds(tmp_path, "fedper", 99.07, 0.09)
    results, _ = report.aggregate_runs(dirs, experiment="table2")
    results_csv, ref_csv = tmp_path / "r.csv", tmp_path / "ref.csv"
    results.to_csv(results_csv, index=False)
    reference(FEDAVG, FEDPER, FEDPROX).to_csv(ref_csv, index=False)
    md, tex, csv = tmp_path / "out" / "c.md", tmp_path / "out" / "c.tex", tmp_path / "out" / "c.csv"
    assert cli_main(["compare", "--results", str(results_csv), "--reference", str(ref_csv), "--out", str(md), "--tex", str(tex),
                     "--csv", str(csv), "--margin", "0.5", "--alpha", "0.05"]) == 0
    text = md.read_text()
    assert "**How to read this** (docs/verdicts.md)" in text and (REPO / "docs" / "verdicts.md").is_file()
    assert ("| table | cells | reproduced | not reproduced | inconclusive | reduced protocol | other protocol | no reference | not run |"
            in text)
    assert "| **all** | 3 | 0 | 1 | 1 | 0 | 0 | 0 | 1 |" in text
    assert ("| MNIST ExDir(2, 0.5) | FedAvg | 88.30 ± 0.95 | 88.89 ± 1.19 (5) | +0.59 | [-0.83, +2.01] | ±0.5 | 0.546 | 0.462 | "
            "inconclusive | 88.89 ± 1.19 (5) | +0.59 | inconclusive |  |") in text
    assert r"90\% CI" in tex.read_text() and "1 not reproduced, 1 inconclusive" in tex.read_text()
    # the LaTeX table lists the cells run and counts the others (a paper's worth of "not run" is pages)
    assert tex.read_text().isascii()  # every symbol translated: pdflatex stops at an undefined Unicode character
    assert "FedProx" not in tex.read_text() and "Not listed, not run (1 cells, all in comparison.md): Table 2 1." in tex.read_text()
    frame = pd.read_csv(csv)
    assert {"ci_low", "ci_high", "ci_level", "welch_df", "margin", "p_tost", "p_welch", "our_sample_std", "paper_sample_std"} <= set(frame)


def test_every_cell_is_compared_on_both_accuracies_and_says_where_they_disagree(tmp_path: Path) -> None:
    """The pooled accuracy decides; the mean over clients is judged beside it, and a cell whose verdict
    differs says so (FedGMH on MNIST ExDir(2, 0.5): 98.94 pooled, 96.76 over clients in the committed records)."""
    results, _ = report.aggregate_runs(seeds(tmp_path, "fedgmh", 98.70, 0.08, options=GMH), experiment="table2")
    results_csv, ref_csv, md, csv = tmp_path / "r.csv", tmp_path / "ref.csv", tmp_path / "c.md", tmp_path / "c.csv"
    results.assign(best_test_acc_mean=results["best_test_acc"] - 0.019).to_csv(results_csv, index=False)
    reference(FEDGMH).to_csv(ref_csv, index=False)
    row = write_comparison([results_csv], ref_csv, md, out_csv=csv).iloc[0]
    assert (row["status"], row["clients_status"]) == ("reproduced", "not reproduced")
    assert row["clients_diff"] == pytest.approx(-1.86) and row["clients_n_seeds"] == 5
    text = md.read_text()
    assert "| reproduced | 96.80 ± 0.08 (5) | -1.86 | not reproduced (**differs**) |" in text
    assert "On the mean over clients: 1 not reproduced. The verdict differs in 1 cell: MNIST ExDir(2, 0.5) FedGMH" in text
    # results aggregated before the column existed: the cells are not run on the mean over clients, never judged from a NaN
    results.drop(columns="best_test_acc_mean").to_csv(results_csv, index=False)
    assert write_comparison([results_csv], ref_csv, md).iloc[0]["clients_status"] == "not run"


def test_the_workflows_defaults_are_the_commands() -> None:
    schema = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())["properties"]
    assert schema["comparison_margin"]["default"] == DEFAULT_MARGIN and schema["comparison_alpha"]["default"] == DEFAULT_ALPHA
    assert tuple(READINGS) == PRESETS


@pytest.mark.parametrize(("best", "words"), [(math.inf, "is inf, not a finite number"), (-0.5075, "is -0.5075, outside [0, 1]"),
                                             (9.89, "is 9.89, outside [0, 1] (accuracies are fractions)"),
                                             (math.nan, "is empty (or NaN)")])
def test_an_impossible_accuracy_is_refused_not_compared(tmp_path: Path, capsys, best: float, words: str) -> None:
    """Ours = inf, -50.75 or 989.0 was compared with the paper's number; now one line naming the cell of the results file."""
    results, _ = report.aggregate_runs(seeds(tmp_path, "fedavg", 88.9, 1.0), experiment="table2")
    results.loc[3, "best_test_acc"] = best
    results_csv, ref_csv, md = tmp_path / "r.csv", tmp_path / "ref.csv", tmp_path / "c.md"
    results.to_csv(results_csv, index=False)
    reference(FEDAVG).to_csv(ref_csv, index=False)
    assert cli_main(["compare", "--results", str(results_csv), "--reference", str(ref_csv), "--out", str(md)]) == 2
    err = capsys.readouterr().err
    assert f"results file {results_csv}: row 4 below the header, column best_test_acc {words}" in err, err
    assert len(err.strip().splitlines()) == 1 and not md.exists()


def test_a_paper_number_above_100_percent_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "ref.csv"
    reference(FEDAVG[:4] + (989.0, 0.95)).to_csv(bad, index=False)
    with pytest.raises(UserError, match=r"row 1 below the header .* has mean 989.0; give a percentage in \[0, 100\]"):
        read_reference(bad)
