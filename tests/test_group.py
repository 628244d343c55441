"""Runs trained together (`fedgmh train-group`, engine.group): their clients in one batched step, each
run's record, snapshots and resume its own and equal to the run trained alone, to the float tolerance
of a batched step (tests/test_vectorised.py's)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import torch
from conftest import make_federation, stopping_after_a_snapshot

from fedgmh.cli import main
from fedgmh.config import TrainConfig
from fedgmh.engine import Phase
from fedgmh.engine.group import RunGroup
from fedgmh.engine.vectorised import prepare, train_requests
from fedgmh.train import GroupRun, run_group, run_training

pytestmark = pytest.mark.usefixtures("one_thread")
CLIENTS = [[0, 1, 0, 1, 2, 2, 1, 0, 1], [1, 2, 2], [0, 2, 2, 1, 0, 0, 1], [2], [0, 0, 2, 1, 1]]


def test_one_step_for_two_runs_gives_each_run_its_own_step(float64):
    """Two runs' clients in one step: each run's parameters, losses and sample passes as its own step's."""
    def request(seed, data=None):
        fed = make_federation(CLIENTS, num_classes=3, batch_size=3, local_epochs=2, seed=seed)
        if data is not None:  # shared, as a group's runs share it
            fed.images, fed.labels = data
        return prepare(fed, [[Phase(fed.initial_params())] for _ in (0, 2, 3)], [0, 2, 3], None)

    a = request(0)
    b = request(1, (a.fed.images, a.fed.labels))
    alone = [request(0), request(1, (a.fed.images, a.fed.labels))]
    together = train_requests([a, b])
    for grouped, own, single in zip(together, [train_requests([r])[0] for r in alone], alone):
        for x, y in zip(grouped, own):
            assert x[0].num_samples == y[0].num_samples
            torch.testing.assert_close(x[0].params, y[0].params, rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(x[0]._loss, y[0]._loss, rtol=1e-4, atol=1e-5)
    assert [r.fed.sample_passes.record() for r in (a, b)] == [r.fed.sample_passes.record() for r in alone]


def test_the_group_waits_for_every_live_run_and_hands_errors_to_all():
    def request(i):
        return SimpleNamespace(i=i, done=False, outcome=None)

    seen = []
    group = RunGroup(train=lambda requests: seen.append(len(requests)) or [[r.i] for r in requests])
    members = [group.member() for _ in range(3)]
    results = {}
    threads = [threading.Thread(target=lambda i=i: results.setdefault(i, group.train(request(i)))) for i in range(2)]
    for thread in threads:
        thread.start()
    members[2].leave()
    members[2].leave()  # counted once
    for thread in threads:
        thread.join(5)
    assert seen == [2] and results == {0: [0], 1: [1]}
    failing = RunGroup(train=lambda requests: 1 / 0)
    failing.member()
    with pytest.raises(ZeroDivisionError):
        failing.train(request(0))


@pytest.fixture(scope="module")
def digits(tmp_path_factory) -> Path:
    from fedgmh import data

    root = tmp_path_factory.mktemp("group")
    data.download("digits", root / "data")
    assert main(["partition", "--dataset", "digits", "--root", str(root / "data"), "--clients", "5",
                 "--classes-per-client", "3", "--alpha", "0.5", "--out", str(root / "part.npz")]) == 0
    return root


def config(root: Path, seed: int, algorithm: str = "fedavg", **overrides) -> TrainConfig:
    return TrainConfig(dataset="digits", root=str(root / "data"), partition=str(root / "part.npz"), algorithm=algorithm,
                       rounds=3, join_ratio=0.6, local_epochs=1, batch_size=40, lr=0.05, seed=seed, device="cpu", threads=1,
                       overrides={"vectorise": "on", **overrides})


def table(folder: Path, name: str = "metrics.csv") -> pd.DataFrame:
    frame = pd.read_csv(folder / name)
    return frame.drop(columns=[c for c in ("seconds",) if c in frame])


def same_records(a: Path, b: Path, passes: bool = True, acc_atol: float = 1e-4) -> None:
    """The same numbers to float tolerance (accuracies within `acc_atol`); `passes`: and the same sample
    passes (a resumed run counts those since its resume only)."""
    for name in ("metrics.csv", "clients.csv"):
        x, y = table(a, name), table(b, name)
        accs = [c for c in x if "acc" in c]
        pd.testing.assert_frame_equal(x.drop(columns=accs), y.drop(columns=accs), check_exact=False, rtol=1e-3, atol=1e-4)
        pd.testing.assert_frame_equal(x[accs], y[accs], check_exact=False, rtol=0, atol=acc_atol)
    ra, rb = (json.loads((f / "run.json").read_text()) for f in (a, b))
    assert ra["engine_options"] == rb["engine_options"] and ra["config"] == rb["config"]
    assert not passes or ra["sample_passes"] == rb["sample_passes"]


def _counted(monkeypatch, field: str) -> list[int]:
    """What every group's `field` (`RunGroup.steps` or `RunGroup.evaluations`) gains during the test."""
    seen, real = [], RunGroup._maybe_train

    def counting(self):
        before = len(getattr(self, field))
        real(self)
        seen.extend(getattr(self, field)[before:])

    monkeypatch.setattr(RunGroup, "_maybe_train", counting)
    return seen


@pytest.mark.parametrize("runs", [[("fedavg", 0), ("fedavg", 1), ("fedavg", 2)], [("fedgmh", 0), ("fedgmh", 1), ("fedgmh", 2)],
                                  [("fedavg", 0), ("fedgmh", 0)], [("fedrod", 0), ("fedrod", 1)], [("fedcp", 0), ("fedcp", 1)]],
                         ids=["fedavg-seeds", "fedgmh-seeds", "two-methods", "fedrod-seeds", "fedcp-seeds"])
def test_runs_trained_together_equal_the_runs_trained_alone(digits, tmp_path, runs, monkeypatch):
    """Seeds of one method, two methods whose local training is the same plain SGD, and seeds of a
    method whose loss is a bound method (FedRoD, FedCP) share steps: the steps counted are those trained
    (`RunGroup.steps`, from `train_requests`), not the requests handed over."""
    steps = _counted(monkeypatch, "steps")
    alone = [run_training(config(digits, seed, name), tmp_path / f"alone{i}", progress=False) for i, (name, seed) in enumerate(runs)]
    together = run_group([GroupRun(config(digits, seed, name), tmp_path / f"group{i}", {"progress": False}) for i, (name, seed) in enumerate(runs)])
    assert all(isinstance(record, dict) for record in together), together
    # FedCP's policy network (layer norm, softmax over feature pairs) carries the float differences of a
    # batched step (test losses within 6e-5 after 3 rounds) far enough to flip a test sample's prediction
    one_sample = 1 / pd.read_csv(tmp_path / "alone0" / "clients.csv")["test_samples"].min()
    acc_atol = one_sample + 1e-9 if runs[0][0] == "fedcp" else 1e-4
    for i in range(len(runs)):
        same_records(tmp_path / f"alone{i}", tmp_path / f"group{i}", acc_atol=acc_atol)
    assert steps and max(steps) == len(runs)  # all runs' clients did share steps
    assert len({r["best_test_acc"] for r in alone}) > 1  # the runs differ


def test_a_groups_runs_evaluate_in_shared_passes_with_the_records_of_the_runs_alone(digits, tmp_path, monkeypatch):
    """Batched evaluation (eval_batched=on) in a group: every evaluation holds both runs' models
    (`RunGroup.evaluations`), and each run's record is that of the run alone (its training to a batched
    step's float tolerance)."""
    evaluations = _counted(monkeypatch, "evaluations")
    runs = [config(digits, seed, "fedgmh", eval_batched="on") for seed in (0, 1)]
    alone = [run_training(c, tmp_path / f"alone{i}", progress=False) for i, c in enumerate(runs)]
    together = run_group([GroupRun(c, tmp_path / f"group{i}", {"progress": False}) for i, c in enumerate(runs)])
    assert all(isinstance(record, dict) for record in together), together
    for i in range(len(runs)):
        same_records(tmp_path / f"alone{i}", tmp_path / f"group{i}")
    assert evaluations and set(evaluations) == {2}  # 3 rounds and the last evaluation: all shared
    assert len({r["best_test_acc"] for r in alone}) > 1  # the runs differ


# thread timing: failed once in four runs on a 2-core machine under a load of 16 (not understood yet)
@pytest.mark.slow
def test_a_grouped_run_resumes_from_its_snapshot_as_if_uninterrupted(digits, tmp_path):
    runs = lambda base: [GroupRun(config(digits, seed), base / f"seed{seed}", {"progress": False, "checkpoint_every": 1})  # noqa: E731
                         for seed in (0, 1)]
    with stopping_after_a_snapshot():
        stopped = run_group(runs(tmp_path / "cut"))
    assert all(isinstance(outcome, BaseException) for outcome in stopped)
    assert all((tmp_path / "cut" / f"seed{seed}" / "checkpoint.pt").is_file() for seed in (0, 1))
    resumed = run_group(runs(tmp_path / "cut"))
    assert [r["resumed_from_round"] for r in resumed] == [1, 1]
    run_group(runs(tmp_path / "whole"))
    for seed in (0, 1):
        same_records(tmp_path / "whole" / f"seed{seed}", tmp_path / "cut" / f"seed{seed}", passes=False)


# thread timing: failed once in four runs on a 2-core machine under a load of 16 (not understood yet)
@pytest.mark.slow
def test_a_sigterm_stops_each_run_of_a_group_at_its_round_end_with_a_snapshot(digits, tmp_path, monkeypatch):
    import os
    import signal

    from fedgmh import engine
    from fedgmh.errors import Interrupted

    real_save, sent = engine.Checkpoint.save, []

    def save_then_term(self, snapshot):
        real_save(self, snapshot)
        if not sent:  # from a run's thread; the main thread's handler notes it for every run
            sent.append(os.kill(os.getpid(), signal.SIGTERM))

    runs = lambda base: [GroupRun(config(digits, seed), base / f"seed{seed}", {"progress": False, "checkpoint_every": 1})  # noqa: E731
                         for seed in (0, 1)]
    monkeypatch.setattr(engine.Checkpoint, "save", save_then_term)
    stopped = run_group(runs(tmp_path / "cut"))
    monkeypatch.setattr(engine.Checkpoint, "save", real_save)
    assert all(isinstance(outcome, Interrupted) and outcome.details["resume_round"] for outcome in stopped), stopped
    resumed = run_group(runs(tmp_path / "cut"))
    assert all(r["resumed_from_round"] for r in resumed)
    run_group(runs(tmp_path / "whole"))
    for seed in (0, 1):
        same_records(tmp_path / "whole" / f"seed{seed}", tmp_path / "cut" / f"seed{seed}", passes=False)


def test_train_group_reads_a_runs_file_and_writes_each_runs_folder(digits, tmp_path, capsys):
    line = (f"--dataset digits --root {digits / 'data'} --partition {digits / 'part.npz'} --algorithm fedavg --rounds 2 "
            "--local-epochs 1 --join-ratio 0.6 --batch-size 40 --device cpu --threads 1 --quiet --set vectorise=on")
    runs = tmp_path / "runs.txt"
    runs.write_text(f"# two seeds\n{line} --seed 0 --out {tmp_path / 'a'}\n\n{line} --seed 1 --out {tmp_path / 'b'}\n")
    assert main(["train-group", str(runs)]) == 0, capsys.readouterr().err
    assert [json.loads((tmp_path / n / "run.json").read_text())["seed"] for n in "ab"] == [0, 1]
    runs.write_text(f"{line} --seed 0 --out {tmp_path / 'c'} --lr\n")
    assert main(["train-group", str(runs)]) == 2 and "line 1 is not a `fedgmh train` command line" in capsys.readouterr().err
    runs.write_text(f"{line} --seed 0 --out {tmp_path / 'c'}\n{line} --seed 1 --out {tmp_path / 'c'}\n")
    assert main(["train-group", str(runs)]) == 2 and "same --out" in capsys.readouterr().err


def test_train_group_skips_a_finished_run_and_reuses_a_stored_record(digits, tmp_path, capsys):
    """As `fedgmh train` does: a run whose folder holds its finished record is not trained again, and with
    --store a run whose record is stored is copied, not trained (how a batch job of the workflow, whose
    outputs Snakemake removes before it runs, gets its unchanged runs back: docs/workflow.md)."""
    line = (f"--dataset digits --root {digits / 'data'} --partition {digits / 'part.npz'} --algorithm fedavg --rounds 1 "
            "--local-epochs 1 --join-ratio 0.6 --batch-size 40 --device cpu --threads 1 --quiet --set vectorise=on")
    runs = tmp_path / "runs.txt"
    runs.write_text("".join(f"{line} --seed {seed} --out {tmp_path / f'run{seed}'} --put-record {tmp_path / 'store' / f'run{seed}'}\n"
                            for seed in (0, 1)))
    assert main(["train-group", str(runs)]) == 0, capsys.readouterr().err
    started = [json.loads((tmp_path / f"run{seed}" / "run.json").read_text())["started_utc"] for seed in (0, 1)]
    capsys.readouterr()
    assert main(["train-group", str(runs)]) == 0
    assert capsys.readouterr().err.count("already holds the finished run of these settings; not trained again") == 2
    assert [json.loads((tmp_path / f"run{seed}" / "run.json").read_text())["started_utc"] for seed in (0, 1)] == started
    # the workflow's lines: --overwrite (its outputs are gone), --store; the records come back from the store
    runs.write_text("".join(f"{line} --seed {seed} --out {tmp_path / f'again{seed}'} --overwrite --store {tmp_path / 'store'}\n"
                            for seed in (0, 1)))
    assert main(["train-group", str(runs)]) == 0  # (--quiet: no "reused the record" line)
    assert [json.loads((tmp_path / f"again{seed}" / "run.json").read_text())["started_utc"] for seed in (0, 1)] == started
