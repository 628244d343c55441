"""A run folder holds one run's record: `train --overwrite` replaces all of it, a run in which nothing
trained is never recorded, and a snapshot whose metric rows were edited is not resumed."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch
from conftest import prepare_digits, stopping_after_a_snapshot, train_args

from fedgmh.cli import main
from fedgmh.engine import Checkpoint, run_rounds
from fedgmh.errors import UserError


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """The embedded data set and a 4-client partition of it."""
    return prepare_digits(tmp_path_factory.mktemp("run_folder"))


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert err and "Traceback" not in "\n".join(err)
    return err[-1]


def test_overwrite_leaves_nothing_of_the_old_runs_record(setup, tmp_path):
    out = tmp_path / "run"
    assert main(train_args(setup, out)) == 0
    # an algorithm's own table (pFedLA's layer_weights.csv) and a client table of the old run
    pd.DataFrame({"layer": ["conv1"], "weight": [0.5]}).to_csv(out / "layer_weights.csv", index=False)
    old_clients = (out / "clients.csv").read_bytes()
    assert main(train_args(setup, out, "--lr", "0.2", "--overwrite")) == 0
    assert not (out / "layer_weights.csv").exists()
    assert json.loads((out / "run.json").read_text())["config"]["lr"] == 0.2
    assert (out / "clients.csv").read_bytes() != old_clients


def test_a_folder_without_a_finished_record_loses_its_stray_tables(setup, tmp_path):
    """What the workflow sees after Snakemake removed run.json and metrics.csv of an edited run."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "layer_weights.csv").write_text("layer,weight\nconv1,0.5\n")
    (out / "notes.csv").write_text("what,kept\na user's own file,yes\n")  # not a record's table: left alone
    assert main(train_args(setup, out)) == 0
    assert sorted(p.name for p in out.iterdir()) == ["clients.csv", "metrics.csv", "notes.csv", "run.json"]


def test_a_snapshot_of_other_settings_is_refused_and_replaced_with_overwrite(setup, tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    snapshot = out / "checkpoint.pt"
    Checkpoint(snapshot, 1, {"lr": 0.2}).save({"rows": [], "next_round": 1})  # a cut-off run of other settings
    assert main(train_args(setup, out, "--rounds", "3")) != 0
    assert "belongs to a run with other settings" in one_line_error(capsys)
    assert main(train_args(setup, out, "--rounds", "3", "--overwrite")) == 0
    assert "removed" in capsys.readouterr().err
    record = json.loads((out / "run.json").read_text())
    assert record["config"]["rounds"] == 3 and record["resumed_from_round"] is None


def test_a_run_in_which_no_client_can_take_a_step_is_refused(setup, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(train_args(setup, out, "--batch-size", "5000", "--set", "drop_last=true")) != 0
    assert "no client has a full batch of 5000" in one_line_error(capsys)
    assert not (out / "run.json").exists()


def test_rows_that_never_trained_are_not_recorded():
    from fedgmh.train_record import check_trained

    nan = float("nan")
    with pytest.raises(UserError, match="no client took a training step"):
        check_trained([{"round": 0, "train_loss": nan}, {"round": 1, "train_loss": nan}, {"round": 2, "train_loss": nan}], 2)
    check_trained([{"round": 0, "train_loss": nan}, {"round": 1, "train_loss": 0.3}, {"round": 2, "train_loss": nan}], 2)


def test_a_snapshot_with_edited_metric_rows_is_not_resumed(setup, tmp_path, capsys):
    out = tmp_path / "run"
    args = train_args(setup, out, "--rounds", "4", "--checkpoint-every", "2")
    assert main(args) == 0
    reference = pd.read_csv(out / "metrics.csv")
    # keep a mid-run snapshot: run it again and stop right after the snapshot of round 1
    (out / "run.json").unlink()
    with stopping_after_a_snapshot():
        assert main(args) != 0
    capsys.readouterr()
    honest = (out / "checkpoint.pt").read_bytes()
    snapshot = torch.load(out / "checkpoint.pt", weights_only=True)
    assert snapshot["next_round"] == 2 and len(snapshot["rows"]) == 2
    snapshot["rows"][0]["test_acc"] = 0.999  # edited, the checksum kept
    torch.save(snapshot, out / "checkpoint.pt")
    assert main(args) != 0
    assert "do not match its checksum" in one_line_error(capsys)
    # the honest snapshot resumes to the uninterrupted run's numbers
    (out / "checkpoint.pt").write_bytes(honest)
    assert main(args) == 0
    resumed = pd.read_csv(out / "metrics.csv")
    assert json.loads((out / "run.json").read_text())["resumed_from_round"] == 2
    pd.testing.assert_frame_equal(resumed.drop(columns="seconds"), reference.drop(columns="seconds"))


def test_run_rounds_refuses_an_edited_snapshot_directly(tmp_path):
    """The check lives in Checkpoint.load, which every resume goes through (run_rounds included)."""
    from conftest import make_federation

    from fedgmh.algorithms import get_algorithm
    from fedgmh.train import resolve_options

    clients = [[0, 1, 0, 1], [1, 2, 2, 1], [0, 2, 2, 0]]
    algo_options, engine_options = resolve_options("fedavg", {})
    fed = make_federation(clients, num_classes=3, batch_size=2)
    checkpoint = Checkpoint(tmp_path / "ck.pt", 1, {"run": "x"})
    run_rounds(fed, get_algorithm("fedavg")(fed, algo_options), 2, 1.0, checkpoint=checkpoint)  # keeps its last snapshot
    snapshot = torch.load(checkpoint.path, weights_only=True)
    snapshot["rows"][0]["train_loss"] = 123.0
    torch.save(snapshot, checkpoint.path)
    fed = make_federation(clients, num_classes=3, batch_size=2)
    with pytest.raises(UserError, match="checksum"):
        run_rounds(fed, get_algorithm("fedavg")(fed, algo_options), 2, 1.0, checkpoint=checkpoint)
