"""How often a run snapshots (`fedgmh.cadence`, `Checkpoint`): every K rounds, or by time with a cap
on the share of the run's time that snapshots take; an execution option, not part of the run."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal

import pandas as pd
import pytest
from conftest import REPO_ROOT, load_script, make_federation, prepare_digits, train_args

from fedgmh.algorithms import get_algorithm
from fedgmh.cadence import SNAPSHOT_SHARE, snapshot_cadence
from fedgmh.engine import Checkpoint, run_rounds
from fedgmh.errors import Interrupted, UserError
from fedgmh.train import resolve_options

CLIENTS = [[0, 1, 0, 1, 1, 0], [1, 2, 2, 1], [0, 2, 2, 0, 1], [2, 2, 1, 1]]


def fresh(name="fedavg"):
    algo_options, engine = resolve_options(name, {"preset": "paper"})
    fed = make_federation(CLIENTS, num_classes=3, batch_size=2, drop_last=engine.drop_last, lr_decay=engine.lr_decay, seed=1)
    return fed, get_algorithm(name)(fed, algo_options)


class FakeClock:
    """A clock that moves only when told: each round takes `round_s`, each snapshot write `write_s`."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class TimedCheckpoint(Checkpoint):
    """A checkpoint whose writes take `write_s` on its fake clock; it notes the rounds it resumes from."""

    def __init__(self, path, seconds, write_s, clock):
        super().__init__(path, 0, {"run": 1}, seconds=seconds, clock=clock)
        self.write_s, self.resumes_from = write_s, []

    def _write(self, snapshot):
        self.clock.now += self.write_s
        self.resumes_from.append(snapshot["next_round"])
        super()._write(snapshot)


def run_timed(tmp_path, rounds, round_s, seconds, write_s, **kwargs):
    clock = FakeClock()
    checkpoint = TimedCheckpoint(tmp_path / "ck.pt", seconds, write_s, clock)
    fed, algo = fresh()

    def played(rnd):
        clock.now += round_s

    rows = run_rounds(fed, algo, rounds, 0.5, checkpoint=checkpoint, on_played=played, **kwargs)
    return checkpoint, clock, rows


def expected_resumes(rounds, round_s, write_s, seconds):
    """The rounds the time cadence resumes from, by its rule: a snapshot after the round that brings the
    training since the last to `seconds` (the first: no write time known yet), then to
    max(seconds, write_s / SNAPSHOT_SHARE); never after the final evaluation."""
    first = math.ceil(seconds / round_s)
    apart = math.ceil(max(seconds, write_s / SNAPSHOT_SHARE) / round_s)
    return list(range(first, rounds + 1, apart))


@pytest.mark.parametrize("round_s,write_s,seconds", [(10.0, 0.0, 25.0), (10.0, 2.0, 1.0), (3.0, 0.1, 10.0)])
def test_snapshots_by_time_follow_the_rounds_training_time_and_take_at_most_their_share(tmp_path, round_s, write_s, seconds):
    rounds = 20
    checkpoint, clock, _ = run_timed(tmp_path, rounds, round_s, seconds, write_s)
    assert checkpoint.resumes_from == expected_resumes(rounds, round_s, write_s, seconds)
    assert checkpoint.resumes_from  # the cases snapshot at least once
    assert len(checkpoint.resumes_from) * write_s <= SNAPSHOT_SHARE * clock.now


def test_a_snapshot_taken_by_time_resumes_to_the_metrics_of_an_uninterrupted_run(tmp_path):
    fed, algo = fresh()
    whole = pd.DataFrame(run_rounds(fed, algo, 6, 0.5)).drop(columns="seconds")
    clock = FakeClock()
    checkpoint = TimedCheckpoint(tmp_path / "ck.pt", 15.0, 0.0, clock)
    fed, algo = fresh()

    def played(rnd):
        clock.now += 10.0
        if rnd == 4:
            raise KeyboardInterrupt  # a kill: the last snapshot is the one the cadence took

    with pytest.raises(Interrupted) as stopped:
        run_rounds(fed, algo, 6, 0.5, checkpoint=checkpoint, on_played=played)
    assert checkpoint.resumes_from == [2, 4] and stopped.value.details["resume_round"] == 4
    fed, algo = fresh()
    resumed = pd.DataFrame(run_rounds(fed, algo, 6, 0.5, checkpoint=Checkpoint(checkpoint.path, 0, {"run": 1}, seconds=15.0)))
    pd.testing.assert_frame_equal(resumed.drop(columns="seconds"), whole, check_exact=True)


def test_sigterm_snapshots_at_the_end_of_its_round_under_a_time_cadence(tmp_path):
    checkpoint = Checkpoint(tmp_path / "ck.pt", 0, {"run": 1}, seconds=1e9)  # no snapshot by time in this run
    fed, algo = fresh()

    def sigterm(row):
        if row["round"] == 1:
            os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(Interrupted, match="stopped by SIGTERM after round 1") as stopped:
        run_rounds(fed, algo, 5, 0.5, on_round=sigterm, checkpoint=checkpoint)
    assert stopped.value.details == {"round": 1, "resume_round": 2} and checkpoint.load()["next_round"] == 2


@pytest.mark.parametrize("text,cadence", [("10", (10, 0.0)), ("0", (0, 0.0)), ("60s", (0, 60.0)), ("2.5s", (0, 2.5)), (7, (7, 0.0))])
def test_cadence_values_read_as_rounds_or_seconds(text, cadence):
    assert snapshot_cadence(text) == cadence


@pytest.mark.parametrize("text", ["-1", "0s", "ten", "1.5", "s", "60 m"])
def test_a_bad_cadence_is_refused_in_one_line(text):
    with pytest.raises(UserError, match="expected K >= 0 rounds") as refused:
        snapshot_cadence(text)
    assert "\n" not in str(refused.value)


def test_fedgmh_train_refuses_a_bad_cadence_before_any_work(tmp_path, capsys):
    from fedgmh.cli import main

    setup = prepare_digits(tmp_path / "data")
    assert main(train_args(setup, tmp_path / "run", "--checkpoint-every", "soon")) == 2
    assert "--checkpoint-every soon" in capsys.readouterr().err and not (tmp_path / "run").exists()


def test_the_cadence_is_not_part_of_the_run_a_snapshot_resumes_under_another(tmp_path, monkeypatch):
    from fedgmh.cli import main
    from fedgmh.engine.rounds import play_round

    setup = prepare_digits(tmp_path / "data")
    whole = tmp_path / "whole"
    assert main(train_args(setup, whole, "--checkpoint-every", "0", rounds=4)) == 0

    def ctrl_c_in_round_3(fed, algorithm, rnd, *args, **kwargs):
        if rnd == 3:
            raise KeyboardInterrupt
        return play_round(fed, algorithm, rnd, *args, **kwargs)

    out = tmp_path / "cut"
    monkeypatch.setattr("fedgmh.engine.rounds.play_round", ctrl_c_in_round_3)
    assert main(train_args(setup, out, "--checkpoint-every", "1", rounds=4)) == 130
    monkeypatch.undo()
    assert main(train_args(setup, out, "--checkpoint-every", "60s", rounds=4)) == 0
    assert json.loads((out / "run.json").read_text())["resumed_from_round"] == 3
    read = lambda folder: pd.read_csv(folder / "metrics.csv").drop(columns="seconds")  # noqa: E731
    pd.testing.assert_frame_equal(read(out), read(whole), check_exact=True)
    # a finished run is the same run whatever its cadence: not trained again
    assert main(train_args(setup, whole, "--checkpoint-every", "5", rounds=4)) == 0


def _record(made, store, name, wall, seconds, resumed_from=None, device="cpu", code="new"):
    """A copy of the valid record `made` (rounds 0-3) with its timing fields and labels set."""
    folder = store / name
    shutil.copytree(made, folder)
    record = json.loads((folder / "run.json").read_text())
    record.update(device=device, wall_time_s=wall, resumed_from_round=resumed_from, code_version=code)
    (folder / "run.json").write_text(json.dumps(record))
    metrics = pd.read_csv(folder / "metrics.csv")
    metrics["seconds"] = seconds
    metrics.to_csv(folder / "metrics.csv", index=False)


def test_the_share_outside_the_rounds_counts_only_the_rounds_its_process_played(tmp_path, capsys):
    """tools/snapshot_share.py: a resumed process played the rounds from `resumed_from_round` (the
    snapshot's next round) on; a record made without the cadence does not count, and one that is not
    valid is left out and named."""
    from fedgmh.cli import main

    share = load_script(REPO_ROOT / "tools" / "snapshot_share.py")
    digits = prepare_digits(tmp_path)
    made = tmp_path / "made"
    main(train_args(digits, made, rounds=3))
    store = tmp_path / "store"
    _record(made, store, "whole", wall=10.0, seconds=[0.0, 1.0, 4.0, 4.0])
    _record(made, store, "resumed", wall=5.0, seconds=[3.0, 3.0, 2.0, 2.0], resumed_from=2)
    _record(made, store, "gpu", wall=2.0, seconds=[0.0, 0.5, 0.5, 0.5], device="cuda:0")
    _record(made, store, "old", wall=100.0, seconds=[1.0, 1.0, 1.0, 1.0], code="old")
    _record(made, store, "broken", wall=10.0, seconds=[1.0, float("nan"), 1.0, 1.0])
    found, problems = share.shares([store], counts=lambda code: code == "new")
    assert found.keys() == {("cpu", "fedavg"), ("gpu", "fedavg")}
    assert sorted(found[("cpu", "fedavg")]) == pytest.approx([0.1, 0.2])
    assert found[("gpu", "fedavg")] == pytest.approx([0.25])
    assert "| cpu | fedavg | 2 | 15.00 % | 20.00 % |" in share.markdown(found)
    assert len(problems) == 1 and "broken" in problems[0] and "seconds" in problems[0]
