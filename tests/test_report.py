"""Reporting on synthetic run directories: aggregation, mean ± std tables, bold best, figures."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import artifact_args

from fedgmh import report
from fedgmh.cli import main as cli_main
from fedgmh.errors import UserError
from fedgmh.report.to_target import rounds_latex, uploads_to_target


def make_run(root: Path, *, experiment: str = "table2", dataset: str = "mnist", c: int = 2, alpha: float = 0.5,
             algorithm: str = "fedavg", seed: int = 0, best: float = 0.9, rounds: int = 5, local_epochs: int = 2,
             join_ratio: float = 0.2, options: dict | None = None, labelled: bool = True, clients: int = 100,
             batch_size: int = 100, lr: float = 0.01) -> Path:
    """A run directory shaped like `fedgmh train --out` output, with accuracy peaking at `best`;
    `labelled`: run.json says its experiment (`workflow`), as the workflow's runs do."""
    setting = report.setting_id({"dataset": dataset, "classes_per_client": c, "alpha": alpha})
    run_dir = root / experiment / setting / algorithm / f"seed{seed}"
    if local_epochs != 2 or join_ratio != 0.2 or options or clients != 100 or batch_size != 100 or lr != 0.01:
        run_dir = run_dir.parent / (f"seed{seed}_e{local_epochs}_j{join_ratio}_n{clients}_b{batch_size}_lr{lr}_"
                                    f"{json.dumps(options, sort_keys=True)}").replace(" ", "").replace('"', "")
    run_dir.mkdir(parents=True)
    acc = np.linspace(0.1, best, rounds + 1)
    acc[-1] = best - 0.01  # best is not the final round
    acc[-2] = best
    pd.DataFrame({
        "round": np.arange(rounds + 1),
        "test_acc": acc,
        "test_acc_mean": acc,
        "test_acc_std": np.full(rounds + 1, 0.05),
        "train_loss": np.linspace(2.0, 0.5, rounds + 1),
    }).to_csv(run_dir / "metrics.csv", index=False)
    config = {
        "dataset": dataset, "root": "data", "partition": "nowhere.npz", "algorithm": algorithm, "rounds": rounds,
        "join_ratio": join_ratio, "local_epochs": local_epochs, "batch_size": batch_size, "lr": lr, "seed": seed,
        "device": "cpu", "threads": 1, "overrides": dict(options or {}),
    }
    (run_dir / "run.json").write_text(json.dumps({
        "algorithm": algorithm, "dataset": dataset, "seed": seed, "config": config,
        "partition": {"scheme": "exdir", "dataset": dataset, "num_clients": clients, "classes_per_client": c, "alpha": alpha},
        "best_test_acc": float(acc.max()), "best_round": int(acc.argmax()), "final_test_acc": float(acc[-1]), "wall_time_s": 1.5,
        **({"workflow": {"config_name": "test", "experiment": experiment}} if labelled else {}),
    }))
    return run_dir


# best accuracies per (algorithm, setting): seeds 0, 1, 2
GRID = {
    ("fedgmh", "mnist", 2, 0.5): [0.98, 0.97, 0.99],
    ("fedavg", "mnist", 2, 0.5): [0.88, 0.89, 0.87],
    ("fedavg", "cifar10", 2, 5.0): [0.40, 0.42, 0.41],
    ("fedgmh", "cifar10", 2, 5.0): [0.80, 0.82, 0.84],
    ("fedper", "cifar10", 2, 5.0): [0.90, 0.90, 0.90],  # best in this column
}


@pytest.fixture()
def runs(tmp_path: Path) -> list[Path]:
    dirs = []
    for (alg, ds, c, alpha), values in GRID.items():
        for seed, best in enumerate(values):
            dirs.append(make_run(tmp_path / "runs", algorithm=alg, dataset=ds, c=c, alpha=alpha, seed=seed, best=best,
                                 options={"beta": 0.5, "eta_h": 1.0} if alg == "fedgmh" else None))
    return dirs


def test_aggregate_one_row_per_run(runs: list[Path]) -> None:
    results, curves = report.aggregate_runs(runs, experiment="table2")
    assert len(results) == len(runs) == 15
    row = results[(results["algorithm"] == "fedgmh") & (results["dataset"] == "mnist") & (results["seed"] == 2)].iloc[0]
    assert row["best_test_acc"] == pytest.approx(0.99)
    assert row["best_round"] == 4 and row["rounds"] == 5 and row["rounds_evaluated"] == 6
    assert row["classes_per_client"] == 2 and row["alpha"] == 0.5 and row["clients"] == 100
    assert row["beta"] == 0.5 and row["eta_h"] == 1.0
    assert row["setting"] == "mnist_c2_a0.5" and row["experiment"] == "table2"
    assert row["run_dir"] == str(runs[2])
    assert set(results.loc[results["dataset"] == "cifar10", "setting"]) == {"cifar10_c2_a5"}
    # curves: long format, one row per run and round
    assert len(curves) == 15 * 6
    assert {"experiment", "setting", "algorithm", "seed", "round", "test_acc"} <= set(curves.columns)


def test_table_mean_std_bold_and_order(runs: list[Path], tmp_path: Path) -> None:
    results, _ = report.aggregate_runs(runs, experiment="table2")
    table = report.make_table(results, "table2")
    cells = table["cells"].set_index(["algorithm", "setting"])
    cell = cells.loc[("fedgmh", "mnist_c2_a0.5")]
    assert cell["mean"] == pytest.approx(98.0)
    assert cell["std"] == pytest.approx(np.std([98.0, 97.0, 99.0]))  # ddof=0
    assert cell["cell"] == "98.00 ± 0.82 (n=3)"  # 3 of the paper's 5 seeds
    assert cell["n_seeds"] == 3
    assert bool(cell["is_best"]) and bool(cells.loc[("fedper", "cifar10_c2_a5"), "is_best"])
    assert not bool(cells.loc[("fedgmh", "cifar10_c2_a5"), "is_best"])

    wide = table["wide"]
    assert list(wide["Method"]) == ["FedAvg", "FedPer", "FedGMH"]  # paper order, only those present
    assert list(wide.columns[1:]) == ["MNIST ExDir(2, 0.5)", "CIFAR-10 ExDir(2, 5)"]
    assert wide.iloc[1, 1] == ""  # FedPer was not run on MNIST

    latex = table["latex"]
    assert r"\toprule" in latex and r"\midrule" in latex and r"\bottomrule" in latex
    assert r"\textbf{98.00 $\pm$ 0.82 (n=3)}" in latex
    assert r"\textbf{90.00 $\pm$ 0.00 (n=3)}" in latex
    assert "88.00 $\\pm$ 0.82 (n=3)" in latex and r"\textbf{88.00" not in latex
    assert "fewer than the paper's 5" in latex
    assert latex.index("FedAvg") < latex.index("FedPer") < latex.index("FedGMH")
    assert "3 seeds" in latex and "100 clients" in latex and "5 rounds" in latex and "ddof=0" in latex
    assert r"\multicolumn{1}{c}{MNIST}" in latex or "MNIST" in latex


def test_a_method_with_adaptation_shows_its_accuracy_before_it_and_its_budget(tmp_path: Path) -> None:
    """table2_more: FedBABU's / Per-FedAvg's number includes an adaptation; adaptation.csv says what it was."""
    dirs = [make_run(tmp_path / "runs", experiment="more", algorithm=alg, seed=seed, best=0.9) for alg in ("fedavg", "fedbabu")
            for seed in (0, 1)]
    for run_dir, correct in zip(dirs[2:], ([3, 5], [4, 5])):
        pd.DataFrame({"client": [0, 1], "test_samples": [10, 10], "correct_before": correct,
                      "budget": ["5 epochs (all, lr 0.001, momentum 0.9)"] * 2}).to_csv(run_dir / "adaptation.csv", index=False)
    results, _ = report.aggregate_runs(dirs, experiment="more")
    assert results["before_adaptation"].tolist()[2:] == [0.4, 0.45] and results["before_adaptation"].isna().tolist()[:2] == [True, True]
    wide = report.make_table(results, "more")["wide"].set_index("Method")
    assert wide.loc["FedBABU"].iloc[0] == "90.00 ± 0.00 (n=2); before adaptation 42.50, adapted 5 epochs (all, lr 0.001, momentum 0.9)"
    assert wide.loc["FedAvg"].iloc[0] == "90.00 ± 0.00 (n=2)"
    latex = report.make_table(results, "more")["latex"]  # the page's table: the number and a mark, the rest in a note below
    assert "(n=2) [1]}" in latex and "before adaptation" not in latex.split(r"\bottomrule")[0]
    assert "[1] FedBABU" in latex and "before adaptation 42.50, adapted 5 epochs (all, lr 0.001, momentum 0.9)." in latex


def test_cell_text_says_how_many_seeds() -> None:
    from fedgmh.report.latex import tex
    from fedgmh.report.summary import cell_text

    assert cell_text(98.661, 0.0, 1) == "98.66 (n=1)"  # no "± 0.00" for one seed
    assert cell_text(98.661, 0.123, 5) == "98.66 ± 0.12"  # the paper's 5 seeds: plain
    assert tex(cell_text(98.661, 0.123, 4)) == "98.66 $\\pm$ 0.12 (n=4)"


def test_table_cli_writes_tex_and_csv(runs: list[Path], tmp_path: Path) -> None:
    results_csv, curves_csv = tmp_path / "out" / "results.csv", tmp_path / "out" / "curves.csv"
    assert cli_main(["aggregate", "--runs", *map(str, runs), "--out", str(results_csv), "--curves", str(curves_csv),
                     "--experiment", "table2"]) == 0
    tex, csv, cells = tmp_path / "out" / "table2.tex", tmp_path / "out" / "table2.csv", tmp_path / "out" / "table2.cells.csv"
    assert cli_main(artifact_args("table", {"results": results_csv}, {"tex": tex, "csv": csv, "cells": cells},
                                  {"experiment": "table2", "title": "Table 2", "accuracy": "best"})) == 0
    assert tex.read_text().count(r"\textbf") == 2
    assert pd.read_csv(csv)["Method"].tolist() == ["FedAvg", "FedPer", "FedGMH"]
    assert len(pd.read_csv(cells)) == 5
    assert not list((tmp_path / "out").glob(".*tmp*"))  # no temporary files left behind


def test_ablation_order_and_reference(tmp_path: Path) -> None:
    dirs = [make_run(tmp_path, experiment="table5", algorithm=alg, seed=s, best=b)
            for alg, b in (("fedgmh", 0.98), ("gmh_oa", 0.96), ("gmh_a", 0.97), ("gmh_o", 0.95)) for s in (0, 1)]
    results, _ = report.aggregate_runs(dirs)  # experiment from each run.json's workflow labels
    reference = pd.DataFrame({
        "table": ["table5", "table5"], "dataset": ["MNIST", "MNIST"], "C": [2, 2], "alpha": [0.5, 0.5],
        "algorithm": ["GMH-o", "FedGMH"], "local_epochs": [2, 2], "join_ratio": [0.2, 0.2], "beta": [0.5, 0.5],
        "eta_h": [1.0, 1.0], "mean": [97.79, 98.66], "std": [0.05, 0.15],
    })
    table = report.make_table(results, "table5", reference=reference)
    assert list(table["wide"]["Method"]) == ["GMH-o", "GMH-a", "GMH-oa", "FedGMH"]
    cells = table["cells"].set_index("algorithm")
    assert cells.loc["gmh_o", "paper_mean"] == pytest.approx(97.79)
    assert cells.loc["fedgmh", "diff"] == pytest.approx(98.0 - 98.66)
    assert np.isnan(cells.loc["gmh_a", "paper_mean"])


def label(run_dir: Path, **workflow: str) -> Path:
    """`run_dir` with these workflow labels added to its run.json (`setting`, `variant`, ...)."""
    record = json.loads((run_dir / "run.json").read_text())
    record["workflow"] = {**record.get("workflow", {}), **workflow}
    (run_dir / "run.json").write_text(json.dumps(record))
    return run_dir


def test_a_run_keeps_the_setting_id_its_record_files_it_under(tmp_path: Path) -> None:
    """The id the workflow gave the run (all of table4's join ratios) although it is aggregated alone,
    unless the run is aggregated under another experiment or its partition part disagrees."""
    swept = label(make_run(tmp_path / "a", experiment="table4", join_ratio=0.4), setting="mnist_c2_a0.5_j0.4")
    assert report.aggregate_runs([swept])[0]["setting"].tolist() == ["mnist_c2_a0.5_j0.4"]
    assert report.aggregate_runs([swept], experiment="table2")[0]["setting"].tolist() == ["mnist_c2_a0.5"]
    assert report.aggregate_runs([swept], variants=["official"])[0]["setting"].tolist() == ["mnist_c2_a0.5@official"]
    unlabelled = make_run(tmp_path / "b", experiment="table4", join_ratio=0.4, labelled=False)
    assert report.aggregate_runs([unlabelled])[0]["setting"].tolist() == ["mnist_c2_a0.5"]
    twenty = label(make_run(tmp_path / "c", clients=20), setting="mnist_c2_a0.5")  # its config's clients were 20
    assert report.aggregate_runs([twenty], default_clients=100)[0]["setting"].tolist() == ["mnist_c2_a0.5_n20"]
    assert report.aggregate_runs([twenty], default_clients=20)[0]["setting"].tolist() == ["mnist_c2_a0.5"]


def test_an_execution_option_is_not_a_dimension_of_the_cell(tmp_path: Path) -> None:
    """A run laid out channels_last (the campaign's CPU runs) is the same run as one that is not (the run
    key): aggregated under another experiment than its record's, it stays in the same cell."""
    plain = make_run(tmp_path / "a", experiment="table2", algorithm="fedgmh", seed=0)
    laid_out = make_run(tmp_path / "b", experiment="table5", algorithm="gmh_a", seed=3, options={"memory_format": "channels_last"})
    results, _ = report.aggregate_runs([plain, label(laid_out, setting="mnist_c2_a0.5")], experiment="table5")
    assert results["setting"].tolist() == ["mnist_c2_a0.5", "mnist_c2_a0.5"]
    assert "memory_format" not in results.columns and results["options"].tolist() == ["{}", "{}"]


def test_swept_dimension_becomes_a_column(tmp_path: Path) -> None:
    dirs = [make_run(tmp_path, experiment="table3", dataset="cifar10", algorithm="fedavg", local_epochs=e, seed=s, best=0.3 + 0.01 * e)
            for e in (4, 6) for s in (0, 1)]
    results, _ = report.aggregate_runs(dirs, experiment="table3")
    assert sorted(set(results["setting"])) == ["cifar10_c2_a0.5_e4", "cifar10_c2_a0.5_e6"]
    table = report.make_table(results, "table3")
    assert list(table["wide"].columns[1:]) == ["CIFAR-10 ExDir(2, 0.5) E=4", "CIFAR-10 ExDir(2, 0.5) E=6"]
    assert "CIFAR-10" in table["latex"] and "ExDir(2, 0.5) E=4" in table["latex"]


@pytest.mark.parametrize("damage", ["no_run_json", "no_metrics", "empty_metrics", "missing_key", "no_dir"])
def test_missing_or_partial_run_is_an_error_naming_the_run(tmp_path: Path, damage: str) -> None:
    good = make_run(tmp_path, seed=0)
    bad = make_run(tmp_path, seed=1)
    if damage == "no_run_json":
        (bad / "run.json").unlink()
    elif damage == "no_metrics":
        (bad / "metrics.csv").unlink()
    elif damage == "empty_metrics":
        (bad / "metrics.csv").write_text("round,test_acc\n")
    elif damage == "missing_key":
        record = json.loads((bad / "run.json").read_text())
        del record["best_test_acc"]
        (bad / "run.json").write_text(json.dumps(record))
    elif damage == "no_dir":
        bad = tmp_path / "never_ran"
    with pytest.raises(UserError, match=str(bad)):
        report.aggregate_runs([good, bad])


def test_cli_error_is_one_line_with_status_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "runs" / "x" / "seed0"
    assert cli_main(["aggregate", "--runs", str(missing), "--out", str(tmp_path / "r.csv")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and str(missing) in err
    assert not (tmp_path / "r.csv").exists()


def test_run_json_is_the_only_source(tmp_path: Path) -> None:
    """Partition parameters and the experiment come from run.json alone: no other file of the run
    folder, and not the partition file it names, is read."""
    run_dir = make_run(tmp_path, experiment="table4", c=5, alpha=5.0, clients=20)
    (run_dir / "run_info.json").write_text(json.dumps({"experiment": "other", "classes_per_client": 9, "alpha": 9, "clients": 9}))
    partition = tmp_path / "part.npz"
    np.savez(partition, meta=np.array(json.dumps({"classes_per_client": 9, "alpha": 9.0, "num_clients": 9})))
    record = json.loads((run_dir / "run.json").read_text())
    record["config"]["partition"] = str(partition)
    (run_dir / "run.json").write_text(json.dumps(record))
    results, _ = report.aggregate_runs([run_dir])
    row = results.iloc[0]
    assert (row["classes_per_client"], row["alpha"], row["clients"]) == (5, 5.0, 20)
    assert (row["experiment"], row["setting"]) == ("table4", "mnist_c5_a5")
    assert report.aggregate_runs([make_run(tmp_path, seed=3, labelled=False)])[0].loc[0, "experiment"] == ""
    del record["partition"]["classes_per_client"]
    (run_dir / "run.json").write_text(json.dumps(record))
    with pytest.raises(UserError, match=f"run {run_dir}: run.json's partition lacks classes_per_client"):
        report.aggregate_runs([run_dir])


def test_setting_ids() -> None:
    base = {"dataset": "cifar100", "classes_per_client": 5, "alpha": 0.5, "algorithm": "fedgmh", "local_epochs": 2,
            "join_ratio": 0.2, "rounds": 300}
    assert report.setting_id(base) == "cifar100_c5_a0.5"
    assert report.setting_id({**base, "alpha": 5.0}) == "cifar100_c5_a5"
    sweep = [{**base, "options": {"beta": b, "eta_h": 1.0}} for b in (0.1, 0.5)]
    assert report.assign_setting_ids(sweep) == ["cifar100_c5_a0.5_beta0.1", "cifar100_c5_a0.5_beta0.5"]
    # different algorithms with different options are not a sweep
    mixed = [{**base, "options": {"beta": 0.5}}, {**base, "algorithm": "fedavg", "options": {}}]
    assert report.assign_setting_ids(mixed) == ["cifar100_c5_a0.5"] * 2


def test_curves_figure_written(runs: list[Path], tmp_path: Path) -> None:
    _, curves = report.aggregate_runs(runs, experiment="table2")
    pdf, png = tmp_path / "fig" / "curves.pdf", tmp_path / "fig" / "curves.png"
    panels = report.plot_curves(curves, pdf, png=png, settings=["cifar10_c2_a5"])
    assert panels == ["cifar10_c2_a5"]
    assert pdf.read_bytes().startswith(b"%PDF") and png.read_bytes().startswith(b"\x89PNG")
    # all settings, through the CLI
    curves_csv = tmp_path / "curves.csv"
    curves.to_csv(curves_csv, index=False)
    assert cli_main(["curves", "--curves", str(curves_csv), "--out", str(tmp_path / "all.pdf")]) == 0
    assert (tmp_path / "all.pdf").stat().st_size > 1000
    with pytest.raises(UserError, match="not in the curves"):
        report.plot_curves(curves, tmp_path / "x.pdf", settings=["nope"])


def test_variants_are_rows_and_part_of_the_setting_id(tmp_path: Path) -> None:
    variants = {"paper": {"preset": "paper"}, "mix=noncritical": {"preset": "paper", "mix": "noncritical"},
                "official": {"preset": "official"}}
    dirs, names = [], []
    for ds in ("mnist", "cifar10"):
        for v, (name, options) in enumerate(variants.items()):
            for s in (0, 1):
                dirs.append(make_run(tmp_path, experiment="audit", dataset=ds, algorithm="fedgmh", seed=s, best=0.9 - 0.1 * v,
                                     options=options))
                names.append(name)
    results, curves = report.aggregate_runs(dirs, experiment="audit", variants=names)
    assert set(results["setting"]) == {f"{ds}_c2_a0.5@{n}" for ds in ("mnist", "cifar10") for n in variants}
    assert list(dict.fromkeys(results["variant"])) == list(variants)
    assert set(curves["variant"]) == set(variants)
    table = report.make_table(results, "audit")
    wide = table["wide"]
    assert list(wide["Variant"]) == list(variants)  # rows = variants, in config order
    assert list(wide.columns[1:]) == ["MNIST ExDir(2, 0.5)", "CIFAR-10 ExDir(2, 0.5)"]  # columns = settings
    assert wide.iloc[0, 1] == "90.00 ± 0.00 (n=2)" and wide.iloc[2, 2] == "70.00 ± 0.00 (n=2)"
    latex = table["latex"]
    assert r"\textbf{90.00 $\pm$ 0.00 (n=2)}" in latex and "mix=noncritical &" in latex and "Variant" in latex
    with pytest.raises(UserError, match="one per run"):
        report.aggregate_runs(dirs, experiment="audit", variants=names[:-1])


def test_variants_with_a_swept_option(tmp_path: Path) -> None:
    dirs, names = [], []
    for name, preset in (("paper", "paper"), ("official", "official")):
        for beta in (0.1, 0.5):
            dirs.append(make_run(tmp_path, experiment="audit_beta", dataset="cifar100", c=5, algorithm="fedgmh", best=beta,
                                 options={"beta": beta, "preset": preset}))
            names.append(name)
    results, _ = report.aggregate_runs(dirs, experiment="audit_beta", variants=names)
    assert sorted(set(results["setting"])) == ["cifar100_c5_a0.5_beta0.1@official", "cifar100_c5_a0.5_beta0.1@paper",
                                               "cifar100_c5_a0.5_beta0.5@official", "cifar100_c5_a0.5_beta0.5@paper"]
    wide = report.make_table(results, "audit_beta")["wide"]
    assert list(wide["Variant"]) == ["paper", "official"]
    assert list(wide.columns[1:]) == ["CIFAR-100 ExDir(5, 0.5) β=0.1", "CIFAR-100 ExDir(5, 0.5) β=0.5"]


def test_variants_of_several_methods_sit_side_by_side(tmp_path: Path) -> None:
    dirs, names = [], []
    for name, preset in (("paper", "paper"), ("official", "official")):
        for algorithm in ("fedgmh", "fedavg"):  # config order is not the paper's order
            dirs.append(make_run(tmp_path / name, experiment="table2_pflib", algorithm=algorithm, options={"preset": preset}))
            names.append(name)
    results, _ = report.aggregate_runs(dirs, experiment="table2_pflib", variants=names)
    wide = report.make_table(results, "table2_pflib")["wide"]
    # methods in the paper's order, each method's variants together, in config order
    assert list(wide["Variant"]) == ["FedAvg (paper)", "FedAvg (official)", "FedGMH (paper)", "FedGMH (official)"]


def test_one_row_sweep_table_matches_the_paper(tmp_path: Path) -> None:
    """Table 6's layout: one row FedGMH, one column per beta; paper values matched on beta."""
    dirs = [make_run(tmp_path, experiment="table6", dataset="cifar100", c=5, algorithm="fedgmh", seed=s, best=0.77 + 0.001 * s,
                     options={"beta": beta, "eta_h": 1.0}) for beta in (0.1, 0.2) for s in (0, 1)]
    results, _ = report.aggregate_runs(dirs, experiment="table6")
    reference = pd.read_csv(Path(__file__).resolve().parents[1] / "reference" / "fedgmh_paper_tables.csv")
    table = report.make_table(results, "table6", reference=reference)
    assert list(table["wide"]["Method"]) == ["FedGMH"]
    assert list(table["wide"].columns[1:]) == ["CIFAR-100 ExDir(5, 0.5) β=0.1", "CIFAR-100 ExDir(5, 0.5) β=0.2"]
    assert list(table["cells"]["paper_mean"]) == [77.76, 77.52]


def _curves(values: dict[tuple[str, int], list[float]]) -> pd.DataFrame:
    rows = [{"experiment": "table2", "setting": "cifar100_c5_a0.5", "dataset": "cifar100", "classes_per_client": 5, "alpha": 0.5,
             "algorithm": alg, "seed": seed, "round": r, "test_acc": acc}
            for (alg, seed), accs in values.items() for r, acc in enumerate(accs)]
    return pd.DataFrame(rows)


def test_rounds_to_target() -> None:
    curves = _curves({
        ("fedgmh", 0): [0.1, 0.5, 0.72, 0.76], ("fedgmh", 1): [0.1, 0.7, 0.70, 0.74], ("fedgmh", 2): [0.1, 0.4, 0.6, 0.80],
        ("fedavg", 0): [0.1, 0.2, 0.3, 0.2], ("fedavg", 1): [0.1, 0.2, 0.3, 0.71], ("fedavg", 2): [0.1, 0.2, 0.3, 0.2],
    })
    table = report.rounds_to_target(curves, "table2", "cifar100_c5_a0.5", [70, 75], paper={"fedgmh": [68, 185]})
    got = table.set_index(["algorithm", "target"])
    # FedGMH mean curve: 10, 53.3, 67.3, 76.7 -> 70 % and 75 % both first at round 3
    assert got.loc[("fedgmh", 70.0), "mean_curve"] == "3" and got.loc[("fedgmh", 75.0), "mean_curve"] == "3"
    # per seed, 70 %: rounds 2, 1, 3 -> median 2; 75 %: 3, never, 3 -> median 3
    assert got.loc[("fedgmh", 70.0), "median_seed"] == "2" and got.loc[("fedgmh", 75.0), "median_seed"] == "3"
    assert got.loc[("fedgmh", 75.0), "seeds_reached"] == 2
    assert got.loc[("fedgmh", 70.0), "paper"] == "68" and got.loc[("fedavg", 70.0), "paper"] == ""
    assert got.loc[("fedavg", 70.0), "mean_curve"] == "not reached" and got.loc[("fedavg", 70.0), "median_seed"] == "not reached"
    assert list(table["algorithm"].drop_duplicates()) == ["fedavg", "fedgmh"]  # paper order
    with pytest.raises(UserError, match="2 targets"):
        report.rounds_to_target(curves, "table2", "cifar100_c5_a0.5", [70, 75], paper={"fedgmh": [68]})
    with pytest.raises(UserError, match="its settings"):
        report.rounds_to_target(curves, "table2", "nope", [70])


def test_rounds_to_target_follows_the_claims_rule_where_rounds_were_not_evaluated() -> None:
    """A run evaluated only in its last rounds (eval_last) and at round 0: the first round reaching the
    target is known only to lie between the first round not evaluated and the first evaluated hit, as
    the claims read it (first_round_bounds), not the first evaluated round."""
    curves = _curves({("fedgmh", 0): [0.1, 0.72, 0.76, 0.8]})
    curves["round"] = curves["round"].map({0: 0, 1: 6, 2: 7, 3: 8})
    got = report.rounds_to_target(curves, "table2", "cifar100_c5_a0.5", [70, 75, 90]).set_index("target")
    assert list(got["mean_curve"]) == ["1-6", "1-7", "1-not reached"] and list(got["median_seed"]) == ["1-6", "1-7", "1-not reached"]
    assert list(got["seeds_reached"]) == [1, 1, 0]
    assert "a-b: somewhere from round a to b" in rounds_latex(report.rounds_to_target(curves, "table2", "cifar100_c5_a0.5", [70]))


def test_both_target_tables_check_their_cell_alike() -> None:
    curves = _curves({("fedgmh", 0): [0.1, 0.72]})
    for table in (report.rounds_to_target, uploads_to_target):
        with pytest.raises(UserError, match="no target accuracy given"):
            table(curves, "table2", "cifar100_c5_a0.5", [])
        with pytest.raises(UserError, match="setting 'nope'; its settings: cifar100_c5_a0.5"):
            table(curves, "table2", "nope", [70])
        with pytest.raises(UserError, match="of fedgmh: 1 values for 2 targets"):
            table(curves, "table2", "cifar100_c5_a0.5", [70, 75], paper={"fedgmh": [68]})


def test_rounds_cli(tmp_path: Path) -> None:
    curves_csv = tmp_path / "curves.csv"
    _curves({("fedgmh", 0): [0.1, 0.72, 0.8], ("fedper", 0): [0.1, 0.3, 0.71]}).to_csv(curves_csv, index=False)
    tex, csv = tmp_path / "r.tex", tmp_path / "r.csv"
    assert cli_main(["rounds", "--curves", str(curves_csv), "--experiment", "table2", "--setting", "cifar100_c5_a0.5",
                     "--target", "70", "75", "--paper", '{"fedgmh": [68, 185], "fedper": [108, null]}', "--out", str(tex),
                     "--csv", str(csv)]) == 0
    frame = pd.read_csv(csv, dtype=str, keep_default_na=False)
    assert list(frame["Method"]) == ["FedPer", "FedGMH"]
    assert frame.loc[1, "70% mean curve"] == "1" and frame.loc[1, "70% paper"] == "68" and frame.loc[0, "75% mean curve"] == "not reached"
    assert frame.loc[0, "75% paper"] == "" and frame.loc[1, "75% seeds"] == "1/1"
    latex = tex.read_text()
    assert r"\toprule" in latex and r"\multicolumn{4}{c}{70\%}" in latex and "FedGMH & 1 & 1 & 1/1 & 68 & 2 & 2 & 1/1 & 185" in latex


def test_runs_evaluated_every_round_are_reported_as_their_preset_evaluates():
    """Table 5's official runs evaluate every round; the official code evaluates the last 20 only:
    `--preset-evaluation` reports them over those 20 rounds, the curves keep every round."""
    from conftest import REPO_ROOT

    run = REPO_ROOT / "paper_artifacts/paper/runs/table5_pflib/cifar100_c5_a0.5@official/gmh_oa/seed0"
    row, metrics = report.load_run(run)
    official, same_metrics = report.load_run(run, preset_evaluation=True)
    last20 = metrics[metrics["round"] > 280]
    assert row["rounds_evaluated"] == 301 and official["rounds_evaluated"] == 20 and same_metrics.equals(metrics)
    assert row["best_round"] <= 280 and official["best_test_acc"] == last20["test_acc"].max() < row["best_test_acc"]
    assert official["best_round"] == int(last20.loc[last20["test_acc"].idxmax(), "round"]) > 280
    assert official["last10_test_acc"] == row["last10_test_acc"] and official["final_test_acc"] == row["final_test_acc"]
    assert row["options"]["eval_last"] == 0 and official["options"] == {k: v for k, v in row["options"].items() if k != "eval_last"}


def test_one_scoring_rule_takes_every_runs_best_over_its_last_rounds():
    """PFLlib's reading scores every method alike: its best over its last 20 rounds (`--best-of-last 20`),
    the rounds the official FedGMH code evaluates; PFLlib's FedGH seed 2 peaks at round 249, before them."""
    from conftest import REPO_ROOT

    run = REPO_ROOT / "paper_artifacts/paper/runs/table2_pflib/cifar100_c5_a0.5@official/fedgh/seed2"
    row, metrics = report.load_run(run)
    scored, _ = report.load_run(run, best_of_last=20)
    last20 = metrics[metrics["round"] > 280]
    assert row["best_round"] <= 280 and scored["best_test_acc"] == last20["test_acc"].max() < row["best_test_acc"]
    assert scored["best_round"] > 280 and scored["best_test_acc_mean"] == last20["test_acc_mean"].max()
    sparse = REPO_ROOT / "paper_artifacts/paper/runs/table2_pflib/mnist_c2_a0.5@official/fedgmh/seed0"
    with pytest.raises(UserError, match="did not evaluate 10 of its last 30 rounds"):
        report.load_run(sparse, best_of_last=30)
