"""Fault tolerance: a run stopped mid-way resumes from its last checkpoint with identical metrics."""

from __future__ import annotations

import copy
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import make_federation

from fedgmh.algorithms import get_algorithm
from fedgmh.cards import algorithm_names
from fedgmh.engine import Checkpoint, run_rounds
from fedgmh.errors import UserError
from fedgmh.train import resolve_options

CLIENTS = [[0, 1, 0, 1, 1, 0], [1, 2, 2, 1], [0, 2, 2, 0, 1], [2, 2, 1, 1], [0, 0, 1, 1, 2], [2, 1, 0, 0]]


class Stop(Exception):
    pass


# FedGH's server lr 1.0 on the random toy images blows its head up within 4 rounds (NaN test loss,
# a divergence error); the resume test needs a run that finishes
TOY_OPTIONS = {"fedgh": {"eta_h": "0.1"}}


def fresh(name, preset):
    algo_options, engine = resolve_options(name, {"preset": preset, **TOY_OPTIONS.get(name, {})})
    fed = make_federation(CLIENTS, num_classes=3, batch_size=2, drop_last=engine.drop_last, lr_decay=engine.lr_decay, seed=3)
    return fed, get_algorithm(name)(fed, algo_options)


def without_timing(rows):
    return pd.DataFrame(rows).drop(columns="seconds")


@pytest.mark.parametrize("preset", ["paper", "official"])
@pytest.mark.parametrize("name", algorithm_names())
def test_interrupted_run_resumes_with_identical_metrics(tmp_path, name, preset):
    fed, algo = fresh(name, preset)
    expected = without_timing(run_rounds(fed, algo, 4, 0.5))
    expected_passes = fed.sample_passes.record()

    def stop_after_round_2(row):
        if row["round"] == 2:
            raise Stop

    checkpoint = Checkpoint(tmp_path / "ck.pt", every=1, identity={"run": name})
    fed, algo = fresh(name, preset)
    with pytest.raises(Stop):
        run_rounds(fed, algo, 4, 0.5, on_round=stop_after_round_2, checkpoint=checkpoint)
    fed, algo = fresh(name, preset)  # a new process: everything rebuilt, then the snapshot restored
    resumed = run_rounds(fed, algo, 4, 0.5, checkpoint=checkpoint)
    pd.testing.assert_frame_equal(without_timing(resumed), expected, check_exact=True)
    assert fed.sample_passes.record() == expected_passes  # counted over every round, not only the resumed ones


def test_a_snapshot_that_did_not_count_sample_passes_leaves_them_out_of_the_record(tmp_path):
    """A run resumed from a snapshot taken before sample passes were counted cannot know its total."""
    checkpoint = Checkpoint(tmp_path / "ck.pt", every=1, identity={"run": "fedavg"})
    fed, algo = fresh("fedavg", "paper")
    with pytest.raises(Stop):
        run_rounds(fed, algo, 4, 0.5, on_round=lambda row: (_ for _ in ()).throw(Stop) if row["round"] == 2 else None,
                   checkpoint=checkpoint)
    snapshot = checkpoint.load()
    del snapshot["sample_passes"]
    checkpoint.save(snapshot)
    fed, algo = fresh("fedavg", "paper")
    run_rounds(fed, algo, 4, 0.5, checkpoint=checkpoint)
    assert fed.sample_passes.executed > 0 and fed.sample_passes.record() is None


@pytest.fixture(scope="module")
def snapshots(tmp_path_factory):
    """FedAvg's and FedPer's snapshots after round 2 of 4 (taken once: the tests edit copies)."""
    taken = {}
    for name in ("fedavg", "fedper"):
        checkpoint = Checkpoint(tmp_path_factory.mktemp(name) / "ck.pt", every=1, identity={"run": name})
        fed, algo = fresh(name, "paper")
        with pytest.raises(Stop):
            run_rounds(fed, algo, 4, 0.5, on_round=lambda row: (_ for _ in ()).throw(Stop) if row["round"] == 2 else None,
                       checkpoint=checkpoint)
        taken[name] = checkpoint.load()
    return taken


def resumed_with(tmp_path, name, snapshot):
    checkpoint = Checkpoint(tmp_path / "ck.pt", every=1, identity={"run": name})
    checkpoint.save(snapshot)
    fed, algo = fresh(name, "paper")
    with pytest.raises(UserError) as err:
        run_rounds(fed, algo, 4, 0.5, checkpoint=checkpoint)
    line = str(err.value)
    assert line.startswith(f"checkpoint {checkpoint.path} is invalid: ") and "\n" not in line
    return line


@pytest.mark.parametrize(("name", "edit", "message"), [
    ("fedavg", {"sample_passes": (5,)}, "sample_passes (5,) is not (useful, executed)"),
    ("fedavg", {"sample_passes": ("a", "b")}, "sample_passes ('a', 'b') is not (useful, executed)"),
    ("fedavg", {"sample_passes": (-50, 10)}, "sample_passes (-50, 10) is not (useful, executed)"),
    ("fedavg", {"sample_passes": (1, 10**6)}, "executed <= batch size x useful"),
    ("fedavg", {"next_round": 9}, "next_round 9 is not a round of the run's 4"),
    ("fedavg", {"next_round": "2"}, "next_round '2' is not a round"),
    ("fedavg", {"participations": np.array([1, 2])}, "participations must be 6 whole counts >= 0"),
    ("fedavg", {"participations": np.full(6, -1)}, "participations must be 6 whole counts >= 0"),
    ("fedavg", {"participations": np.full(6, 0.5)}, "participations must be 6 whole counts >= 0"),
    ("fedavg", {"rng": ("MT19937", "x")}, "random generators' states cannot be restored"),
    ("fedavg", {"generator": torch.zeros(3, dtype=torch.uint8)}, "random generators' states cannot be restored"),
    ("fedavg", {"algorithm": []}, "the algorithm's state is not a mapping"),
    ("fedper", {"algorithm": "personal"}, "the algorithm's state is not a mapping"),
])
def test_a_snapshot_with_impossible_contents_is_refused_in_one_line(tmp_path, snapshots, name, edit, message):
    """Each part of a snapshot is checked before it is restored (only the metric rows carry a checksum)."""
    assert message in resumed_with(tmp_path, name, snapshots[name] | edit)


def test_an_algorithm_state_of_another_shape_is_refused(tmp_path, snapshots):
    snapshot = copy.deepcopy(snapshots["fedavg"])
    key, value = next((k, v) for k, v in snapshot["algorithm"].items() if isinstance(v, dict) and v)
    inner = next(k for k, v in value.items() if isinstance(v, torch.Tensor))
    value[inner] = value[inner].reshape(-1)[:1].clone()
    assert f"algorithm state {key}['{inner}'] must be a torch.float32 tensor of shape" in resumed_with(tmp_path, "fedavg", snapshot)


def test_checkpoint_of_another_run_is_refused(tmp_path):
    fed, algo = fresh("fedavg", "paper")
    run_rounds(fed, algo, 2, 0.5, checkpoint=Checkpoint(tmp_path / "ck.pt", every=1, identity={"lr": 0.1}))
    with pytest.raises(UserError, match="other settings"):
        Checkpoint(tmp_path / "ck.pt", every=1, identity={"lr": 0.2}).load()
    (tmp_path / "bad.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(UserError, match="unreadable"):
        Checkpoint(tmp_path / "bad.pt", every=1, identity={}).load()


def test_a_snapshot_written_before_an_option_existed_resumes_at_its_default_only(tmp_path):
    import dataclasses

    def identity(algorithm="fedgmh", **overrides):
        options, engine = resolve_options(algorithm, overrides)
        config = {"dataset": "digits", "algorithm": algorithm, "rounds": 4, "join_ratio": 0.5, "local_epochs": 1, "batch_size": 2,
                  "lr": 0.01, "seed": 0, "root": "data", "partition": "p.npz", "device": "cpu", "overrides": {}}
        return {"config": config, "algorithm_options": dataclasses.asdict(options), "engine_options": dataclasses.asdict(engine),
                "partition": {"dataset": "digits", "digest": "d"}, "fedgmh": "0.1.0", "results_version": 1}

    older = identity()
    del older["engine_options"]["conv"], older["algorithm_options"]["gmh_o_zeroing"]  # options this code added since
    Checkpoint(tmp_path / "ck.pt", every=1, identity=older).save({"next_round": 3})
    assert Checkpoint(tmp_path / "ck.pt", every=1, identity=identity()).load() == {"next_round": 3}
    # an execution-only option may change at a resume, as the device may
    assert Checkpoint(tmp_path / "ck.pt", every=1, identity=identity(conv="unfold", eval_batched="on")).load() == {"next_round": 3}
    newer = identity()
    newer["algorithm_options"]["gmh_o_zeroing"] = True  # not its default (which needs head_alias=client0 to resolve)
    moved = identity()  # another folder, device and thread count: the same run
    moved["config"].update(root="/elsewhere", partition="/elsewhere/p.npz", device="cuda:0")
    assert Checkpoint(tmp_path / "ck.pt", every=1, identity=moved).load() == {"next_round": 3}
    lr = identity()
    lr["config"]["lr"] = 0.02
    for other in (identity(numerics="pytorch"), newer, identity(beta=0.3), lr, {**identity(), "results_version": 2}):
        with pytest.raises(UserError, match="other settings"):
            Checkpoint(tmp_path / "ck.pt", every=1, identity=other).load()


def test_killed_training_process_resumes_and_matches_an_uninterrupted_run(tmp_path, digits_root):
    from fedgmh.cli import main

    part = tmp_path / "part.npz"
    assert main(["partition", "--dataset", "digits", "--root", str(digits_root), "--clients", "6",
                 "--classes-per-client", "3", "--alpha", "0.5", "--out", str(part)]) == 0

    def command(out):
        return [sys.executable, "-m", "fedgmh.cli", "train", "--dataset", "digits", "--root", str(digits_root),
                "--partition", str(part), "--algorithm", "fedgmh", "--rounds", "12", "--join-ratio", "0.5",
                "--local-epochs", "1", "--threads", "1", "--checkpoint-every", "1", "--quiet", "--out", str(out)]

    subprocess.run(command(tmp_path / "whole"), check=True, capture_output=True)
    killed = tmp_path / "killed"
    process = subprocess.Popen(command(killed), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while not (killed / "checkpoint.pt").exists() and time.time() < deadline and process.poll() is None:
        time.sleep(0.02)
    os.kill(process.pid, signal.SIGKILL)
    assert process.wait() == -signal.SIGKILL, "the run finished before it could be killed"
    assert not (killed / "metrics.csv").exists() and not (killed / "run.json").exists()
    # what a kill in the middle of an atomic write leaves: temporaries, removed by the next attempt
    leftovers = [killed / ".checkpoint.k1ll3d.pt", killed / ".metrics.k1ll3d.csv", killed / ".run.k1ll3d.json"]
    for leftover in leftovers:
        leftover.write_bytes(b"half")
    (killed / ".notes.csv").write_text("kept")  # not ours: kept
    subprocess.run(command(killed), check=True, capture_output=True)
    assert not any(p.exists() for p in leftovers) and (killed / ".notes.csv").exists()
    assert not (killed / "checkpoint.pt").exists()  # removed once the run is complete
    whole = pd.read_csv(tmp_path / "whole" / "metrics.csv").drop(columns="seconds")
    resumed = pd.read_csv(killed / "metrics.csv").drop(columns="seconds")
    pd.testing.assert_frame_equal(resumed, whole, check_exact=True)
    import json

    assert json.loads((killed / "run.json").read_text())["resumed_from_round"] >= 1


def test_progress_eta_of_a_resumed_run_counts_only_the_rounds_it_ran(monkeypatch, capsys):
    """Resumed at round 100 of 200 and 10 s per round: 100 rounds are left, about 1000 s."""
    from fedgmh import train

    clock = iter([0.0, 10.0, 20.0])
    monkeypatch.setattr(train.time, "perf_counter", lambda: next(clock))
    log = train.ProgressLog("fedavg", rounds=200, first_round=100)
    log({"round": 100, "test_acc": 0.5, "train_loss": 1.0})
    log({"round": 101, "test_acc": 0.6, "train_loss": 0.9})
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].endswith("0:00:10 elapsed, ETA 0:16:40")
    assert lines[1].endswith("0:00:20 elapsed, ETA 0:16:30")


def test_progress_goes_on_through_rounds_that_are_not_evaluated(monkeypatch, capsys):
    """eval_last (the official FedGMH code's 20) leaves most rounds unevaluated: one line every 10."""
    from fedgmh import train

    clock = iter(float(t) for t in range(100))
    monkeypatch.setattr(train.time, "perf_counter", lambda: next(clock))
    log = train.ProgressLog("fedgmh", rounds=30)
    for rnd in range(31):
        if rnd >= 28:
            log({"round": rnd, "test_acc": 0.5, "train_loss": 1.0})
        log.played(rnd)
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(" |")[0] for line in lines] == [
        "[fedgmh] round 9/30 not evaluated", "[fedgmh] round 19/30 not evaluated",
        "[fedgmh] round 28/30 acc 50.00 % best 50.00 % train_loss 1.0000", "[fedgmh] round 29/30 acc 50.00 % best 50.00 % train_loss 1.0000",
        "[fedgmh] round 30/30 acc 50.00 % best 50.00 % train_loss 1.0000"]
    assert lines[0].endswith("0:00:01 elapsed, ETA 0:00:02")  # 1 s for 10 rounds, 21 left


def test_fedgmh_train_reports_progress_while_no_round_is_evaluated(tmp_path, capsys):
    from fedgmh import data
    from fedgmh.cli import main

    data.download("digits", tmp_path / "data")
    assert main(["partition", "--dataset", "digits", "--root", str(tmp_path / "data"), "--clients", "4",
                 "--classes-per-client", "3", "--alpha", "0.5", "--out", str(tmp_path / "p.npz")]) == 0
    capsys.readouterr()
    assert main(["train", "--dataset", "digits", "--root", str(tmp_path / "data"), "--partition", str(tmp_path / "p.npz"),
                 "--algorithm", "fedavg", "--rounds", "12", "--local-epochs", "1", "--join-ratio", "0.5", "--threads", "1",
                 "--set", "eval_last=2", "--out", str(tmp_path / "run")]) == 0
    rounds = [line.split(" |")[0] for line in capsys.readouterr().err.splitlines() if line.startswith("[fedavg] round")]
    assert rounds[0] == "[fedavg] round 9/12 not evaluated" and [r.split()[2] for r in rounds] == ["9/12", "11/12", "12/12"]
