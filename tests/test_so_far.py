"""fedgmh.so_far: which committed records count for each table and reading, what they give, and the
workflow target `so_far` that writes it (a dry run in a folder of empty records: nothing is trained).
tests/test_committed_records.py checks that the committed paper_artifacts/paper/so_far/ is up to date."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from conftest import REPO_ROOT, job_counts, snakemake

from fedgmh.errors import UserError
from fedgmh.so_far import SoFar

ALWAYS = ["table2_results.csv", "comparison.md", "comparison.csv", "claims.md", "claims.csv"]


def _record(config: str, experiment: str, setting: str, algorithm: str, seed: str = "seed0") -> str:
    """An empty record in the working directory (discovery reads only the folders)."""
    folder = Path("paper_artifacts") / config / "runs" / experiment / setting / algorithm / seed
    folder.mkdir(parents=True)
    for name in ("run.json", "metrics.csv"):
        (folder / name).touch()
    return folder.as_posix()


def _folders(records) -> list[str]:
    return [record.folder for record in records]


def test_which_records_count_for_each_table_and_reading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    cifar, mnist, official = "cifar100_c5_a0.5", "mnist_c2_a0.5", "cifar100_c5_a0.5@official"
    both = _record("paper", "table2", mnist, "fedavg")
    _record("table2_mnist", "table2", mnist, "fedavg")  # the same run: paper/'s counts
    only_mnist = _record("table2_mnist", "table2", mnist, "fedper")
    _record("paper", "table2", mnist, "fedavg", "seed1-0123abcd")  # filed beside another run's: not Table 2's
    fedgmh = _record("paper", "table2", cifar, "fedgmh")
    _record("paper", "table2", "mnist_c2_a5", "fedgmh")  # no ablation on MNIST: not in Table 5
    ablation = _record("paper", "table5", cifar, "gmh_o")
    table2_official = _record("paper", "table2_pflib", official, "fedgmh")
    _record("paper", "table2_pflib", "cifar100_c5_a0.5@paper", "fedamp")  # another variant: not PFLlib's reading
    held = _record("paper", "table5_pflib", official, "fedgmh")  # Table 2's reading has this run
    stand_in = _record("paper", "table5_pflib", official, "fedgmh", "seed1")  # ... not this one

    so_far = SoFar.discover()
    assert _folders(so_far.table2) == [fedgmh, both, only_mnist, "paper_artifacts/paper/runs/table2/mnist_c2_a5/fedgmh/seed0"]
    assert _folders(so_far.table5) == [ablation, fedgmh]
    assert _folders(so_far.table2_official) == [table2_official, stand_in]
    assert _folders(so_far.table5_official) == [held, stand_in]
    assert sorted(so_far.outputs()) == sorted(ALWAYS + [
        "table5_results.csv", "figure3.pdf", "figure3.png", "rounds_to_target.tex", "rounds_to_target.csv", "figure4.pdf",
        "figure4.png", "table2_pflib_results.csv", "figure3_official.pdf", "figure3_official.png", "rounds_to_target_official.tex",
        "rounds_to_target_official.csv", "table5_pflib_results.csv", "figure4_official.pdf", "figure4_official.png",
        "comparison_pflib.md", "comparison_pflib.csv", "claims_pflib.csv", "fedgmh_fedper_mnist.pdf", "fedgmh_fedper_mnist.png"])


def test_what_is_written_follows_the_records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match="no full-protocol record of Table 2"):
        SoFar.discover().write("out")
    _record("paper", "table2", "mnist_c2_a0.5", "fedavg")
    assert SoFar.discover().outputs() == ALWAYS  # no CIFAR-100 run, no FedGMH or FedPer, no other reading
    _record("table2_mnist", "table2", "mnist_c2_a5", "fedper")
    assert SoFar.discover().outputs() == ALWAYS + ["fedgmh_fedper_mnist.pdf", "fedgmh_fedper_mnist.png"]


def test_the_workflow_target_writes_the_files_of_the_records_found_and_trains_nothing(tmp_path: Path,
                                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _record("paper", "table2", "cifar100_c5_a0.5", "fedgmh")
    shutil.copytree(REPO_ROOT / "reference", tmp_path / "reference")
    shutil.copytree(REPO_ROOT / "config", tmp_path / "config")
    done = snakemake(tmp_path, "so_far", "-n", "--cores", "1", "--configfile", str(REPO_ROOT / "config" / "config.yaml"),
                     "--config", "so_far_out=elsewhere/so_far")
    assert done.returncode == 0, done.stderr
    assert job_counts(done.stdout + done.stderr) == {"so_far": 1, "total": 1}
    outputs = re.search(r"^\s+output: (.*)$", done.stdout + done.stderr, re.MULTILINE)[1].split(", ")
    assert outputs == [f"elsewhere/so_far/{name}" for name in SoFar.discover().outputs()]
    assert "figure3.pdf" in " ".join(outputs)
