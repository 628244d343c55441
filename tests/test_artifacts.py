"""A report artifact is one declaration in fedgmh.report.artifacts: collected there, made a rule by
report.smk, asked for by all_tables / all_figures / report_pdf as its kind says, and found in the
places docs/artifacts.md's "Adding a table" names (as tests/test_registry.py checks them for algorithms)."""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

import fedgmh.report.artifacts
from conftest import REPO_ROOT, artifact_args, load_config, snakemake
from fedgmh.cli import main
from fedgmh.plan import Plan
from fedgmh.report.artifact import KINDS
from fedgmh.report.artifacts import artifacts, in_document

REPO = REPO_ROOT
PAPER = REPO / "config" / "config.yaml"
CAPTIONS = REPO / "workflow" / "report"

#: a new artifact: the number of runs of each experiment, as one CSV
RUN_COUNT = '''
from fedgmh.report.artifact import Artifact, Output, aggregated, one


def write(inputs, outputs, params):
    import pandas as pd

    results = pd.read_csv(one(inputs, "results"))
    results.groupby("algorithm").size().rename("runs").to_csv(one(outputs, "csv"))
    return f"run count: {len(results)} runs -> {one(outputs, 'csv')}"


ARTIFACTS = (Artifact(name="run_count", kind="table", wildcard="experiment", outputs={"csv": Output("{experiment}.runs.csv")},
                      inputs=lambda plan, experiment: {"results": [aggregated(plan, experiment)]},
                      instances=lambda plan: list(plan.config["experiments"]), write=write),)
'''


def test_every_artifact_is_declared_whole() -> None:
    """Its kind is known, its report entries have a caption file, its config key is a schema key, a
    wildcard appears in its outputs, and what report_pdf takes of it is one of its outputs."""
    schema = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())
    for name, artifact in artifacts().items():
        assert artifact.kind in KINDS, name
        for output in artifact.outputs.values():
            assert output.entry is None or (CAPTIONS / output.entry.caption).is_file(), (name, output.entry)
            assert ("{" + artifact.wildcard + "}" in output.path) if artifact.wildcard else "{" not in output.path, (name, output.path)
        assert artifact.switch is None or artifact.switch in schema["properties"], (name, artifact.switch)
        assert artifact.document is None or artifact.document in artifact.outputs, name
        assert artifact.caption is None or artifact.kind == "figure" and artifact.document, name


def test_the_workflow_asks_for_every_artifact_as_its_kind_says(tmp_path: Path) -> None:
    """The paper config makes every artifact but report_pdf: each instance's outputs are outputs of its rule
    in a dry run of all_tables (tables) or all_figures (figures), never of the other, and report_pdf reads the
    output each artifact puts into the document."""
    plan = Plan(load_config("config.yaml"), basedir=REPO)
    dry = {}
    for target in ("all_tables", "all_figures", "report_pdf"):
        result = snakemake(tmp_path, "-n", target, "--cores", "1", "--configfile", str(PAPER), timeout=300)
        out = result.stdout + result.stderr
        assert result.returncode == 0, out[-3000:]
        dry[target] = out
    made = {target: {path for line in out.splitlines() if line.strip().startswith("output:")
                     for path in line.split(":", 1)[1].replace(",", " ").split()} for target, out in dry.items()}
    for name, artifact in artifacts().items():
        files = artifact.all_files(plan)
        if artifact.kind == "document":
            assert not files and set(artifact.files(plan)) <= made["report_pdf"], name
            continue
        assert files, f"the paper config makes no {name}: this test cannot check it"
        own, other = ("all_tables", "all_figures") if artifact.kind == "table" else ("all_figures", "all_tables")
        assert set(files) <= made[own], (name, sorted(set(files) - made[own])[:3])
        assert not set(files) & made[other], name
    block = dry["report_pdf"].split("rule report_pdf:", 1)[1]
    report_inputs = next(line for line in block.splitlines() if line.strip().startswith("input:"))
    for artifact in in_document():
        for instance in artifact.instances(plan):
            path = artifact.file(plan, artifact.document, instance)
            assert path in report_inputs, (artifact.name, path)


def test_docs_name_every_place_of_an_artifact() -> None:
    """docs/artifacts.md's "Adding a table" names the declaration, the test and the places it asks for."""
    text = (REPO / "docs" / "artifacts.md").read_text()
    section = text[text.index("## Adding a table"):]
    section = section[:section.index("\n## ", 3)] if "\n## " in section[3:] else section
    for place in ("src/fedgmh/report/artifact.py", "src/fedgmh/report/artifacts/", "ARTIFACTS", "write", "workflow/report/",
                  "tests/test_artifacts.py", "all_tables", "all_figures", "report_pdf"):
        assert place in section, place


@pytest.fixture
def run_count(monkeypatch, tmp_path):
    """`artifacts/run_count.py` in a folder the package searches, as a new file of the source tree would be."""
    folder = tmp_path / "artifacts"
    folder.mkdir()
    (folder / "run_count.py").write_text(textwrap.dedent(RUN_COUNT))
    package = fedgmh.report.artifacts
    monkeypatch.setattr(package, "__path__", [*package.__path__, str(folder)])
    artifacts.cache_clear()
    yield
    sys.modules.pop("fedgmh.report.artifacts.run_count", None)
    artifacts.cache_clear()


def test_an_artifact_of_one_module_is_collected_and_written(run_count, tmp_path: Path) -> None:
    """A new module is one more artifact: its files are the plan's, and `fedgmh artifact` runs its write."""
    artifact = artifacts()["run_count"]
    plan = Plan(load_config("smoke.yaml"), basedir=REPO)
    assert artifact.files(plan, "table2") == ["paper_artifacts/smoke/table2.runs.csv"]
    assert len(artifact.all_files(plan)) == len(plan.config["experiments"])
    results = tmp_path / "results.csv"
    results.write_text("algorithm,seed\nfedavg,0\nfedavg,1\nfedgmh,0\n")
    assert main(artifact_args("run_count", {"results": results}, {"csv": tmp_path / "runs.csv"}, {})) == 0
    assert re.findall(r"(\w+),(\d+)", (tmp_path / "runs.csv").read_text()) == [("fedavg", "2"), ("fedgmh", "1")]


def test_an_unknown_artifact_or_a_job_that_is_not_json_is_one_line(capsys) -> None:
    assert main(["artifact", "tabel", "--job", "{}"]) == 2
    assert "no artifact 'tabel'; artifacts: " in capsys.readouterr().err
    assert main(["artifact", "table", "--job", "{"]) == 2
    assert "--job is not JSON" in capsys.readouterr().err
