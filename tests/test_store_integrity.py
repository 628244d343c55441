"""Results integrity (issues 26 and 27): one validation of a run record on every read, the three
kinds of difference between two records of one run, and a store that never overwrites, follows
a link or loses a conflict to a concurrent writer. Records are built by hand (no training)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fedgmh import record as run_record
from fedgmh import report, store
from fedgmh.cli import main as cli_main
from fedgmh.difference import DIFFERENT, FLOAT_LEVEL, IDENTICAL
from fedgmh.errors import UserError

ACCURACY = (0.1, 0.333, 0.3)  # the best, 0.333, in round 1; the last 0.3


def write_record(folder: Path, *, accuracy=ACCURACY, test_loss=(2.3, 1.5, 1.4), lr: float = 0.05,
                 workflow: dict | None = None, engine: dict | None = None, **run_json) -> Path:
    """A record as `fedgmh train` writes it (fedavg on digits, one round per metrics row), with
    run.json's results computed from its metrics and `run_json` entries replacing any field."""
    folder.mkdir(parents=True, exist_ok=True)
    rounds = len(accuracy) - 1
    metrics = pd.DataFrame({"round": range(rounds + 1), "test_acc": accuracy, "test_acc_mean": accuracy,
                            "test_acc_std": 0.01, "test_loss": test_loss, "train_loss": [1.0] * rounds + [math.nan],
                            "bytes_up": 1000, "bytes_down": 2000, "clients_up": 2, "seconds": 0.25})
    metrics.to_csv(folder / "metrics.csv", index=False)
    best = max(range(len(accuracy)), key=lambda i: (accuracy[i], -i))
    config = {"dataset": "digits", "root": "data", "partition": "part.npz", "algorithm": "fedavg", "rounds": rounds,
              "join_ratio": 0.5, "local_epochs": 1, "batch_size": 20, "lr": lr, "seed": 0, "device": "cpu", "threads": 1,
              "overrides": {}}
    partition = {"scheme": "exdir", "dataset": "digits", "dataset_fingerprint": "f" * 64, "num_samples": 1797, "num_classes": 10,
                 "num_clients": 4, "classes_per_client": 2, "alpha": 0.5, "train_ratio": 0.75, "seed": 1, "digest": "d" * 64}
    record = {"algorithm": "fedavg", "dataset": "digits", "seed": 0, "config": config, "algorithm_options": {},
              "engine_options": dict(engine or {}), "partition": partition, "num_clients": 4,
              "best_test_acc": accuracy[best], "best_round": best, "final_test_acc": accuracy[-1],
              "evaluated_rounds": rounds + 1, "wall_time_s": 1.5, "results_version": 1, "device": "cpu", "threads": 1,
              **({"workflow": workflow} if workflow else {}), **run_json}
    (folder / "run.json").write_text(json.dumps(record, allow_nan=True))
    return folder


def edit_metrics(folder: Path, change) -> None:
    frame = pd.read_csv(folder / "metrics.csv")
    change(frame)
    frame.to_csv(folder / "metrics.csv", index=False)


def files(folder: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file() and not p.name.startswith(".")}


def _cut_to_one_row(folder: Path) -> None:
    pd.read_csv(folder / "metrics.csv").head(1).to_csv(folder / "metrics.csv", index=False)
    record = json.loads((folder / "run.json").read_text())  # run.json made to agree with the one row
    record.update(best_test_acc=0.1, best_round=0, final_test_acc=0.1, evaluated_rounds=1)
    (folder / "run.json").write_text(json.dumps(record))


def _accuracy_above_one(folder: Path) -> None:
    edit_metrics(folder, lambda f: f.loc.__setitem__((1, "test_acc"), 1.5))
    record = json.loads((folder / "run.json").read_text())
    record.update(best_test_acc=1.5)
    (folder / "run.json").write_text(json.dumps(record))


def _edit_config(folder: Path, **fields) -> None:
    record = json.loads((folder / "run.json").read_text())
    record["config"].update(fields)
    (folder / "run.json").write_text(json.dumps(record))


TAMPERINGS = {
    "best_test_acc 0.999 (metrics: 0.333)": (lambda f: write_record(f, best_test_acc=0.999), "best_test_acc"),
    "accuracy 1.5": (lambda f: _accuracy_above_one(write_record(f)), "1.5"),
    "NaN in run.json": (lambda f: write_record(f, final_test_acc=math.nan), "NaN"),
    "best_round 999 of 2 rounds": (lambda f: write_record(f, best_round=999), "best_round"),
    "metrics.csv cut to one row": (lambda f: _cut_to_one_row(write_record(f)), "round"),
    "inf in metrics": (lambda f: edit_metrics(write_record(f), lambda m: m.loc.__setitem__((2, "test_loss"), math.inf)), "inf"),
    "negative bytes_up": (lambda f: edit_metrics(write_record(f), lambda m: m.loc.__setitem__((1, "bytes_up"), -5)),
                          "bytes_up is -5.0 in row 1"),
    "round 1 renamed 2": (lambda f: edit_metrics(write_record(f), lambda m: m.loc.__setitem__((1, "round"), 2)),
                          "row 1 is round 2, not 1"),
    # relabelled: one copy of a field run.json holds twice says another run
    "algorithm fedgmh over config.algorithm fedavg": (lambda f: write_record(f, algorithm="fedgmh"), "algorithm 'fedgmh' but config"),
    "seed 7 over config.seed 0": (lambda f: write_record(f, seed=7), "seed 7 but config.seed 0"),
    "partition of another dataset": (lambda f: write_record(f, partition={**json.loads((write_record(f) / "run.json").read_text())[
        "partition"], "dataset": "mnist"}), "partition.dataset 'mnist'"),
    "clients 5 over partition's 4": (lambda f: write_record(f, num_clients=5), "num_clients 5 but partition.num_clients 4"),
    "an option set otherwise": (lambda f: _edit_config(write_record(f), overrides={"lr_decay": "0.5"}), "config.overrides.lr_decay"),
    "seed 0.0": (lambda f: _edit_config(write_record(f, seed=0.0), seed=0.0), "seed 0.0 is not a seed"),
    "wall_time_s 'abc'": (lambda f: write_record(f, wall_time_s="abc"), "wall_time_s"),
    "more useful sample passes than executed": (
        lambda f: write_record(f, sample_passes={"useful": 5, "executed": 4, "useful_share": 1.25}), "useful <= executed"),
    # settings a run could not have started with (the checks of its start: TrainConfig, the options)
    "join_ratio 1.5": (lambda f: _edit_config(write_record(f), join_ratio=1.5), "config: join ratio must be in .0, 1., got 1.5"),
    "lr as text": (lambda f: _edit_config(write_record(f), lr="0.05"), "config: lr must be a number, got '0.05'"),
    "rounds true": (lambda f: _edit_config(write_record(f), rounds=True), "not a number of rounds"),
    "an engine option out of its range": (lambda f: write_record(f, engine={"eval_every": 0}), "engine_options"),
    "an engine option out of its choices": (lambda f: write_record(f, engine={"vectorise": "sometimes"}), "choose one of"),
    "an algorithm option out of its choices": (lambda f: write_record(f, algorithm_options={"weighting": "random"}),
                                               "algorithm_options: option weighting='random': choose one of"),
    "more executed sample passes than whole batches allow": (
        lambda f: write_record(f, sample_passes={"useful": 1, "executed": 1000, "useful_share": 0.001}),
        "executed <= batch size x useful"),
    "a useful share that is not useful / executed": (
        lambda f: write_record(f, sample_passes={"useful": 1, "executed": 4, "useful_share": 0.5}), "useful_share"),
    "more useful evaluation passes than executed": (
        lambda f: write_record(f, evaluation_sample_passes={"useful": 5, "executed": 4, "useful_share": 1.25}),
        "evaluation_sample_passes useful 5"),
    "evaluation passes without their share": (
        lambda f: write_record(f, evaluation_sample_passes={"useful": 1, "executed": 4}), "evaluation_sample_passes is"),
}


def test_a_record_with_or_without_sample_passes_is_valid(tmp_path: Path) -> None:
    passes = {"useful": 3, "executed": 4, "useful_share": 0.75}
    assert run_record.load_record(write_record(tmp_path / "with", sample_passes=passes))[0]["sample_passes"] == passes
    assert "sample_passes" not in run_record.load_record(write_record(tmp_path / "without"))[0]
    both = run_record.load_record(write_record(tmp_path / "both", sample_passes=passes, evaluation_sample_passes=passes))[0]
    assert both["evaluation_sample_passes"] == passes


def test_an_algorithm_option_outside_its_cards_range_is_refused(tmp_path: Path) -> None:
    folder = write_record(tmp_path / "run", algorithm="ditto", algorithm_options={"mu": -1.0})
    _edit_config(folder, algorithm="ditto")
    with pytest.raises(UserError, match="algorithm_options: mu must be a finite number >= 0, got -1.0"):
        run_record.load_record(folder)


@pytest.mark.parametrize("tampering", list(TAMPERINGS))
def test_an_invalid_record_is_reported_and_never_used(tampering: str, tmp_path: Path, capsys) -> None:
    make, reason = TAMPERINGS[tampering]
    bad = tmp_path / "incoming" / "table2" / "fedavg" / "seed0"
    make(bad)
    # read by the store: a one-line reason naming the file
    with pytest.raises(UserError, match=reason) as err:
        store.read_record(bad)
    assert str(bad) in str(err.value) and "\n" not in str(err.value)
    # `store check`: reported, exit status 2
    assert cli_main(["store", "check", str(tmp_path / "incoming")]) == 2
    out = capsys.readouterr().out
    assert f"invalid: {bad}" in out and "1 invalid" in out
    # merged: never
    into = tmp_path / "store"
    assert cli_main(["store", "merge", str(tmp_path / "incoming"), "--into", str(into)]) == 2
    assert not into.exists() or not list(into.rglob("run.json"))
    # put: refused, nothing written
    with pytest.raises(UserError, match=reason):
        store.put(bad, tmp_path / "dest")
    assert not (tmp_path / "dest").exists()
    # found for reuse: never; the note says why
    write_record(tmp_path / "honest" / "run")
    key = store.read_record(tmp_path / "honest" / "run").key
    found, notes = store.find([tmp_path / "incoming"], key)
    assert found is None and any(str(bad) in note and "invalid" in note for note in notes)
    # aggregated into a table: never
    with pytest.raises(UserError, match=reason):
        report.load_run(bad)
    assert cli_main(["aggregate", "--runs", str(bad), "--out", str(tmp_path / "results.csv")]) == 2
    assert not (tmp_path / "results.csv").exists()


def test_legitimate_records_validate(tmp_path: Path) -> None:
    """What a valid record may hold: train_loss empty in a round that trained nothing, an infinite
    test loss under eval_prior=mask, rows of the evaluated rounds only (eval_every, eval_last)."""
    write_record(tmp_path / "plain")
    masked = write_record(tmp_path / "masked", engine={"eval_prior": "mask"})
    edit_metrics(masked, lambda m: m.loc.__setitem__((2, "test_loss"), math.inf))
    sparse = write_record(tmp_path / "sparse", accuracy=(0.1, 0.4, 0.35), engine={"eval_every": 2})
    edit_metrics(sparse, lambda m: m.__setitem__("round", [0, 2, 4]))
    record = json.loads((sparse / "run.json").read_text())
    record["config"]["rounds"] = 4
    record["best_round"] = 2
    (sparse / "run.json").write_text(json.dumps(record))
    last = write_record(tmp_path / "last", accuracy=(0.2, 0.3), test_loss=(1.5, 1.4), engine={"eval_last": 2})
    edit_metrics(last, lambda m: m.__setitem__("round", [3, 4]))
    record = json.loads((last / "run.json").read_text())
    record["config"]["rounds"], record["best_round"] = 4, 4
    (last / "run.json").write_text(json.dumps(record))
    for folder in ("plain", "masked", "sparse", "last"):
        store.read_record(tmp_path / folder)
        report.load_run(tmp_path / folder)
    # the same infinity without eval_prior=mask, or a row of an unevaluated round, is refused
    edit_metrics(sparse, lambda m: m.__setitem__("round", [0, 1, 4]))
    with pytest.raises(UserError, match="rounds"):
        store.read_record(sparse)


def test_floats_are_read_exactly_whatever_pandas_parser_does(tmp_path: Path, monkeypatch) -> None:
    """A record's 17-digit accuracies compare with run.json's even under a pandas whose float parser
    is one unit in the last place off (the H200 image's pandas was: its records failed their own
    check with "best_test_acc is 0.10549421311693495 but metrics.csv gives 0.1054942131169349")."""
    accuracy = (0.011174670746308367, 0.10549421311693495, 0.10090461620327258)
    folder = write_record(tmp_path / "run", accuracy=accuracy)
    exact = pd.read_csv

    def off_by_one_ulp(*args, **kwargs):
        table = exact(*args, **kwargs)
        for column in table.columns:
            if pd.api.types.is_float_dtype(table[column]):
                table[column] = np.nextafter(table[column].to_numpy(), -np.inf)
        return table

    monkeypatch.setattr(run_record.pd, "read_csv", off_by_one_ulp)
    assert store.read_record(folder)  # validates: results recomputed from metrics.csv equal run.json's
    assert run_record.read_table(folder / "metrics.csv")["test_acc"].tolist() == list(accuracy)


def test_a_tampered_clients_csv_is_refused(tmp_path: Path) -> None:
    folder = write_record(tmp_path / "run")
    pd.DataFrame({"client": [0, 1], "test_samples": [10, 30], "test_acc_best": [0.333, 0.333],
                  "test_acc_last": [0.3, 0.3]}).to_csv(folder / "clients.csv", index=False)
    store.read_record(folder)
    pd.DataFrame({"client": [0, 1], "test_samples": [10, 30], "test_acc_best": [0.9, 0.95],
                  "test_acc_last": [0.3, 0.3]}).to_csv(folder / "clients.csv", index=False)
    with pytest.raises(UserError, match="clients.csv"):
        store.read_record(folder)


def test_a_tampered_copy_with_one_extra_csv_does_not_win(tmp_path: Path, capsys) -> None:
    honest = write_record(tmp_path / "store" / "b-honest")
    tampered = write_record(tmp_path / "store" / "a-copy", best_test_acc=0.999)  # first by path, one CSV more
    (tampered / "notes.csv").write_text("note\nreviewed\n")
    key = store.read_record(honest).key
    found, notes = store.find([tmp_path / "store"], key)
    assert found.folder == honest and found.record["best_test_acc"] == 0.333
    # among records that are truly equal the first by store order, then path, is reused; the rule is reported
    twin = write_record(tmp_path / "other" / "z-twin")
    (twin / "notes.csv").write_text("note\nreviewed\n")
    found, notes = store.find([tmp_path / "store", tmp_path / "other"], key)
    assert found.folder == honest and any("first of 2 equal records" in note for note in notes)
    found, notes = store.find([tmp_path / "other", tmp_path / "store"], key)
    assert found.folder == twin


def test_put_never_rewrites_a_stored_records_results(tmp_path: Path) -> None:
    committed = write_record(tmp_path / "committed" / "run")
    before = files(committed)
    again = write_record(tmp_path / "again", wall_time_s=99.0, device="cuda:0 (H100)")  # same results, other timings
    edit_metrics(again, lambda m: m.__setitem__("seconds", 9.0))
    assert store.put(again, committed) == "present"
    assert files(committed) == before
    tampered = write_record(tmp_path / "tampered", best_test_acc=0.999)
    with pytest.raises(UserError, match="best_test_acc"):
        store.put(tampered, committed)
    other = write_record(tmp_path / "other", accuracy=(0.1, 0.5, 0.4))  # the same run, other (valid) results
    with pytest.raises(store.StoreConflict, match="different results"):
        store.put(other, committed)
    assert files(committed) == before
    # what put may still do to an equal record: add an optional table it lacks, and its workflow labels
    labelled = write_record(tmp_path / "labelled", workflow={"config_name": "mini", "experiment": "table2"})
    pd.DataFrame({"client": [0], "test_samples": [3], "test_acc_best": [0.333], "test_acc_last": [0.3]}).to_csv(
        labelled / "clients.csv", index=False)
    assert store.put(labelled, committed) == "present (+ clients.csv) (labels)"
    assert json.loads((committed / "run.json").read_text())["workflow"] == {"config_name": "mini", "experiment": "table2"}
    assert (committed / "metrics.csv").read_bytes() == before[committed / "metrics.csv"]


@pytest.mark.parametrize("name", ["notes.csv", "metrics.csv", "run.json"])
def test_links_in_an_incoming_record_are_refused(name: str, tmp_path: Path, capsys) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("round,test_acc\n0,0.9\n")
    elsewhere = write_record(tmp_path / "elsewhere")
    incoming = write_record(tmp_path / "incoming" / "table2" / "run")
    target = {"notes.csv": secret, "metrics.csv": elsewhere / "metrics.csv", "run.json": elsewhere / "run.json"}[name]
    (incoming / name).unlink(missing_ok=True)
    (incoming / name).symlink_to(target)
    with pytest.raises(UserError, match="symbolic link"):
        store.read_record(incoming)
    assert cli_main(["store", "merge", str(tmp_path / "incoming"), "--into", str(tmp_path / "store")]) == 2
    assert not (tmp_path / "store").exists() or not list((tmp_path / "store").rglob("*.csv"))
    with pytest.raises(UserError, match="symbolic link"):
        store.put(incoming, tmp_path / "dest")
    assert not (tmp_path / "dest" / "notes.csv").exists()


def test_files_that_are_not_regular_or_too_large_are_refused(tmp_path: Path, monkeypatch) -> None:
    fifo = write_record(tmp_path / "fifo")
    os.mkfifo(fifo / "clients.csv")
    with pytest.raises(UserError, match="not a regular file"):
        store.read_record(fifo)
    big = write_record(tmp_path / "big")
    monkeypatch.setattr(run_record, "MAX_FILE_BYTES", 100)
    with pytest.raises(UserError, match=r"(run.json|metrics.csv) is \d+ bytes, more than a record file may hold \(100 bytes\)"):
        store.read_record(big)


def test_float_level_loss_differences_are_reported_not_a_conflict(tmp_path: Path, capsys) -> None:
    write_record(tmp_path / "store" / "table2" / "run")
    write_record(tmp_path / "gpu" / "table2" / "run", test_loss=(2.3 * (1 + 3e-7), 1.5, 1.4 * (1 - 2e-7)))
    ours, theirs = store.read_record(tmp_path / "store" / "table2" / "run"), store.read_record(tmp_path / "gpu" / "table2" / "run")
    difference = ours.compare(theirs)
    assert difference.kind == FLOAT_LEVEL and difference.max_abs == pytest.approx(2.3 * 3e-7, rel=1e-3)
    assert difference.max_rel == pytest.approx(3e-7, rel=1e-3)
    assert ours.compare(store.read_record(tmp_path / "store" / "table2" / "run")).kind == IDENTICAL
    assert cli_main(["store", "check", str(tmp_path / "store"), str(tmp_path / "gpu")]) == 0
    out = capsys.readouterr().out
    assert "float-level:" in out and "test_loss" in out and "0 conflict(s)" in out
    before = files(tmp_path / "store")
    assert cli_main(["store", "merge", str(tmp_path / "gpu"), "--into", str(tmp_path / "store")]) == 0
    out = capsys.readouterr().out
    assert "0 added, 1 already present, 0 conflict(s)" in out and "float-level" in out
    assert files(tmp_path / "store") == before
    found, _ = store.find([tmp_path / "gpu", tmp_path / "store"], ours.key)  # no conflict: the first store's
    assert found.folder == tmp_path / "gpu" / "table2" / "run"


@pytest.mark.parametrize("change", ["loss 1e-3", "accuracy"])
def test_a_real_difference_is_still_a_conflict(change: str, tmp_path: Path, capsys) -> None:
    write_record(tmp_path / "store" / "run")
    if change == "accuracy":  # one test sample in the mean client accuracy of one round
        other = write_record(tmp_path / "gpu" / "run")
        edit_metrics(other, lambda m: m.loc.__setitem__((0, "test_acc_mean"), 0.1 + 1e-9))
    else:
        write_record(tmp_path / "gpu" / "run", test_loss=(2.3 * (1 + 1e-3), 1.5, 1.4))
    assert cli_main(["store", "check", str(tmp_path / "store"), str(tmp_path / "gpu")]) == 2
    assert "1 conflict(s)" in capsys.readouterr().out
    assert store.read_record(tmp_path / "store" / "run").compare(store.read_record(tmp_path / "gpu" / "run")).kind == DIFFERENT


def test_single_record_merge_lands_inside_into_by_its_labels(tmp_path: Path, capsys) -> None:
    labels = {"config_name": "paper", "experiment": "table2", "setting": "digits_c2_a0.5"}
    first = write_record(tmp_path / "job1" / "out", workflow=labels)
    second = write_record(tmp_path / "job2" / "out", workflow=labels, lr=0.5)  # another run, same labels
    into = tmp_path / "store" / "runs"
    assert cli_main(["store", "merge", str(first), "--into", str(into)]) == 0
    assert (into / "table2" / "digits_c2_a0.5" / "fedavg" / "seed0" / "run.json").is_file()
    assert cli_main(["store", "merge", str(second), "--into", str(into)]) == 0
    out = capsys.readouterr().out
    placed = [Path(line.split(" -> ")[1]) for line in out.splitlines() if line.startswith("added: ")]
    assert len(placed) == 2 and all(path.is_relative_to(into) and (path / "run.json").is_file() for path in placed)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("run.json") if not p.is_relative_to(tmp_path / "job1")
                  and not p.is_relative_to(tmp_path / "job2")) == sorted(p.relative_to(tmp_path) / "run.json" for p in placed)
    unlabelled = write_record(tmp_path / "job3" / "out", lr=0.2)
    assert cli_main(["store", "merge", str(unlabelled), "--into", str(into)]) == 2
    err = capsys.readouterr()
    assert "no workflow labels" in err.out and len(list(into.rglob("run.json"))) == 2
    # a link in the store that leads elsewhere is not followed
    (tmp_path / "elsewhere").mkdir()
    (into / "linked").symlink_to(tmp_path / "elsewhere")
    write_record(tmp_path / "tree" / "linked" / "run", lr=0.3)
    assert cli_main(["store", "merge", str(tmp_path / "tree"), "--into", str(into)]) == 2
    assert "outside the store" in capsys.readouterr().out and not list((tmp_path / "elsewhere").iterdir())


SLOW_MERGE = """
import sys, time
from fedgmh import store
copy = store.copy_record
def slow_copy(*args, **kwargs):
    time.sleep(1.0)  # the other merge has time to look at the store meanwhile
    return copy(*args, **kwargs)
store.copy_record = slow_copy
from fedgmh.cli import main
sys.exit(main(["store", "merge", sys.argv[1], "--into", sys.argv[2]]))
"""


def test_two_merges_at_once_leave_no_conflict_unreported(tmp_path: Path) -> None:
    """Two result bundles of the same two runs with other numbers, merged at the same time: the
    second merge waits for the first (the store's lock) and reports both conflicts."""
    for bundle, accuracy in (("gpu1", (0.1, 0.333, 0.3)), ("gpu2", (0.1, 0.5, 0.4))):
        for seed in (0, 1):
            folder = write_record(tmp_path / bundle / f"seed{seed}", accuracy=accuracy)
            record = json.loads((folder / "run.json").read_text())
            record["config"]["seed"] = record["seed"] = seed
            (folder / "run.json").write_text(json.dumps(record))
    into = tmp_path / "store"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(store.__file__).parents[1]), os.environ.get("PYTHONPATH", "")]))
    jobs = [subprocess.Popen([sys.executable, "-c", SLOW_MERGE, str(tmp_path / bundle), str(into)], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for bundle in ("gpu1", "gpu2")]
    outputs = [job.communicate(timeout=120)[0] for job in jobs]
    conflicts = sum(output.count("conflict: ") for output in outputs)
    assert conflicts == 2, outputs
    assert sorted(job.returncode for job in jobs) == [0, 2], outputs
    runs, problems = store.scan([into])
    assert problems == [] and len(runs) == 2 and store.conflicts(runs) == []
    assert len({run.record["best_test_acc"] for run in runs}) == 1  # both records from one bundle, whole
    assert not list(into.rglob(store.LOCK_NAME))  # released and removed


def test_a_record_put_while_a_merge_runs_is_compared_not_passed_by(tmp_path: Path, monkeypatch, capsys) -> None:
    """A training job's `put` files a run in the place a merge, which read the store before, is about
    to write another record of it (other numbers): the merge compares the two under the folder's lock
    and reports the conflict, instead of filing its record beside the put one."""
    labels = {"config_name": "paper", "experiment": "table2", "setting": "digits_c2_a0.5"}
    write_record(tmp_path / "bundle" / "table2" / "digits_c2_a0.5" / "fedavg" / "seed0", workflow=labels)
    put_by_the_job = write_record(tmp_path / "job", accuracy=(0.1, 0.5, 0.4), workflow=labels)
    into = tmp_path / "store"
    place = into / "table2" / "digits_c2_a0.5" / "fedavg" / "seed0"
    real_lock, puts = store.locked, []

    def job_puts_first(folder):
        if Path(folder) == place.parent and not puts:  # the merge is about to write there: the job is quicker
            puts.append("putting")
            puts[0] = store.put(put_by_the_job, place)
        return real_lock(folder)

    monkeypatch.setattr(store, "locked", job_puts_first)
    assert cli_main(["store", "merge", str(tmp_path / "bundle"), "--into", str(into)]) == 2
    assert puts == ["added"] and "1 conflict(s)" in capsys.readouterr().out
    runs, problems = store.scan([into])
    assert problems == [] and [run.folder for run in runs] == [place] and runs[0].record["best_test_acc"] == 0.5


def test_a_run_that_skipped_rounds_its_preset_evaluates_is_not_reported_as_the_preset(tmp_path: Path) -> None:
    sparse = write_record(tmp_path / "sparse", accuracy=(0.1, 0.4, 0.35), engine={"eval_every": 2})
    edit_metrics(sparse, lambda m: m.__setitem__("round", [0, 2, 4]))
    record = json.loads((sparse / "run.json").read_text())
    record["config"]["rounds"], record["config"]["overrides"], record["best_round"] = 4, {"eval_every": "2"}, 2
    (sparse / "run.json").write_text(json.dumps(record))
    assert report.load_run(sparse)[0]["best_round"] == 2
    with pytest.raises(UserError, match="its preset evaluates rounds it did not .2, e.g. 1."):
        report.load_run(sparse, preset_evaluation=True)


def test_a_record_or_a_bundle_of_too_many_files_is_refused_before_anything_is_copied(tmp_path: Path, monkeypatch, capsys) -> None:
    """A bundle of 100,000 tiny files was merged file by file (13,414 junk files in the store after 120 s)."""
    crowded = write_record(tmp_path / "incoming" / "table2" / "fedavg" / "seed0")
    for index in range(run_record.MAX_TABLES):
        (crowded / f"junk{index}.csv").write_text("a,b\n1,2\n")
    with pytest.raises(UserError, match=f"holds {run_record.MAX_TABLES + 1} tables .*; a record holds at most {run_record.MAX_TABLES}"):
        store.read_record(crowded)
    into = tmp_path / "store"
    assert cli_main(["store", "merge", str(tmp_path / "incoming"), "--into", str(into)]) == 2
    assert "1 invalid" in capsys.readouterr().out and not list(into.rglob("*.csv"))
    # a source of more files and folders than a merge takes: refused whole, the store untouched
    write_record(tmp_path / "bundle" / "table2" / "fedavg" / "seed0")
    for index in range(30):
        (tmp_path / "bundle" / f"junk{index}").write_text("x")
    monkeypatch.setattr(store, "MAX_SOURCE_ENTRIES", 20)
    assert cli_main(["store", "merge", str(tmp_path / "bundle"), "--into", str(into)]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'bundle'} holds more than 20 files and folders, more than a merge takes; nothing was merged" in err
    assert not list(into.rglob("run.json"))
    monkeypatch.setattr(store, "MAX_SOURCE_ENTRIES", 40)
    assert cli_main(["store", "merge", str(tmp_path / "bundle"), "--into", str(into)]) == 0
