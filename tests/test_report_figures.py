"""Figures: one style per method with FedGMH standing out, and the per-client accuracy figure."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import artifact_args

from fedgmh import report
from fedgmh.cli import main as cli_main
from fedgmh.report.style import HIGHLIGHT, method_style

from test_report import make_run

REPO = Path(__file__).resolve().parents[1]


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
    assert cli_main(artifact_args("client_accuracy", {"results": results_csv}, {"pdf": pdf, "png": png, "csv": csv},
                                  {"experiment": "table2", "round": "last", "title": "Per-client accuracy"})) == 0
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


def _curves(finals: dict[str, tuple[float, int]], rounds: int = 40) -> pd.DataFrame:
    """Curves rising to each method's final accuracy (method -> (final, seeds)), seeds a little apart."""
    rows = []
    for algorithm, (final, seeds) in finals.items():
        for seed in range(seeds):
            for r in range(rounds + 1):
                rows.append({"experiment": "table2", "setting": "mnist_c2_a0.5", "dataset": "mnist", "classes_per_client": 2,
                             "alpha": 0.5, "clients": 100, "assignment": "random", "algorithm": algorithm, "variant": "",
                             "seed": seed, "round": r, "test_acc": final * (1 - 0.9 * 0.8 ** r) + 0.001 * seed})
    return pd.DataFrame(rows)


def test_curves_zoom_on_the_last_rounds_band_only_the_highlighted_and_count_seeds(tmp_path: Path, monkeypatch) -> None:
    import matplotlib.figure

    drawn = []
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda self, *a, **k: drawn.append((self, k)))
    finals = {"fedavg": (0.85, 3), "ditto": (0.984, 1), "fedper": (0.986, 2), "fedrep": (0.95, 3), "fedgmh": (0.989, 3)}
    report.plot_curves(_curves(finals), tmp_path / "f.pdf")
    fig, kwargs = drawn[0]
    assert kwargs["metadata"] == {"CreationDate": None}  # the same records draw the same bytes
    full, zoom = fig.axes
    assert "seed" not in full.get_title()  # the counts differ per method: the legend gives them
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels[:5] == ["FedAvg (3 seeds)", "Ditto (1 seed)", "FedPer (2 seeds)", "FedRep (3 seeds)", "FedGMH (3 seeds)"]
    assert "FedGMH, FedPer" in labels[5]  # bands: FedGMH and the best other method only
    assert len(full.collections) == 2
    low, high = zoom.get_ylim()  # 98.4 vs 98.9 readable: FedRep's 95 is the lowest method in the zoom
    assert 93 < low < 95 and 99 < high < 99.5 and zoom.get_xlim() == (29, 40)


def test_the_band_goes_to_the_best_other_method_with_a_spread(tmp_path: Path, monkeypatch) -> None:
    """A best other method with one seed has no band: the next best with several seeds gets it, and the
    legend names only the methods banded."""
    import matplotlib.figure

    drawn = []
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda self, *a, **k: drawn.append(self))
    finals = {"fedper": (0.986, 2), "lgfedavg": (0.9875, 1), "fedgmh": (0.989, 3)}
    report.plot_curves(_curves(finals), tmp_path / "f.pdf")
    full = drawn[0].axes[0]
    labels = [t.get_text() for t in drawn[0].legends[0].get_texts()]
    assert labels[-1].endswith("(FedGMH, FedPer)") and len(full.collections) == 2


def test_figures_carry_no_creation_date(tmp_path: Path) -> None:
    report.plot_curves(_curves({"fedgmh": (0.9, 2)}, rounds=5), tmp_path / "a.pdf")
    report.plot_curves(_curves({"fedgmh": (0.9, 2)}, rounds=5), tmp_path / "b.pdf")
    assert b"CreationDate" not in (tmp_path / "a.pdf").read_bytes()
    assert (tmp_path / "a.pdf").read_bytes() == (tmp_path / "b.pdf").read_bytes()


def test_client_accuracy_leaves_out_a_setting_without_any_clients_csv(tmp_path: Path, monkeypatch) -> None:
    import matplotlib.figure

    from fedgmh.report.clients import plot_client_accuracy

    drawn = []
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda self, *a, **k: drawn.append(self))
    dirs = []
    for ds, c in (("mnist", 2), ("cifar100", 5)):
        for alg, best in (("fedavg", 0.3), ("fedgmh", 0.8)):
            dirs.append(make_run(tmp_path / "runs", dataset=ds, c=c, algorithm=alg, best=best))
            if ds == "mnist":  # the CIFAR-100 records predate clients.csv
                _with_clients(dirs[-1], best)
    results, _ = report.aggregate_runs(dirs, experiment="table2")
    assert plot_client_accuracy(results, tmp_path / "c.png") == (2, 2)
    panels = [ax for ax in drawn[0].axes if ax.get_visible()]
    assert [ax.get_title() for ax in panels] == ["MNIST ExDir(2, 0.5)"]  # no empty panel
    assert "not drawn, none of their runs has one: CIFAR-100 ExDir(5, 0.5)" in " ".join(t.get_text() for t in drawn[0].texts)


def test_dot_plot_draws_each_seed_beside_the_papers_mean_and_std(tmp_path: Path, monkeypatch) -> None:
    import matplotlib.figure

    drawn = []
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda self, *a, **k: drawn.append(self))
    dirs = [make_run(tmp_path / "runs", algorithm="fedgmh", seed=s, best=b) for s, b in enumerate((0.988, 0.989, 0.990))]
    dirs.append(make_run(tmp_path / "runs", algorithm="fedavg", best=0.85))
    results, _ = report.aggregate_runs(dirs, experiment="table2")
    results_csv, reference = tmp_path / "results.csv", tmp_path / "paper.csv"
    results.to_csv(results_csv, index=False)
    pd.DataFrame([{"table": "table2", "dataset": "MNIST", "C": 2, "alpha": 0.5, "algorithm": "FedGMH", "local_epochs": 2,
                   "join_ratio": 0.2, "beta": 0.5, "eta_h": 1.0, "mean": 98.4, "std": 0.1}]).to_csv(reference, index=False)
    assert cli_main(artifact_args("dots", {"results": results_csv, "reference": reference}, {"pdf": tmp_path / "d.pdf"},
                                  {"experiment": "table2", "title": "table2", "accuracy": "best"})) == 0
    fedavg, fedgmh = drawn[0].axes
    seeds = fedgmh.lines[0].get_xdata()
    assert sorted(seeds) == pytest.approx([98.8, 98.9, 99.0])  # every seed, not only the mean
    assert fedgmh.containers[0].lines[0].get_xdata()[0] == pytest.approx(98.4)  # the paper's mean with its ± std
    low, high = fedgmh.get_xlim()
    assert low < 98.3 and high > 99.0 and high - low < 2  # the cell's own range: half a point is visible
    assert not fedavg.containers and fedavg.get_ylabel() == "FedAvg"  # the paper has no FedAvg row here


def test_the_client_dots_are_drawn_the_same_whatever_the_global_random_state(tmp_path: Path) -> None:
    """The dots' jitter comes from a fixed seed: drawing again after numpy's global state moved gives the same bytes
    (a rerun of the workflow leaves a committed figure unchanged)."""
    from fedgmh.report.clients import plot_client_accuracy

    dirs = [make_run(tmp_path / "runs", algorithm=alg, best=best) for alg, best in (("fedavg", 0.3), ("fedgmh", 0.8))]
    for run_dir, best in zip(dirs, (0.3, 0.8)):
        _with_clients(run_dir, best)
    results, _ = report.aggregate_runs(dirs, experiment="table2")
    drawn = []
    for seed in (1, 2):
        np.random.seed(seed)
        plot_client_accuracy(results, tmp_path / f"c{seed}.pdf", tmp_path / f"c{seed}.png")
        drawn.append(((tmp_path / f"c{seed}.pdf").read_bytes(), (tmp_path / f"c{seed}.png").read_bytes()))
    assert drawn[0] == drawn[1]


def test_curves_mark_the_papers_table_value_of_each_method_and_fade_few_seeds(tmp_path: Path, monkeypatch) -> None:
    """--reference: a diamond at the last round at the paper's mean of each method its table gives for the setting
    (FedAvg and FedGMH on Table 2's MNIST ExDir(2, 0.5); Ditto's row is removed here: no diamond); a method with
    fewer than 3 seeds is drawn faded, and the legend says so."""
    import matplotlib.figure

    from fedgmh.report.marks import Marks
    from fedgmh.report.paper import read_reference

    drawn = []
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda self, *a, **k: drawn.append(self))
    reference = read_reference(REPO / "reference" / "fedgmh_paper_tables.csv")
    reference = reference[reference["algorithm"] != "Ditto"]
    paper = reference.set_index(["table", "dataset", "C", "alpha", "algorithm"])["mean"]
    report.plot_curves(_curves({"fedavg": (0.85, 3), "ditto": (0.9, 1), "fedgmh": (0.989, 3)}), tmp_path / "f.pdf",
                       marks=Marks(reference=reference))
    full, zoom = drawn[0].axes
    diamonds = sorted(float(line.get_ydata()[0]) for line in full.lines if line.get_marker() == "D")
    assert diamonds == sorted([paper["table2", "MNIST", 2, 0.5, "FedAvg"], paper["table2", "MNIST", 2, 0.5, "FedGMH"]])
    assert {line.get_xdata()[0] for line in full.lines if line.get_marker() == "D"} == {40}
    assert zoom.get_xlim()[1] > 40  # the zoom's diamonds stay whole
    assert drawn[0].legends[0].get_title().get_text() == "faded: fewer than 3 seeds"
    faded = [line for line in full.lines if line.get_alpha() is not None and line.get_alpha() < 1]
    assert [line.get_color() for line in faded] == [method_style("ditto")["color"]]
