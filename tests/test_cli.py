"""`fedgmh train` end to end on the embedded dataset, and its errors for bad input."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from conftest import prepare_digits, train_args

from fedgmh.cards import algorithm_names, card
from fedgmh.cli import main


#: the runs of this file: 2 rounds, 2 of the 6 clients a round
RUN = {"rounds": 2, "join_ratio": 0.4}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    return prepare_digits(tmp_path_factory.mktemp("cli"), clients=6)


def test_train_writes_metrics_and_run_record(setup, tmp_path, capsys):
    assert main(train_args(setup, tmp_path / "ok", "--set", "beta=0.3", "--set", "preset=official", algorithm="fedgmh",
                           **RUN)) == 0
    metrics = pd.read_csv(tmp_path / "ok" / "metrics.csv")
    record = json.loads((tmp_path / "ok" / "run.json").read_text())
    # official preset evaluates only the last 20 rounds: here all 3 of them
    assert metrics["round"].tolist() == [0, 1, 2]
    assert record["best_test_acc"] == pytest.approx(metrics["test_acc"].max())
    assert record["algorithm_options"]["beta"] == 0.3
    assert record["algorithm_options"]["mix"] == "noncritical" and record["engine_options"]["drop_last"] is True
    assert record["partition"]["dataset"] == "digits" and record["versions"]["torch"]
    assert "best test accuracy" in capsys.readouterr().out


def test_train_puts_its_record_into_a_store_folder(setup, tmp_path, capsys):
    """--put-record (the workflow's train job): the record, trained or reused from a store, goes into the
    store folder; a record of other settings there stays and this one goes beside it."""
    store = tmp_path / "store" / "table2" / "digits" / "fedavg" / "seed0"
    assert main(train_args(setup, tmp_path / "put", "--put-record", str(store), **RUN)) == 0
    assert (store / "run.json").read_bytes() == (tmp_path / "put" / "run.json").read_bytes()
    assert (store / "metrics.csv").read_bytes() == (tmp_path / "put" / "metrics.csv").read_bytes()
    assert f"store put: added {store}" in capsys.readouterr().out
    # the same run again, reused from that store: already there
    assert main(train_args(setup, tmp_path / "put_again", "--store", str(tmp_path / "store"), "--put-record", str(store),
                           **RUN)) == 0
    assert f"store put: present {store}" in capsys.readouterr().out
    # other settings, same folder: beside the first record, which stays
    first = (store / "run.json").read_bytes()
    assert main(train_args(setup, tmp_path / "put_other", "--lr", "0.2", "--put-record", str(store), **RUN)) == 0
    assert "beside the record of another run" in capsys.readouterr().out
    assert (store / "run.json").read_bytes() == first
    beside = list(store.parent.glob("seed0-*/run.json"))
    assert len(beside) == 1 and json.loads(beside[0].read_text())["config"]["lr"] == 0.2


@pytest.mark.parametrize(
    "extra,algorithm,message",
    [
        ((), "fedfoo", "unknown algorithm 'fedfoo'"),
        (("--set", "gamma=2"), "fedgmh", "unknown option(s) gamma"),
        (("--set", "beta=high"), "fedgmh", "beta='high': expected a finite float"),
        (("--set", "drop_last=maybe"), "fedavg", "expected a value of type bool"),
        (("--set", "beta"), "fedgmh", "--set expects KEY=VALUE"),
        (("--lr", "-1"), "fedavg", "learning rate must be a finite number > 0"),
        (("--device", "cuda:7"), "fedavg", "CUDA is not available"),
    ],
)
def test_bad_input_fails_with_a_message_and_no_output(setup, tmp_path, capsys, extra, algorithm, message):
    if "cuda" in " ".join(extra):
        import torch

        if torch.cuda.is_available():
            pytest.skip("this machine has CUDA")
    assert main(train_args(setup, tmp_path / "bad", *extra, algorithm=algorithm, **RUN)) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


def test_partition_from_other_data_is_rejected(setup, tmp_path, capsys):
    import numpy as np

    with np.load(setup.partition) as npz:
        arrays = dict(npz)
    meta = json.loads(str(arrays.pop("meta")))
    np.savez(tmp_path / "other.npz", **arrays, meta=np.array(json.dumps({**meta, "dataset_fingerprint": "0" * 64})))
    args = train_args(setup, tmp_path / "x", algorithm="fedgmh", **RUN)
    args[args.index("--partition") + 1] = str(tmp_path / "other.npz")
    assert main(args) == 2
    assert "fingerprint mismatch" in capsys.readouterr().err
    np.savez(tmp_path / "wrong.npz", **arrays, meta=np.array(json.dumps({**meta, "dataset": "mnist"})))
    args[args.index("--partition") + 1] = str(tmp_path / "wrong.npz")
    assert main(args) == 2
    assert "made for dataset 'mnist'" in capsys.readouterr().err


def _metrics_and_record(out):
    return pd.read_csv(out / "metrics.csv").drop(columns="seconds"), json.loads((out / "run.json").read_text())


@pytest.mark.parametrize("preset", ["paper", "official"])
@pytest.mark.parametrize("algorithm", algorithm_names())
def test_every_algorithm_trains_through_the_cli_deterministically(setup, tmp_path, algorithm, preset):
    runs = []
    for attempt in ("a", "b"):
        out = tmp_path / attempt
        assert main(train_args(setup, out, "--set", f"preset={preset}", algorithm=algorithm, **RUN)) == 0
        runs.append(_metrics_and_record(out))
    (metrics, record), (again, _) = runs
    assert metrics["round"].tolist() == [0, 1, 2]
    assert metrics[["test_acc", "test_acc_mean"]].apply(lambda col: col.between(0, 1)).all().all()
    assert metrics["train_loss"].iloc[:-1].notna().all()  # the last round only evaluates
    assert record["algorithm"] == algorithm and record["best_test_acc"] == pytest.approx(metrics["test_acc"].max())
    # PFLlib's loader under preset=official; an algorithm without official code (cepfl) has no official values
    official = card(algorithm).preset("official")
    assert record["engine_options"]["drop_last"] is (preset == "official" and official.get("drop_last", False))
    pd.testing.assert_frame_equal(metrics, again, check_exact=True)  # same seed, same metrics


# ------------------------------------------------------------------------------------ help texts


def test_version_names_the_package_version(capsys):
    import fedgmh

    assert main(["--version"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"fedgmh {fedgmh.__version__}")
    commit = fedgmh.code_version()
    assert (f"(commit {commit})" in out) if commit else "commit" not in out


def test_train_help_lists_algorithms_and_datasets_and_points_to_the_options(capsys):
    from fedgmh.data import DATASETS

    assert main(["train", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert all(name in out for name in [*algorithm_names(), *DATASETS])
    assert "fedgmh options ALGORITHM" in out
    assert main(["train", "--dataset", "svhn", "--root", "r", "--partition", "p", "--algorithm", "fedavg", "--rounds", "1", "--out", "o"]) == 2
    assert "unknown dataset 'svhn'" in capsys.readouterr().err


def test_train_defaults_are_those_of_train_config():
    import dataclasses

    from fedgmh.cli import build_parser
    from fedgmh.config import TrainConfig

    args = vars(build_parser().parse_args(["train", "--dataset", "digits", "--root", "r", "--partition", "p",
                                          "--algorithm", "fedavg", "--rounds", "1", "--out", "o"]))
    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig) if f.default is not dataclasses.MISSING}
    assert defaults and {k: args[k] for k in defaults} == defaults


def test_options_lists_defaults_official_values_and_help(capsys):
    assert main(["options", "gmh_o"]) == 0
    lines = capsys.readouterr().out.splitlines()
    line = {text.split(" = ")[0].strip(): text for text in lines if " = " in text}
    assert line["heads"].startswith("  heads = single (one of per_label, single)")  # gmh_o's own default
    assert "[official: noncritical]" in line["mix"] and "[official:" not in line["beta"]
    assert "share B = beta * L" in line["beta"]
    assert line["beta"].startswith("  beta = 0.5 (float, in [0, 1])")  # the range of the card's option
    assert "drop_last = false (bool) [official: true]" in line["drop_last"] and "[official: 20]" in line["eval_last"]
    assert main(["options", "fedavg"]) == 0
    out = capsys.readouterr().out
    assert "preset = paper (one of paper, official)" in out and "lr_decay = 0.99" in out
    assert main(["options", "fedfoo"]) == 2


def test_the_module_docstring_names_every_subcommand():
    import argparse

    from fedgmh import cli

    sub = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    listed = cli.__doc__.splitlines()[0].split("`fedgmh ", 1)[1].rstrip("`.").split(" | ")
    assert sorted(listed) == sorted(sub.choices)
