"""What the accuracy-per-round figure draws: target lines, the paper's rounds as stars, another
reading's curves, legend names, a zoom that holds FedGMH's band, and setting titles in words."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fedgmh.report import figures
from fedgmh.report.marks import Marks
from fedgmh.report.style import method_style
from fedgmh.report.titles import extra_words, setting_title

SETTING = "cifar100_c5_a0.5"


def _curves(algorithms: dict[str, float], seeds: int = 3, rounds: int = 100, noise: float = 0.0, setting: str = SETTING) -> pd.DataFrame:
    """Curves rising to each algorithm's final accuracy; seed k is shifted by (k - 1) * noise."""
    rows = []
    for algorithm, final in algorithms.items():
        for seed in range(seeds):
            acc = final * (1 - np.exp(-np.arange(rounds + 1) / 20)) + (seed - 1) * noise
            rows += [{"experiment": "table2", "setting": setting, "dataset": "cifar100", "classes_per_client": 5, "alpha": 0.5,
                      "clients": 100, "assignment": "random", "algorithm": algorithm, "variant": "", "seed": seed, "round": r,
                      "test_acc": a} for r, a in enumerate(acc)]
    return pd.DataFrame(rows)


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> list:
    """The figures plot_curves saves, kept open for inspection."""
    figs: list = []
    monkeypatch.setattr(figures, "save_figure", lambda fig, out, png=None: figs.append(fig))
    return figs


def _lines(ax) -> list:
    return [line for line in ax.get_lines() if len(line.get_xdata())]


def test_targets_are_lines_and_the_papers_rounds_are_stars_on_them(drawn: list, tmp_path: Path) -> None:
    marks = Marks(targets=[70, 75], paper_rounds={"fedgmh": [68, 185], "fedamp": [120, None], "fedper": [108, 297]})
    figures.plot_curves(_curves({"fedgmh": 0.78, "fedavg": 0.10, "fedamp": 0.76}, rounds=300), tmp_path / "f.pdf", marks=marks)
    full, zoom = drawn[0].axes[:2]
    for ax in (full, zoom):
        flat = {float(line.get_ydata()[0]) for line in ax.get_lines() if list(line.get_xdata()) == [0, 1]}
        assert flat == {70.0, 75.0}  # axhline: x in axes fraction
    stars = {(float(line.get_xdata()[0]), float(line.get_ydata()[0])): line.get_color()
             for line in zoom.get_lines() if line.get_marker() == "*"}
    assert stars == {(68.0, 70.0): method_style("fedgmh")["color"], (185.0, 75.0): method_style("fedgmh")["color"],
                     (120.0, 70.0): method_style("fedamp")["color"]}  # not FedPer's: FedPer is not drawn
    assert {"68", "185", "120"} <= {text.get_text() for text in zoom.texts}
    assert {"70 %", "75 %"} <= {text.get_text() for text in full.texts}
    low, high = zoom.get_ylim()
    assert low <= 66 and high >= 76  # the zoom shows where the curves cross the targets
    legend = [text.get_text() for text in drawn[0].legends[0].get_texts()]
    assert any(text.startswith("the paper's round to 70 / 75 %") for text in legend)


def test_targets_no_curve_reaches_are_drawn_without_zooming_on_them(drawn: list, tmp_path: Path) -> None:
    """A short run (the mini config's 8 rounds) reaches no target: the lines are drawn, the zoom keeps the best methods."""
    marks = Marks(targets=[70, 75], paper_rounds={"fedgmh": [68, 185]})
    figures.plot_curves(_curves({"fedgmh": 0.40, "fedavg": 0.10}, rounds=8), tmp_path / "f.pdf", marks=marks)
    full, zoom = drawn[0].axes[:2]
    assert {float(line.get_ydata()[0]) for line in full.get_lines() if list(line.get_xdata()) == [0, 1]} == {70.0, 75.0}
    assert zoom.get_ylim()[1] < 70 and "where the curves reach the targets" not in zoom.get_title()
    assert not [line for line in zoom.get_lines() if line.get_marker() == "*"]  # round 68 is after the last round
    assert not any(text.get_text().startswith("the paper's round") for text in drawn[0].legends[0].get_texts())


def test_the_overlay_and_the_given_names_are_drawn_and_in_the_legend(drawn: list, tmp_path: Path) -> None:
    overlay = _curves({"fedamp": 0.76, "fedgh": 0.55})
    marks = Marks(overlay=overlay[overlay["algorithm"] == "fedamp"], overlay_name="PFLlib's (preset=official)",
                  labels={"fedprox": "FedProx (mu = 0, = FedAvg)"})
    figures.plot_curves(_curves({"fedgmh": 0.78, "fedavg": 0.10, "fedprox": 0.10, "fedamp": 0.51}), tmp_path / "f.pdf", marks=marks)
    full = drawn[0].axes[0]
    wide = [line for line in _lines(full) if line.get_alpha() == pytest.approx(0.35)]
    assert len(wide) == 1 and wide[0].get_color() == method_style("fedamp")["color"]
    assert float(wide[0].get_ydata()[-1]) == pytest.approx(76 * (1 - np.exp(-5)))
    legend = [text.get_text() for text in drawn[0].legends[0].get_texts()]
    assert "FedAMP, PFLlib's (preset=official) (3 seeds)" in legend and "FedAMP (3 seeds)" in legend
    assert "FedProx (mu = 0, = FedAvg) (3 seeds)" in legend and not any(t.startswith("FedGH") for t in legend)


def test_the_zoom_holds_fedgmhs_band_whole(drawn: list, tmp_path: Path) -> None:
    curves = _curves({"fedgmh": 0.78, "fedper": 0.74}, noise=0.02)
    figures.plot_curves(curves, tmp_path / "f.pdf")
    zoom = drawn[0].axes[1]
    first = zoom.get_xlim()[0]
    fedgmh = curves[(curves["algorithm"] == "fedgmh") & (curves["round"] >= first)].groupby("round")["test_acc"]
    band = 100 * (fedgmh.mean() + fedgmh.std()), 100 * (fedgmh.mean() - fedgmh.std())
    low, high = zoom.get_ylim()
    assert high >= band[0].max() and low <= band[1].min()


def test_a_label_without_a_name_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from fedgmh.cli import main as cli_main

    path = tmp_path / "c.csv"
    _curves({"fedgmh": 0.78}).to_csv(path, index=False)
    assert cli_main(["curves", "--curves", str(path), "--out", str(tmp_path / "f.pdf"), "--label", "fedprox"]) != 0
    assert "--label takes ALGORITHM=NAME" in capsys.readouterr().err and not (tmp_path / "f.pdf").exists()


@pytest.mark.parametrize(("setting", "words"), [
    ("mnist_c2_a0.5_j0.4", "rho = 0.4"), ("mnist_c2_a0.5_beta0.1", "beta = 0.1"), ("mnist_c2_a0.5_eta_h0.01", "eta_h = 0.01"),
    ("mnist_c2_a0.5_e4_j1", "E = 4, rho = 1"), ("mnist_c2_a0.5_beta0.1@official", "beta = 0.1, official"),
    ("mnist_c2_a0.5@hn_lr=2", "hn_lr = 2"), ("mnist_c2_a0.5", ""),
    # the partition's own parts (clients of its own, chain) are no swept values
    ("cifar100_c5_a0.5_n20", ""), ("cifar100_c5_a0.5_n20_e4@official", "E = 4, official"),
    ("fashion_mnist_c4_a1000000_n8_chain_j0.4", "rho = 0.4"), ("fashion_mnist_c4_a1000000_chain@eval_prior=mask", "eval_prior = mask"),
])
def test_what_a_setting_adds_to_its_partition_is_written_as_words(setting: str, words: str) -> None:
    assert extra_words(setting) == words


@pytest.mark.parametrize("text", ["_j0.4@official", "mnist_c2_a0.5_j0.4@a@b", "mnist_c2"])
def test_extra_words_reads_only_setting_ids_through_the_one_parser(text: str) -> None:
    with pytest.raises(ValueError, match="is not a setting id"):
        extra_words(text)


def test_setting_titles_say_iid_and_the_swept_value() -> None:
    row = {"dataset": "cifar100", "classes_per_client": 50, "alpha": 1000000, "clients": 20, "assignment": "random"}
    assert setting_title(pd.DataFrame([row]), "cifar100_c50_a1000000_n20") == "CIFAR-100 50 classes per client, IID, 20 clients"
    row = {"dataset": "cifar100", "classes_per_client": 5, "alpha": 0.5, "clients": 100, "assignment": "random"}
    assert setting_title(pd.DataFrame([row]), "cifar100_c5_a0.5_j0.4") == "CIFAR-100 ExDir(5, 0.5), rho = 0.4"


def test_the_seed_rows_draw_one_dot_per_seed_a_mean_bar_and_the_papers_value(monkeypatch: pytest.MonkeyPatch,
                                                                             tmp_path: Path) -> None:
    from fedgmh import report
    from fedgmh.report import seed_rows
    from test_report import make_run

    figs: list = []
    monkeypatch.setattr(seed_rows, "save_figure", lambda fig, out, png=None: figs.append(fig))
    dirs = [make_run(tmp_path / "runs", algorithm=a, seed=s, best=b + s / 1000) for a, b in (("fedgmh", 0.989), ("fedper", 0.99))
            for s in range(5)]
    results, _ = report.aggregate_runs(dirs, experiment="table2")
    reference = pd.DataFrame([{"table": "table2", "dataset": "MNIST", "C": 2, "alpha": 0.5, "algorithm": name, "local_epochs": 2,
                               "join_ratio": 0.2, "beta": 0.5, "eta_h": 1.0, "mean": mean, "std": 0.1}
                              for name, mean in (("FedGMH", 98.66), ("FedPer", 98.42))])
    drawn = seed_rows.plot_seed_rows([("ours", results)], reference, "table2", ["mnist_c2_a0.5"], ["fedgmh", "fedper"],
                                     tmp_path / "f.pdf")
    assert drawn == 10
    ax = figs[0].axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["FedPer", "FedPer, paper", "FedGMH", "FedGMH, paper"]
    dots = [line for line in ax.get_lines() if line.get_marker() == "o"]
    assert [len(line.get_xdata()) for line in dots] == [5, 5]
    assert sorted(float(x) for x in dots[0].get_xdata()) == pytest.approx([99.0, 99.1, 99.2, 99.3, 99.4])  # FedPer, bottom row
    bars = [float(line.get_xdata()[0]) for line in ax.get_lines() if line.get_marker() == "|" and len(line.get_ydata()) == 1
            and line.get_markersize() > 10]  # not the error bars' caps
    assert bars == pytest.approx([99.2, 99.1])
    diamonds = [float(line.get_xdata()[0]) for line in ax.get_lines() if line.get_marker() == "D"]
    assert diamonds == pytest.approx([98.42, 98.66])
    assert "99.20 ± 0.14 (5)" in [t.get_text() for t in ax.texts]


@pytest.mark.parametrize("seeds", [1, 2])
def test_a_sweep_is_one_line_per_method_over_the_parameter_with_the_spread_said(monkeypatch: pytest.MonkeyPatch,
                                                                                  tmp_path: Path, seeds: int) -> None:
    import matplotlib.collections

    from fedgmh import report
    from fedgmh.report import sweeps
    from test_report import make_run

    figs: list = []
    monkeypatch.setattr(sweeps, "save_figure", lambda fig, out, png=None: figs.append(fig))
    dirs = [make_run(tmp_path / "runs", experiment="table4", dataset="cifar100", c=5, algorithm=a, seed=s, join_ratio=rho,
                     best=b + rho / 10 + s / 100)
            for a, b in (("fedavg", 0.1), ("fedgmh", 0.7)) for rho in (0.4, 1.0) for s in range(seeds)]
    results, _ = report.aggregate_runs(dirs, experiment="table4")
    reference = pd.DataFrame([{"table": "table4", "dataset": "Cifar100", "C": 5, "alpha": 0.5, "algorithm": "FedGMH", "local_epochs": 2,
                               "join_ratio": rho, "beta": 0.5, "eta_h": 1.0, "mean": 80.0, "std": 0.3} for rho in (0.4, 1.0)])
    assert sweeps.plot_sweep(results, reference, "table4", tmp_path / "f.pdf", title="Table 4") == 2
    ax = figs[0].axes[0]
    means = [line for line in ax.get_lines() if line.get_linestyle() == "-" and len(line.get_xdata()) == 2]
    assert [list(line.get_xdata()) for line in means] == [[0.4, 1.0], [0.4, 1.0]]
    assert [float(t) for t in ax.get_xticks()] == [0.4, 1.0] and ax.get_xlabel() == "rho"
    bands = [c for c in ax.collections if isinstance(c, matplotlib.collections.PolyCollection)]
    title = figs[0].texts[0].get_text()
    assert title.startswith("Table 4: one line per method over rho; ")
    if seeds == 1:
        assert not bands and title.endswith("one seed per point: no spread to draw")
    else:
        assert len(bands) == 2 and title.endswith("shaded: ±1 std over seeds")
    assert len(ax.containers) == 1  # the paper's FedGMH, with its ± std


def test_a_curve_hidden_under_fedgmhs_line_is_said_in_the_legend(drawn: list, tmp_path: Path) -> None:
    curves = _curves({"fedgmh": 0.78, "gmh_a": 0.781, "gmh_oa": 0.80})
    figures.plot_curves(curves, tmp_path / "f.pdf")
    legend = [text.get_text() for text in drawn[0].legends[0].get_texts()]
    assert [t for t in legend if "under" in t] == ["GMH-a (3 seeds)\nunder FedGMH's line (mean gap 0.08 points)"]  # 0.1 * the mean of 1 - exp(-r / 20)
