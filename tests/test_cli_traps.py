"""The command line's traps for a new user (issue: the first hour): no untrained records, progress
lines that read right, a suggestion for a misspelt name, the dataset taken from the partition file."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedgmh.cli import main
from fedgmh.errors import did_you_mean


@pytest.fixture
def setup(digits_root, digits_partition) -> tuple[Path, Path]:
    """The embedded data set and a partition of it (conftest)."""
    return digits_root, digits_partition


def _train(setup: tuple[Path, Path], out: Path, *extra: str, rounds: str = "1") -> list[str]:
    root, partition = setup
    return ["train", "--root", str(root), "--partition", str(partition), "--rounds", rounds,
            "--local-epochs", "1", "--join-ratio", "0.5", "--threads", "1", "--out", str(out), *extra]


def _error(capsys, argv: list[str]) -> str:
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    return err


def test_zero_rounds_is_refused_before_anything_is_written(setup, tmp_path, capsys):
    err = _error(capsys, _train(setup, tmp_path / "run", "--algorithm", "fedavg", rounds="0"))
    assert "rounds must be >= 1" in err and not (tmp_path / "run" / "run.json").exists()


def test_progress_lines_are_in_percent_and_say_n_a_for_the_untrained_final_round(setup, tmp_path, capsys):
    capsys.readouterr()
    assert main(_train(setup, tmp_path / "run", "--algorithm", "fedavg", "--dataset", "digits", rounds="2")) == 0
    out, err = capsys.readouterr()
    lines = [line.split(" |")[0] for line in err.splitlines() if line.startswith("[fedavg] round")]
    assert len(lines) == 3 and all(" % best " in line for line in lines), lines
    assert lines[-1].endswith("train_loss n/a") and "nan" not in err.lower()  # round 2 only evaluates
    assert all(not line.endswith("train_loss n/a") for line in lines[:-1])
    assert " % at round " in out  # the summary line in percent, as the tables


@pytest.mark.parametrize("argv,suggestion", [
    (["--algorithm", "fedgmhh"], "did you mean 'fedgmh'?"),
    (["--algorithm", "FedGMH"], "did you mean 'fedgmh'?"),
    (["--algorithm", "fedavg", "--dataset", "MNIST"], "did you mean 'mnist'?"),
    (["--algorithm", "fedgmh", "--set", "betta=0.3"], "did you mean 'beta'?"),
    (["--algorithm", "fedavg", "--set", "drop-last=true"], "did you mean 'drop_last'?"),
])
def test_a_misspelt_name_gets_the_closest_one(setup, tmp_path, capsys, argv, suggestion):
    assert suggestion in _error(capsys, _train(setup, tmp_path / "run", *argv))


def test_no_suggestion_for_a_name_far_from_every_known_one():
    assert did_you_mean("imagenet", ["mnist", "cifar10"]) == ""
    assert did_you_mean("Cifar-100", ["cifar10", "cifar100"]) == " (did you mean 'cifar100'?)"


def test_the_dataset_comes_from_the_partition_file_and_a_different_one_is_refused(setup, tmp_path, capsys):
    import json

    capsys.readouterr()
    assert main(_train(setup, tmp_path / "run", "--algorithm", "fedavg")) == 0  # no --dataset
    assert json.loads((tmp_path / "run" / "run.json").read_text())["config"]["dataset"] == "digits"
    err = _error(capsys, _train(setup, tmp_path / "other", "--algorithm", "fedavg", "--dataset", "mnist"))
    assert "was made for dataset 'digits', not 'mnist'" in err
