"""Safety of `fedgmh train` (issue 9): checkpoints that cannot run code, finished runs that are not
replaced by accident, finite numbers only, output folders checked before training, seed range,
and Ctrl-C / SIGTERM handled with one line and a resumable checkpoint."""

from __future__ import annotations

import json
import os
import pickle
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import make_federation, prepare_digits, train_args

from fedgmh.algorithms import get_algorithm
from fedgmh.engine import Checkpoint, run_rounds
from fedgmh.errors import Interrupted, UserError
from fedgmh.train import resolve_options

CLIENTS = [[0, 1, 0, 1, 1, 0], [1, 2, 2, 1], [0, 2, 2, 0, 1], [2, 2, 1, 1], [0, 0, 1, 1, 2], [2, 1, 0, 0]]


class Stop(Exception):
    pass


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """The embedded data set and a 4-client partition of it."""
    return prepare_digits(tmp_path_factory.mktemp("safety"))


def fresh(name, preset="paper", seed=0, **engine):
    algo_options, engine_options = resolve_options(name, {"preset": preset, **engine})
    fed = make_federation(CLIENTS, num_classes=3, batch_size=2, drop_last=engine_options.drop_last,
                          lr_decay=engine_options.lr_decay, seed=seed)
    return fed, get_algorithm(name)(fed, algo_options)


def without_timing(rows):
    return pd.DataFrame(rows).drop(columns="seconds")


class MakesMarker:
    """Unpickling this object creates the file `marker` (what a crafted checkpoint could do)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


# --- item 2: checkpoints are read with weights_only=True -------------------------------------


@pytest.mark.parametrize("kind", ["torch.save", "raw pickle", "inside a snapshot"])
def test_crafted_checkpoint_is_refused_without_running_code(tmp_path, kind):
    marker, path = tmp_path / "marker", tmp_path / "ck.pt"
    if kind == "torch.save":
        torch.save(MakesMarker(marker), path)
    elif kind == "raw pickle":
        path.write_bytes(pickle.dumps(MakesMarker(marker), protocol=2))
    else:  # a well-formed snapshot of the right run with one poisoned value
        torch.save({"identity": '{"run": 1}', "next_round": 1, "rows": [MakesMarker(marker)]}, path)
    with pytest.raises(UserError, match="not loaded"):
        Checkpoint(path, every=1, identity={"run": 1}).load()
    assert not marker.exists()


def test_crafted_checkpoint_in_the_run_folder_stops_fedgmh_train(setup, tmp_path, capsys):
    from fedgmh.cli import main

    out, marker = tmp_path / "run", tmp_path / "marker"
    out.mkdir()
    torch.save(MakesMarker(marker), out / "checkpoint.pt")
    assert main(train_args(setup, out)) == 2
    err = capsys.readouterr().err
    assert "checkpoint" in err and "not loaded" in err and len(err.strip().splitlines()) == 1
    assert not marker.exists() and not (out / "run.json").exists()


@pytest.mark.parametrize("name", ["fedamp", "fedfomo", "fedgmh", "fedrod"])  # sets, lists, None, dicts in their state
def test_snapshots_hold_only_tensors_and_plain_values(tmp_path, name):
    fed, algo = fresh(name, "official")
    run_rounds(fed, algo, 2, 0.5, checkpoint=Checkpoint(tmp_path / "ck.pt", every=1, identity={"run": name}))
    assert (tmp_path / "ck.pt").exists()
    torch.load(tmp_path / "ck.pt", weights_only=True)  # no allow-list needed: nothing but tensors and plain values


def test_a_snapshot_of_the_format_before_packing_is_refused_in_one_line(tmp_path):
    """No snapshot of the format that pickled numpy arrays is left (committed or under way): such a
    file is refused like any other that needs more than tensors and plain values."""
    fed, algo = fresh("fedfomo")

    class OldFormat(Checkpoint):
        def save(self, snapshot):  # what engine.Checkpoint.save wrote before values were packed
            torch.save({"identity": self.identity, **snapshot}, self.path)

    def stop_after_round_2(row):
        if row["round"] == 2:
            raise Stop

    with pytest.raises(Stop):
        run_rounds(fed, algo, 4, 0.5, on_round=stop_after_round_2,
                   checkpoint=OldFormat(tmp_path / "ck.pt", every=1, identity={"run": 1}))
    with pytest.raises(UserError, match="objects other than tensors and plain values") as refused:
        Checkpoint(tmp_path / "ck.pt", every=1, identity={"run": 1}).load()
    assert "\n" not in str(refused.value)


def test_checkpoint_values_round_trip_exactly(tmp_path):
    from fedgmh.engine import pack as _pack, unpack as _unpack

    rng = np.random.RandomState(7)
    rng.standard_normal()  # a cached gaussian in the state too
    value = {"rng": rng.get_state(), "counts": np.arange(5, dtype=np.int64), "flag": np.float32(0.25), "ids": {3, 1},
             "nested": [(1, 2.5), None, {"t": torch.ones(2)}], 4: "int key"}
    torch.save(_pack(value), tmp_path / "v.pt")
    back = _unpack(torch.load(tmp_path / "v.pt", weights_only=True))
    assert back["rng"][0] == "MT19937" and np.array_equal(back["rng"][1], value["rng"][1]) and back["rng"][1].dtype == np.uint32
    assert back["rng"][2:] == value["rng"][2:]
    assert np.array_equal(back["counts"], value["counts"]) and back["counts"].dtype == np.int64
    assert back["flag"] == np.float32(0.25) and isinstance(back["flag"], np.float32)
    assert back["ids"] == {1, 3} and back[4] == "int key" and back["nested"][:2] == [(1, 2.5), None]
    assert torch.equal(back["nested"][2]["t"], torch.ones(2))


# --- item 6: finite numbers only; a diverging run stops -----------------------------------------


@pytest.mark.parametrize(
    "extra,message",
    [
        (("--lr", "inf"), "learning rate must be a finite number > 0, got inf"),
        (("--lr", "nan"), "learning rate must be a finite number > 0, got nan"),
        (("--join-ratio", "nan"), "join ratio must be in (0, 1], got nan"),
        (("--set", "lr_decay=inf"), "lr_decay='inf': expected a finite float"),
        (("--set", "lr_decay=.nan"), "lr_decay='.nan': expected a finite float"),
        (("--set", "beta=-inf"), "beta='-inf': expected a finite float"),
    ],
)
def test_non_finite_numbers_are_refused_before_any_work(setup, tmp_path, capsys, extra, message):
    from fedgmh.cli import main

    assert main(train_args(setup, tmp_path / "run", *extra, algorithm="fedgmh")) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()


def test_a_diverging_run_stops_naming_round_and_client_and_writes_nothing(setup, tmp_path, capsys):
    from fedgmh.cli import main

    out = tmp_path / "run"
    assert main(train_args(setup, out, "--lr", "1e10", "--checkpoint-every", "1", rounds=3)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "diverged" in err
    assert re.search(r"round \d+, client \d+: (the training loss is nan|its parameter \S+ is no longer finite)", err), err
    assert not any(p.name in ("run.json", "metrics.csv", "checkpoint.pt") for p in out.rglob("*")) if out.exists() else True


def test_diverged_engine_run_raises_and_removes_its_checkpoint(tmp_path):
    from fedgmh.engine import Diverged

    fed, algo = fresh("fedavg")
    fed.lr = 1e10
    checkpoint = Checkpoint(tmp_path / "ck.pt", every=1, identity={"run": 1})
    with pytest.raises(Diverged, match=r"round \d+, client \d+: (the training loss is nan|its parameter \S+ is no longer finite)"):
        run_rounds(fed, algo, 6, 0.5, checkpoint=checkpoint)
    assert not (tmp_path / "ck.pt").exists()


def test_an_infinite_training_loss_with_finite_parameters_is_not_divergence():
    """FedRoD's Balanced Softmax: +inf for a class missing from the counted epoch, as in PFLlib."""
    from fedgmh.engine import LocalResult, divergence

    assert divergence(LocalResult({"w": torch.ones(3)}, float("inf"), 4)) is None
    assert "nan" in divergence(LocalResult({"w": torch.ones(3)}, float("nan"), 4))
    assert "parameter w" in divergence(LocalResult({"w": torch.tensor([1.0, float("inf")])}, 2.0, 4))
    fed, algo = fresh("fedrod", "official", seed=1)  # has such losses on this federation, and still trains
    rows = run_rounds(fed, algo, 2, 0.5)
    assert rows[0]["train_loss"] == float("inf") and len(rows) == 3


def test_a_nan_test_loss_stops_the_run(tmp_path):
    from fedgmh.engine import Diverged

    fed, algo = fresh("fedavg")
    with torch.no_grad():
        algo.global_params["head.weight"].fill_(float("nan"))  # a model that diverged in its last training round
    with pytest.raises(Diverged, match="round 0: the test loss is nan"):
        run_rounds(fed, algo, 2, 0.5)


def test_run_records_are_strict_json(tmp_path):
    from fedgmh.io import write_json

    with pytest.raises(ValueError):
        write_json({"lr": float("inf")}, tmp_path / "run.json")
    assert not list(tmp_path.iterdir())
    write_json({"lr": 0.01}, tmp_path / "run.json")
    assert json.loads((tmp_path / "run.json").read_text(), parse_constant=lambda c: pytest.fail(c)) == {"lr": 0.01}


# --- item 11: the seed range ----------------------------------------------------------------------


@pytest.mark.parametrize("seed", ["-1", str(2**32), str(10**30)])
def test_seed_outside_numpys_range_is_refused_before_any_work(setup, tmp_path, capsys, seed):
    from fedgmh.cli import main

    assert main(train_args(setup, tmp_path / "run", "--seed", seed)) == 2
    err = capsys.readouterr().err
    assert f"seed must be in 0..4294967295 (numpy's seed range), got {seed}" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()


def test_largest_seed_trains(setup, tmp_path):
    from fedgmh.cli import main

    assert main(train_args(setup, tmp_path / "run", "--seed", str(2**32 - 1), rounds=1)) == 0
    assert json.loads((tmp_path / "run" / "run.json").read_text())["seed"] == 2**32 - 1


# --- item 10: the output folder is checked before training ----------------------------------------


def _bad_out(tmp_path, kind):
    if kind == "a file":
        (tmp_path / "taken").write_text("not a folder")
        return tmp_path / "taken", "is a file, not a folder"
    if kind == "under a file":
        (tmp_path / "taken").write_text("not a folder")
        return tmp_path / "taken" / "run", "cannot be created: " + str(tmp_path / "taken") + " is a file"
    if kind == "read-only folder":
        if os.geteuid() == 0:
            pytest.skip("root writes into read-only folders")
        (tmp_path / "ro").mkdir()
        (tmp_path / "ro").chmod(0o555)
        return tmp_path / "ro" / "run", "is not writable"
    out = Path("/sys/fedgmh-test-run")  # sysfs: not even root creates folders there
    try:
        out.mkdir()
    except OSError:
        return out, "is not writable"
    out.rmdir()
    pytest.skip("no read-only /sys here")


@pytest.mark.parametrize("kind", ["a file", "under a file", "read-only folder", "read-only file system"])
def test_bad_output_folder_is_reported_before_training(setup, tmp_path, capsys, monkeypatch, kind):
    from fedgmh import train
    from fedgmh.cli import main

    out, message = _bad_out(tmp_path, kind)
    monkeypatch.setattr(train, "build_federation", lambda *a, **k: pytest.fail("training started"))
    assert main(train_args(setup, out)) == 2
    err = capsys.readouterr().err
    assert f"output folder {out}" in err and message in err and len(err.strip().splitlines()) == 1


def test_output_folder_check_leaves_nothing_behind(tmp_path):
    from fedgmh.io import check_writable_folder

    check_writable_folder(tmp_path / "a" / "b")
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "kept").mkdir()
    check_writable_folder(tmp_path / "kept")
    assert list((tmp_path / "kept").iterdir()) == []


def test_runs_sharing_a_missing_parent_check_their_folders_at_once(tmp_path):
    """Two runs whose --out share a parent that does not exist yet: neither fails on the other's
    folder ("File exists"), nor loses a parent the other removed."""
    import threading

    from fedgmh.io import check_writable_folder

    failures: list[BaseException] = []
    for attempt in range(20):
        start = threading.Barrier(6)

        def check(name: str, attempt: int = attempt, start: threading.Barrier = start) -> None:
            start.wait()
            try:
                check_writable_folder(tmp_path / f"grp{attempt}" / "g1" / name)
            except BaseException as err:  # noqa: BLE001 - collected for the assertion
                failures.append(err)

        threads = [threading.Thread(target=check, args=(f"a{i}",)) for i in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert not failures, failures[0]


def test_a_binary_runs_file_is_refused_in_one_line(tmp_path, capsys):
    from fedgmh.cli import main

    runs = tmp_path / "batch.runs"
    runs.write_bytes(b"\x80\xff\x00binary")
    assert main(["train-group", str(runs)]) == 2
    err = capsys.readouterr().err
    assert f"{runs} is not UTF-8 text" in err and len(err.strip().splitlines()) == 1


# --- item 3: a finished run in --out is not replaced by accident -----------------------------------


@pytest.fixture(scope="module")
def finished(setup, tmp_path_factory):
    """A finished fedavg run (2 rounds)."""
    from fedgmh.cli import main

    out = tmp_path_factory.mktemp("finished") / "run"
    assert main(train_args(setup, out, rounds=2)) == 0
    return out


def _files(folder):
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def test_finished_run_of_the_same_settings_is_not_trained_again(setup, finished, capsys, monkeypatch):
    from fedgmh import train
    from fedgmh.cli import main

    before = _files(finished)
    monkeypatch.setattr(train, "run_rounds", lambda *a, **k: pytest.fail("trained again"))
    capsys.readouterr()
    # threads, device and paths are not part of the run key (fedgmh.store): still the same run
    assert main(train_args(setup, finished, "--threads", "2", "--device", "cpu", rounds=2)) == 0
    out = capsys.readouterr()
    assert "already holds the finished run of these settings; not trained again" in out.err
    assert "best test accuracy" in out.out and _files(finished) == before


@pytest.mark.parametrize(
    "extra,algorithm,difference",
    [
        ((), "fedgmh", "algorithm: 'fedavg' vs 'fedgmh'"),
        (("--lr", "0.02"), "fedavg", "lr: 0.01 vs 0.02"),
        (("--set", "lr_decay=0.9"), "fedavg", "engine_options.lr_decay: 0.99 vs 0.9"),
    ],
)
def test_finished_run_of_other_settings_is_refused_naming_the_difference(setup, finished, capsys, extra, algorithm, difference):
    from fedgmh.cli import main

    before = _files(finished)
    assert main(train_args(setup, finished, *extra, algorithm=algorithm, rounds=2)) == 2
    err = capsys.readouterr().err
    assert "holds a finished run of other settings" in err and difference in err and "--overwrite" in err
    assert len(err.strip().splitlines()) == 1 and _files(finished) == before


def test_overwrite_replaces_a_finished_run(setup, finished, tmp_path):
    import shutil

    from fedgmh.cli import main

    out = tmp_path / "copy"
    shutil.copytree(finished, out)
    assert main(train_args(setup, out, "--overwrite", algorithm="fedgmh", rounds=2)) == 0
    assert json.loads((out / "run.json").read_text())["algorithm"] == "fedgmh"
    before = (out / "run.json").read_text()
    assert main(train_args(setup, out, "--overwrite", algorithm="fedgmh", rounds=2)) == 0  # same settings: trained again
    assert json.loads((out / "run.json").read_text())["started_utc"] != json.loads(before)["started_utc"]


def test_unreadable_run_record_in_out_is_not_replaced(setup, tmp_path, capsys):
    from fedgmh.cli import main

    out = tmp_path / "run"
    out.mkdir()
    (out / "run.json").write_text("{not json")
    assert main(train_args(setup, out)) == 2
    assert "cannot be read" in capsys.readouterr().err and (out / "run.json").read_text() == "{not json"


# --- item 12: Ctrl-C and SIGTERM ---------------------------------------------------------------------


def test_interrupted_round_loop_says_where_it_stopped_and_where_it_resumes(tmp_path):
    from fedgmh.errors import Interrupted

    def interrupt_at_round_2(row):
        if row["round"] == 2:
            raise KeyboardInterrupt

    fed, algo = fresh("fedavg")
    with pytest.raises(Interrupted, match="interrupted at round 2") as stopped:
        run_rounds(fed, algo, 5, 0.5, on_round=interrupt_at_round_2,
                   checkpoint=Checkpoint(tmp_path / "ck.pt", every=2, identity={"run": 1}))
    assert stopped.value.signum == signal.SIGINT and stopped.value.details == {"round": 2, "resume_round": 2}
    fed, algo = fresh("fedavg")
    with pytest.raises(Interrupted) as stopped:
        run_rounds(fed, algo, 5, 0.5, on_round=interrupt_at_round_2)
    assert stopped.value.details == {"round": 2, "resume_round": None}


def _sigterm_at(rounds_to_signal, log=None):
    """An on_round callback that sends this process SIGTERM after each round of `rounds_to_signal`."""
    def on_round(row):
        if log is not None:
            log.append(row["round"])
        for _ in range(rounds_to_signal.count(row["round"])):
            os.kill(os.getpid(), signal.SIGTERM)
    return on_round


def _metrics(rows):
    return [{k: v for k, v in row.items() if k not in ("seconds", "client_acc")} for row in rows]


def test_sigterm_finishes_the_round_snapshots_it_and_the_resumed_run_matches_an_uninterrupted_one(tmp_path):
    from fedgmh.errors import Interrupted

    fed, algo = fresh("fedgmh")
    whole = run_rounds(fed, algo, 6, 0.5)
    checkpoint = Checkpoint(tmp_path / "ck.pt", every=100, identity={"run": 1})  # no periodic snapshot before the end
    fed, algo = fresh("fedgmh")
    played = []
    with pytest.raises(Interrupted, match="stopped by SIGTERM after round 2") as stopped:
        run_rounds(fed, algo, 6, 0.5, on_round=_sigterm_at([2], played), checkpoint=checkpoint)
    assert stopped.value.signum == signal.SIGTERM and stopped.value.details == {"round": 2, "resume_round": 3}
    assert played == [0, 1, 2]  # round 3 never started
    assert checkpoint.load()["next_round"] == 3
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handler before the loop is back
    fed, algo = fresh("fedgmh")
    resumed = run_rounds(fed, algo, 6, 0.5, checkpoint=checkpoint)
    assert _metrics(resumed) == _metrics(whole)


def test_a_second_sigterm_stops_at_once_and_without_snapshots_sigterm_is_not_deferred(tmp_path):
    from fedgmh.errors import Interrupted

    checkpoint = Checkpoint(tmp_path / "ck.pt", every=2, identity={"run": 1})
    fed, algo = fresh("fedavg")
    with pytest.raises(Interrupted, match="interrupted at round 2") as stopped:
        run_rounds(fed, algo, 6, 0.5, on_round=_sigterm_at([2, 2]), checkpoint=checkpoint)
    # stopped inside round 2's bookkeeping, before its snapshot: the last one is round 1's
    assert stopped.value.details == {"round": 2, "resume_round": 2} and checkpoint.load()["next_round"] == 2

    def interrupted(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupted)  # as the CLI's handler: SIGTERM raises
    try:
        for off in (None, Checkpoint(tmp_path / "off.pt", every=0, identity={"run": 1})):
            fed, algo = fresh("fedavg")
            with pytest.raises(Interrupted, match="interrupted at round 1") as stopped:
                run_rounds(fed, algo, 6, 0.5, on_round=_sigterm_at([1]), checkpoint=off)
            assert stopped.value.details == {"round": 1, "resume_round": None}
            assert signal.getsignal(signal.SIGTERM) is interrupted
    finally:
        signal.signal(signal.SIGTERM, previous)


@pytest.mark.parametrize("last", [2, 3])  # the last training round, the final evaluation
def test_sigterm_in_the_last_training_round_or_after_it_lets_the_run_finish(tmp_path, last):
    fed, algo = fresh("fedavg")
    whole = run_rounds(fed, algo, 3, 0.5)
    fed, algo = fresh("fedavg")
    checkpoint = Checkpoint(tmp_path / "ck.pt", every=100, identity={"run": 1})
    finished = run_rounds(fed, algo, 3, 0.5, on_round=_sigterm_at([last]), checkpoint=checkpoint)
    assert _metrics(finished) == _metrics(whole)
    assert not checkpoint.path.exists()  # a stop would have snapshotted
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_a_sigterm_during_a_periodic_snapshot_stops_after_that_round_without_a_second_one(tmp_path):
    from fedgmh.errors import Interrupted

    class SignalledWhileSaving(Checkpoint):
        saved: list[int] = []

        def save(self, snapshot):
            self.saved.append(snapshot["next_round"])
            if len(self.saved) == 1:
                os.kill(os.getpid(), signal.SIGTERM)
            super().save(snapshot)

    checkpoint = SignalledWhileSaving(tmp_path / "ck.pt", every=2, identity={"run": 1})
    fed, algo = fresh("fedavg")
    with pytest.raises(Interrupted, match="stopped by SIGTERM after round 1") as stopped:
        run_rounds(fed, algo, 6, 0.5, checkpoint=checkpoint)
    assert stopped.value.details == {"round": 1, "resume_round": 2} and checkpoint.saved == [2]


@pytest.mark.parametrize("signum,status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_mid_run_prints_one_line_exits_128_plus_signal_and_the_run_resumes(setup, tmp_path, signum, status):
    out = tmp_path / "run"
    command = [sys.executable, "-m", "fedgmh.cli", *train_args(setup, out, "--checkpoint-every", "1", rounds=8)]
    # a child of a background job may inherit an ignored SIGINT: give it the default, as a terminal would
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 300
    while not (out / "checkpoint.pt").exists() and time.time() < deadline and process.poll() is None:
        time.sleep(0.02)
    process.send_signal(signum)
    _, err = process.communicate(timeout=300)
    assert process.returncode == status, err
    if signum == signal.SIGINT:  # at once, from the last periodic snapshot
        assert re.fullmatch(r"fedgmh train: interrupted at round \d+; the same command resumes from the checkpoint\n", err), err
    else:  # the round it arrived in is finished and snapshotted first
        from fedgmh.stopping import NOTICE

        stopped = re.fullmatch(re.escape(NOTICE) + r"fedgmh train: stopped by SIGTERM after round (\d+); the same command resumes from the checkpoint\n", err)
        assert stopped, err
    assert not (out / "run.json").exists() and not (out / "metrics.csv").exists() and (out / "checkpoint.pt").exists()
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]  # no temporaries left
    again = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    record = json.loads((out / "run.json").read_text())
    assert record["resumed_from_round"] >= 1 and record["evaluated_rounds"] == 9
    if signum == signal.SIGTERM:
        assert record["resumed_from_round"] == int(stopped.group(1)) + 1
    assert not (out / "checkpoint.pt").exists()


def _ctrl_c_in_round(stop_round):
    """engine.play_round, but Ctrl-C arrives when round `stop_round` starts."""
    from fedgmh.engine import play_round

    def play(fed, algorithm, rnd, *args, **kwargs):
        if rnd == stop_round:
            raise KeyboardInterrupt
        return play_round(fed, algorithm, rnd, *args, **kwargs)

    return play


def test_interrupt_before_the_first_checkpoint_says_the_run_starts_again(setup, tmp_path, capsys, monkeypatch):
    from fedgmh import train
    from fedgmh.cli import main

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(train, "build_federation", interrupted)
    assert main(train_args(setup, tmp_path / "a")) == 130
    assert capsys.readouterr().err == "fedgmh train: interrupted\n"
    monkeypatch.undo()
    monkeypatch.setattr("fedgmh.engine.rounds.play_round", _ctrl_c_in_round(1))
    assert main(train_args(setup, tmp_path / "b", "--checkpoint-every", "5", rounds=3)) == 130
    assert capsys.readouterr().err == ("fedgmh train: interrupted at round 1; no checkpoint yet (one every 5 rounds): "
                                       "the same command starts again\n")
    assert main(train_args(setup, tmp_path / "c", "--checkpoint-every", "0", rounds=3)) == 130
    assert "checkpoints are off (--checkpoint-every 0)" in capsys.readouterr().err


def test_a_stop_while_the_checkpoint_loads_says_the_run_resumes_and_the_snapshot_is_read_once(setup, tmp_path, capsys, monkeypatch):
    from fedgmh.cli import main

    out = tmp_path / "run"
    monkeypatch.setattr("fedgmh.engine.rounds.play_round", _ctrl_c_in_round(2))
    assert main(train_args(setup, out, "--checkpoint-every", "1", rounds=4)) == 130
    monkeypatch.undo()
    capsys.readouterr()
    saved = (out / "checkpoint.pt").read_bytes()

    def stopped_while_loading(self):
        raise Interrupted(signal.SIGTERM)

    monkeypatch.setattr(Checkpoint, "load", stopped_while_loading)
    assert main(train_args(setup, out, "--checkpoint-every", "1", rounds=4)) == 143
    assert capsys.readouterr().err == "fedgmh train: interrupted; the same command resumes from the checkpoint\n"
    assert (out / "checkpoint.pt").read_bytes() == saved
    monkeypatch.undo()

    loads = []
    real_load = Checkpoint.load
    monkeypatch.setattr(Checkpoint, "load", lambda self: loads.append(self.path) or real_load(self))
    assert main(train_args(setup, out, "--checkpoint-every", "1", rounds=4)) == 0
    assert len(loads) == 1  # train passes what it read to the round loop
    assert json.loads((out / "run.json").read_text())["resumed_from_round"] == 2


# --- run_training in its natural order: a finished or stored run needs no device and no data --------


def test_a_finished_or_stored_run_is_reused_without_loading_the_data_or_taking_a_device(setup, tmp_path, monkeypatch):
    from fedgmh import data, train
    from fedgmh.cli import main

    assert main(train_args(setup, tmp_path / "store" / "run")) == 0
    record = json.loads((tmp_path / "store" / "run" / "run.json").read_text())

    def no_data(*args, **kwargs):
        raise AssertionError("the dataset was loaded")

    def no_device(*args, **kwargs):
        raise AssertionError("a device was taken")

    monkeypatch.setattr(data, "load_dataset", no_data)
    monkeypatch.setattr(train, "pick_device", no_device)
    assert main(train_args(setup, tmp_path / "store" / "run")) == 0  # finished in its own folder
    assert main(train_args(setup, tmp_path / "elsewhere", "--store", str(tmp_path / "store"))) == 0  # found in the store
    reused = json.loads((tmp_path / "elsewhere" / "run.json").read_text())
    assert reused["best_test_acc"] == record["best_test_acc"] and reused["started_utc"] == record["started_utc"]
    with pytest.raises(AssertionError, match="a device was taken"):  # a run to train does take one
        main(train_args(setup, tmp_path / "new", rounds=2))
