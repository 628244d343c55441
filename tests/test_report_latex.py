"""The reports' one LaTeX writer, the accuracy a table reports, the tables beside the paper's values,
and the LaTeX document of every table and figure (compiled where a TeX engine is installed)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import artifact_args

from fedgmh import report
from fedgmh.cli import main as cli_main
from fedgmh.errors import UserError
from fedgmh.report.latex import latex_table, tex

from test_report import make_run

REFERENCE = pd.DataFrame({
    "table": ["table2", "table2"], "dataset": ["MNIST", "Cifar100"], "C": [2, 5], "alpha": [0.5, 0.5],
    "algorithm": ["FedGMH", "FedGMH"], "local_epochs": [2, 2], "join_ratio": [0.2, 0.2], "beta": [0.5, 0.5],
    "eta_h": [1.0, 1.0], "mean": [98.66, 77.54], "std": [0.09, 0.33],
})


@pytest.fixture()
def results(tmp_path: Path) -> pd.DataFrame:
    dirs = [make_run(tmp_path, algorithm=alg, seed=0, best=best) for alg, best in (("fedavg", 0.5), ("fedgmh", 0.9))]
    return report.aggregate_runs(dirs, experiment="table2")[0]


def test_tex_escapes_and_translates_symbols() -> None:
    assert tex("98.66 ± 0.12 (n=4)") == r"98.66 $\pm$ 0.12 (n=4)"
    assert tex("70% of η_h & ρ_1 — #2") == r"70\% of $\eta_h$ \& $\rho$\_1 -- \#2"
    assert tex("|Δ| ≤ 2·√(x²)") == r"$|$$\Delta$$|$ $\le$ 2$\cdot$$\surd$(x$^2$)"


def test_latex_table_bold_corner_and_notes() -> None:
    frame = pd.DataFrame({("MNIST", "ExDir(2, 0.5)"): ["1.00", "2.00"]}, index=["FedAvg", "LG_FedAvg"])
    frame.columns = pd.MultiIndex.from_tuples(frame.columns)
    bold = pd.DataFrame([[False], [True]], index=frame.index, columns=frame.columns)
    latex = latex_table(frame, "Best: 2%", "tab:x", corner="Method", bold=bold, notes=["∗ a note"], size="small")
    assert r"\caption{Best: 2\%}" in latex and r"\label{tab:x}" in latex and r"\small" in latex
    assert "Method & \\multicolumn{1}{c}{MNIST}" in latex or "Method & MNIST" in latex
    assert r"LG\_FedAvg & \textbf{2.00}" in latex and "FedAvg & 1.00" in latex
    assert r"$^\ast$ a note" in latex and latex.index("a note") < latex.index(r"\end{table}")
    long = latex_table(pd.DataFrame({"A": ["x"]}), "c", "tab:y", long=True)
    assert r"\begin{longtable}" in long and "Needs \\usepackage{booktabs, longtable}" in long


def test_table_accuracy_best_last_or_mean_of_last_rounds(results: pd.DataFrame) -> None:
    # make_run: accuracy rises linearly to `best` in the second-to-last round, then drops by 0.01
    cells = {acc: report.make_table(results, "table2", accuracy=acc)["cells"].set_index("algorithm").loc["fedgmh"]
             for acc in ("best", "last", "last10")}
    assert cells["best"]["mean"] == pytest.approx(90.0) and cells["last"]["mean"] == pytest.approx(89.0)
    assert cells["last10"]["mean"] == pytest.approx(100 * np.mean([*np.linspace(0.1, 0.9, 6)[:-2], 0.9, 0.89]))
    assert "the last round" in report.make_table(results, "table2", accuracy="last")["caption"]
    assert "best test accuracy" in report.make_table(results, "table2")["caption"]  # the default: the paper's
    with pytest.raises(UserError, match="not one of best, last, last10"):
        report.make_table(results, "table2", accuracy="median")


def test_one_seed_has_no_std_anywhere(results: pd.DataFrame, tmp_path: Path) -> None:
    table = report.make_table(results, "table2", reference=REFERENCE)
    assert r"$\pm$" not in table["latex"].split(r"\midrule")[1] and "±" not in table["wide"].to_csv()
    beside = table["beside"]
    assert r"98.66 $\pm$ 0.09" in beside and r"\textbf{90.00 (n=1)}" in beside  # the paper's value beside ours
    assert beside.count("ours") == 1 and beside.count("paper") >= 1
    results_csv, ref_csv = tmp_path / "r.csv", tmp_path / "ref.csv"
    results.to_csv(results_csv, index=False)
    REFERENCE.to_csv(ref_csv, index=False)
    assert cli_main(["compare", "--results", str(results_csv), "--reference", str(ref_csv), "--out", str(tmp_path / "c.md"),
                     "--tex", str(tmp_path / "c.tex")]) == 0
    assert "± 0.00" not in (tmp_path / "c.md").read_text() and r"$\pm$ 0.00" not in (tmp_path / "c.tex").read_text()


def test_rounds_to_target_fits_a_page() -> None:
    from test_report import _curves

    curves = _curves({(alg, 0): [0.01, 0.2, 0.3] for alg in report.algorithm_order()[:12]})
    table = report.rounds_to_target(curves, "table2", "cifar100_c5_a0.5", [70, 75], paper={"fedgmh": [68, 185]})
    from fedgmh.report.to_target import rounds_latex

    latex = rounds_latex(table)
    rows = [line for line in latex.splitlines() if line.endswith(r"\\") and " & " in line]
    assert max(len(row) for row in rows) < 100  # about a text width at the table's font size
    assert "not reached" not in latex.split(r"\caption")[0] and "CIFAR-100 ExDir(5, 0.5)" in latex


def test_costs_latex_uses_display_names() -> None:
    from fedgmh.costs import cost_table
    from fedgmh.report.cost_tables import costs_latex

    latex = costs_latex(cost_table(["cifar100"]))
    assert "CIFAR-100" in latex and "cifar100" not in latex.replace("tab:costs-cifar100", "")
    assert "LG-FedAvg" in latex and latex.index("FedAvg &") < latex.index("FedGMH &")


def _document(tmp_path: Path, results: pd.DataFrame) -> Path:
    results_csv, ref_csv = tmp_path / "table2.results.csv", tmp_path / "ref.csv"
    results.to_csv(results_csv, index=False)
    REFERENCE.to_csv(ref_csv, index=False)
    _, curves = report.aggregate_runs(list(results["run_dir"]), experiment="table2")
    art = tmp_path / "art"
    report.plot_curves(curves, art / "figure3.pdf")
    assert cli_main(["costs", "--out", str(art / "costs.csv"), "--tex", str(art / "costs.tex"), "--dataset", "mnist"]) == 0
    heatmap = art / "partitions" / "mnist_c2_a0.5.pdf"
    heatmap.parent.mkdir()
    heatmap.write_bytes((art / "figure3.pdf").read_bytes())
    tex_path = art / "report.tex"
    job = artifact_args("report_pdf", {"results": results_csv, "reference": ref_csv, "tables": art / "costs.tex",
                                       "figures": [art / "figure3.pdf", heatmap]}, {"tex": tex_path},
                        {"title": "FedGMH reproduction: tables and figures", "titles": {"table2": "Table 2 (test)"},
                         "captions": {"figure3": "Figure 3 (test): accuracy per round"}, "accuracy": "best", "latex_log": None})
    assert cli_main(job) == 0
    return tex_path


def test_document_holds_every_table_and_figure(results: pd.DataFrame, tmp_path: Path) -> None:
    text = _document(tmp_path, results).read_text()
    assert text.startswith(r"\documentclass") and text.rstrip().endswith(r"\end{document}")
    assert r"Table 2 (test)" in text and r"98.66 $\pm$ 0.09" in text  # the paper's value beside ours
    assert "Section 2.3" in text and r"\includegraphics" in text and "{figure3.pdf}" in text
    assert r"\caption{Figure 3 (test): accuracy per round}" in text
    # one numbering, the paper's in the titles: LaTeX adds no "Table 1:" before "Table 2 (test)"
    assert "labelformat=empty" in text and r"\caption{Table 2 (test): best test accuracy (\%) over all evaluated rounds" in text
    assert "Bold: best mean" in text and not re.search(r"\\caption\{[^}]*Bold", text)  # how to read it: under the table
    assert r"\pdfinfoomitdate=1" in text and "\\today" not in text  # no date in the PDF, none in the text
    assert "Partition: samples per class and client, MNIST ExDir(2, 0.5)" in text
    with pytest.raises(UserError, match="not found"):
        report.document.build_document(tmp_path / "x.tex", "t", [], inputs=[tmp_path / "missing.tex"])


@pytest.mark.parametrize("stem, caption", [
    ("mnist_c2_a0.5", "MNIST ExDir(2, 0.5)."),
    ("cifar100_c50_a1000000_n20", "CIFAR-100 ExDir(50, 1000000), 20 clients."),
    ("fashion_mnist_c4_a1000000_n10_chain", "Fashion-MNIST chain(4, 1000000), 10 clients."),
])
def test_every_partition_heat_map_gets_a_caption_in_words(stem: str, caption: str) -> None:
    from fedgmh.report.document import figure_caption

    assert figure_caption(Path(f"partitions/{stem}.pdf")) == f"Partition: samples per class and client, {caption}"


def test_pdf_without_tex_engine_is_a_clear_error(monkeypatch, tmp_path: Path) -> None:
    from fedgmh.report import document

    monkeypatch.setattr(document, "tex_engine", lambda: None)
    (tmp_path / "a.tex").write_text("x")
    with pytest.raises(UserError, match="latexmk not found"):
        document.compile_pdf(tmp_path / "a.tex", tmp_path / "a.pdf")


@pytest.mark.slow
def test_document_compiles_to_pdf(results: pd.DataFrame, tmp_path: Path) -> None:
    from fedgmh.report.document import compile_pdf, tex_engine

    if tex_engine() is None:
        pytest.skip("no TeX engine (latexmk) installed: apt-get install latexmk texlive-latex-base texlive-latex-recommended "
                    "texlive-latex-extra")
    tex_path = _document(tmp_path, results)
    pdf = compile_pdf(tex_path, tmp_path / "report.pdf", log=tmp_path / "latexmk.log")
    assert pdf.read_bytes().startswith(b"%PDF") and pdf.stat().st_size > 10_000
    assert "Warning: Reference" not in (tmp_path / "latexmk.log").read_text()


def test_the_claims_table_breaks_no_word_with_a_hyphen() -> None:
    from fedgmh.report.claims_report import claims_latex, read_claims_table
    from fedgmh.report.document import PREAMBLE

    latex = claims_latex(read_claims_table(Path(__file__).resolve().parents[1] / "paper_artifacts/mini/claims.csv"))
    spec = re.search(r"\\begin\{longtable\}\{(.*)\}\n", latex)[1]
    assert spec.count(r"\hyphenpenalty=10000") == 4 and spec.count(r"\raggedright") == 4  # every column
    assert "array" in latex.splitlines()[1] and r"\usepackage{array," in PREAMBLE
