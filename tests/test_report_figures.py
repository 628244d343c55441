"""Figures: one style per method with FedGMH standing out, and the per-client accuracy figure."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fedgmh import report
from fedgmh.cli import main as cli_main
from fedgmh.report.style import HIGHLIGHT, method_style

from test_report import make_run


def test_every_method_has_its_own_style_and_fedgmh_stands_out() -> None:
    styles = {a: method_style(a) for a in report.algorithm_order()}
    looks = {(s["color"], s["linestyle"], s["marker"]) for s in styles.values()}
    assert len(looks) == len(styles)  # no two methods look alike
    assert len({s["color"] for s in styles.values()}) == len(styles)  # not even in colour alone
    others = [s for a, s in styles.items() if a != HIGHLIGHT]
    assert all(styles[HIGHLIGHT]["linewidth"] > s["linewidth"] and styles[HIGHLIGHT]["zorder"] > s["zorder"] for s in others)
    # identical curves (FedAvg and FedProx with mu = 0) are told apart by the line style too
    assert styles["fedavg"]["linestyle"] != styles["fedprox"]["linestyle"]
    assert method_style("fedavg") == styles["fedavg"]  # the same in every figure


def _with_clients(run_dir: Path, accuracy: float, clients: int = 20) -> None:
    rng = np.random.default_rng(0)
    acc = np.clip(rng.normal(accuracy, 0.1, clients), 0, 1)
    acc += accuracy - acc.mean()  # pooled over the clients' equal test sets: run.json's best accuracy
    pd.DataFrame({"client": range(clients), "test_samples": 50, "test_acc_best": acc, "test_acc_last": acc - 0.01}).to_csv(
        run_dir / "clients.csv", index=False)


def test_client_accuracy_figure_draws_runs_with_clients_csv_and_names_the_others(tmp_path: Path) -> None:
    dirs = []
    for ds, c in (("mnist", 2), ("cifar100", 5)):
        for alg, best in (("fedavg", 0.3), ("fedgh", 0.6), ("fedgmh", 0.8)):
            dirs.append(make_run(tmp_path / "runs", dataset=ds, c=c, algorithm=alg, best=best))
            if alg != "fedgh":  # FedGH's records predate clients.csv
                _with_clients(dirs[-1], best)
    results, _ = report.aggregate_runs(dirs, experiment="table2")
    results_csv = tmp_path / "results.csv"
    results.to_csv(results_csv, index=False)
    pdf, png, csv = tmp_path / "fig" / "clients.pdf", tmp_path / "fig" / "clients.png", tmp_path / "fig" / "clients.csv"
    assert cli_main(["clients", "--results", str(results_csv), "--experiment", "table2", "--out", str(pdf), "--png", str(png),
                     "--csv", str(csv), "--round", "last", "--title", "Per-client accuracy"]) == 0
    assert pdf.read_bytes().startswith(b"%PDF") and png.read_bytes().startswith(b"\x89PNG")
    drawn = pd.read_csv(csv)
    assert len(drawn) == 4 * 20 and set(drawn["algorithm"]) == {"fedavg", "fedgmh"}
    from fedgmh.report.clients import client_results

    clients, missing = client_results(results, "table2")
    assert list(missing["algorithm"]) == ["fedgh", "fedgh"] and len(clients) == 80
    assert clients.groupby("algorithm")["test_acc_best"].mean()["fedgmh"] == pytest.approx(0.8, abs=0.05)


def test_client_accuracy_figure_without_any_clients_csv(tmp_path: Path) -> None:
    from fedgmh.report.clients import plot_client_accuracy

    results, _ = report.aggregate_runs([make_run(tmp_path, algorithm="fedavg")], experiment="table2")
    assert plot_client_accuracy(results, tmp_path / "c.png") == (0, 1)
    assert (tmp_path / "c.png").stat().st_size > 1000


def test_heatmap_is_wide_for_few_classes(tmp_path: Path, monkeypatch) -> None:
    import matplotlib.figure

    from fedgmh.partition import plot_heatmap

    sizes = []
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda self, *a, **k: sizes.append(tuple(self.get_size_inches())))
    stats = pd.DataFrame({"client": range(100), **{f"class_{k}": np.arange(100) % (k + 2) for k in range(10)}})
    plot_heatmap(stats, tmp_path / "h.png", title="MNIST ExDir(2, 0.5)")
    width, height = sizes[0]
    assert width > 2 * height  # 100 clients along x, 10 classes along y
