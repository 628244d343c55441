"""Bad input to the report commands ends in one line (exit status 2), never a traceback, a silently wrong
result or a half-written set of outputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import REPO_ROOT, artifact_args, cli_error
from test_report import make_run

from fedgmh.cli import main

REFERENCE = str(REPO_ROOT / "reference" / "fedgmh_paper_tables.csv")
CLAIMS = str(REPO_ROOT / "reference" / "fedgmh_paper_claims.yaml")
CELL = ["--experiment", "table2", "--setting", "mnist_c2_a0.5"]


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    """Two methods x two seeds of MNIST C=2 alpha=0.5 (runs/), their results.csv and curves.csv, and `afile`,
    a file where an output's folder should be."""
    root = tmp_path_factory.mktemp("bad_input")
    runs = [str(make_run(root / "runs", algorithm=a, seed=s, best=b)) for a in ("fedavg", "fedgmh") for s, b in ((0, 0.8), (1, 0.85))]
    (root / "runs.txt").write_text("\n".join(runs))
    assert main(["aggregate", "--runs", *runs, "--out", str(root / "results.csv"), "--curves", str(root / "curves.csv")]) == 0
    (root / "afile").write_text("a file")
    return root


def _runs(made: Path) -> list[str]:
    return (made / "runs.txt").read_text().split("\n")


@pytest.mark.parametrize("command", ["curves", "seeds"])
def test_a_figure_format_matplotlib_cannot_write_is_refused_before_anything_is_written(made, tmp_path, capsys, command):
    pdf, bad = tmp_path / "f.pdf", tmp_path / "f.xyz"
    if command == "curves":
        args = ["curves", "--curves", str(made / "curves.csv")]
    else:
        args = ["seeds", "--results", str(made / "results.csv"), "--reference", REFERENCE, *CELL, "--algorithm", "fedavg"]
    assert "matplotlib cannot write .xyz files; give a name ending in" in cli_error(capsys, [*args, "--out", str(bad)])
    assert "f.xyz: matplotlib cannot write" in cli_error(capsys, [*args, "--out", str(pdf), "--png", str(bad)])
    assert not pdf.exists() and not bad.exists()


PAPER_ERRORS = [
    ("[1, 2]", "--paper is an array, not an object of algorithm -> rounds"),
    ('{"fedavg": "x"}', "--paper 'fedavg': give an array of 1 round(s), one per --target (null: none), not \"x\""),
    ('{"fedavg": [1, 2]}', "--paper 'fedavg': give an array of 1 round(s)"),
    ('{"fedavg": ["x"]}', "--paper 'fedavg': \"x\" is not a round (a number >= 0, or null)"),
    ('{"fedavg": [NaN]}', "--paper 'fedavg': NaN is not a round"),
    ('{"fedavg": [-3]}', "--paper 'fedavg': -3 is not a round"),
    ('{"fedavg": [true]}', "--paper 'fedavg': true is not a round"),
]


@pytest.mark.parametrize("paper, message", PAPER_ERRORS)
@pytest.mark.parametrize("command", ["curves", "rounds"])
def test_paper_rounds_of_the_wrong_shape_are_refused_naming_the_option(made, tmp_path, capsys, command, paper, message):
    out = tmp_path / ("f.pdf" if command == "curves" else "r.tex")
    cell = ["--experiment", "table2"] if command == "curves" else CELL
    args = [command, "--curves", str(made / "curves.csv"), *cell, "--target", "70", "--paper", paper, "--out", str(out)]
    assert message in cli_error(capsys, args)
    assert not out.exists()


@pytest.mark.parametrize("command", ["curves", "rounds"])
@pytest.mark.parametrize("targets, message", [(["70", "70"], "target accuracy 70 is given twice"),
                                              (["70", "nan"], "target accuracy nan is not a percentage in (0, 100]"),
                                              (["200"], "target accuracy 200.0 is not a percentage in (0, 100]")])
def test_repeated_or_impossible_targets_are_refused(made, tmp_path, capsys, command, targets, message):
    out = tmp_path / ("f.pdf" if command == "curves" else "r.tex")
    cell = ["--experiment", "table2"] if command == "curves" else CELL
    assert message in cli_error(capsys, [command, "--curves", str(made / "curves.csv"), *cell, "--target", *targets, "--out", str(out)])
    assert not out.exists()


TABLE_PARAMS = {"experiment": "table2", "title": "T", "accuracy": "best"}


@pytest.mark.parametrize("job, message", [
    ("[]", '--job is an array, not an object {"input": {...}, "output": {...}, "params": {...}}'),
    ("{}", "--job's 'input' is missing"),
    ('{"input": "x"}', "--job's 'input' is a string, not an object"),
    ('{"input": {}, "output": {}, "params": []}', "--job's 'params' is an array, not an object"),
    ('{"input": {"results": "r.csv"}, "output": {}, "params": {}}', "--job's input.results is not an array of paths"),
    ('{"input": {}, "output": {}, "params": {}}', "--job gives no 'tex' path"),
    (json.dumps({"input": {"results": ["r.csv"]}, "output": {"tex": ["t.tex"]}, "params": {}}), "--job's params lack 'experiment'"),
    (json.dumps({"input": {}, "output": {"tex": ["t.tex"]}, "params": TABLE_PARAMS}), "--job gives no 'results' path"),
])
def test_a_malformed_artifact_job_is_one_line_naming_the_key(capsys, job, message):
    assert message in cli_error(capsys, ["artifact", "table", "--job", job])


@pytest.mark.parametrize("clients", ["0", "-1"])
def test_aggregate_refuses_a_number_of_clients_below_one(made, tmp_path, capsys, clients):
    out = tmp_path / "r.csv"
    assert f"--clients {clients}: give a number of clients >= 1" in cli_error(
        capsys, ["aggregate", "--runs", *_runs(made), "--out", str(out), "--clients", clients])
    assert not out.exists()


def test_costs_refuses_a_repeated_dataset(tmp_path, capsys):
    out = tmp_path / "c.csv"
    assert "--dataset mnist is given twice" in cli_error(capsys, ["costs", "--dataset", "mnist", "cifar10", "mnist", "--out", str(out)])
    assert not out.exists()


def test_claims_refuses_an_unknown_unavailable_dataset_suggesting_the_closest(made, tmp_path, capsys):
    out = tmp_path / "claims.md"
    err = cli_error(capsys, ["claims", "--claims", CLAIMS, "--results", str(made / "results.csv"), "--out", str(out),
                             "--csv", str(tmp_path / "claims.csv"), "--unavailable", "cifar10", "mnistt"])
    assert "--unavailable 'mnistt': unknown dataset (did you mean 'mnist'?)" in err
    assert not out.exists()


def _two_outputs(made: Path, first: Path, second: str) -> dict[str, list[str]]:
    """Each command with two outputs: its arguments with `first` as the first output and `second` as the other."""
    results, curves = str(made / "results.csv"), str(made / "curves.csv")
    return {
        "aggregate": ["aggregate", "--runs", *_runs(made), "--out", str(first), "--curves", second],
        "curves": ["curves", "--curves", curves, "--out", str(first), "--png", second],
        "seeds": ["seeds", "--results", results, "--reference", REFERENCE, *CELL, "--algorithm", "fedavg", "--out", str(first),
                  "--png", second],
        "rounds": ["rounds", "--curves", curves, *CELL, "--target", "70", "--out", str(first), "--csv", second],
        "compare": ["compare", "--results", results, "--reference", REFERENCE, "--out", str(first), "--tex", second],
        "claims": ["claims", "--claims", CLAIMS, "--results", results, "--out", str(first), "--csv", second],
        "costs": ["costs", "--dataset", "mnist", "--out", str(first), "--tex", second],
    }


SUFFIXES = {"aggregate": ".csv", "curves": ".pdf", "seeds": ".pdf", "rounds": ".tex", "compare": ".md", "claims": ".md", "costs": ".csv"}


@pytest.mark.parametrize("command", list(SUFFIXES))
def test_a_second_output_that_cannot_be_written_leaves_no_first_one(made, tmp_path, capsys, command):
    first = tmp_path / f"first{SUFFIXES[command]}"
    blocked = str(made / "afile" / "second.png")
    err = cli_error(capsys, _two_outputs(made, first, blocked)[command])
    assert f"output {blocked}: folder {made / 'afile'} is a file, not a folder" in err
    assert not first.exists()
    assert "is named twice" in cli_error(capsys, _two_outputs(made, first, str(first))[command])
    assert not first.exists()


def test_an_output_that_is_a_folder_is_refused_before_the_other_is_written(made, tmp_path, capsys):
    first = tmp_path / "r.tex"
    err = cli_error(capsys, ["rounds", "--curves", str(made / "curves.csv"), *CELL, "--target", "70", "--out", str(first),
                             "--csv", str(tmp_path)])
    assert f"output {tmp_path} is a folder; give a file name" in err
    assert not first.exists()


def test_a_table_artifact_checks_every_output_first(made, tmp_path, capsys):
    tex = tmp_path / "t.tex"
    args = artifact_args("table", {"results": made / "results.csv"}, {"tex": tex, "csv": made / "afile" / "t.csv"}, TABLE_PARAMS)
    assert "is a file, not a folder" in cli_error(capsys, args)
    assert not tex.exists()
