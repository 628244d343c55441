"""tools/pflib_compare: the export PFLlib trains on is exactly our run's input; with a PFLlib
checkout (slow, skipped without one) PFLlib's FedRep then gives our accuracies round by round."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from fedgmh.config import EngineOptions, TrainConfig
from fedgmh.engine import select_clients
from fedgmh.train import build_federation

REPO = Path(__file__).resolve().parents[1]
TOOLS = REPO / "tools" / "pflib_compare"


def export(digits_root, partition, work, seed=3, rounds=2, join_ratio=0.5):
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    subprocess.run([sys.executable, str(TOOLS / "export_run.py"), "--dataset", "digits", "--root", str(digits_root),
                    "--partition", str(partition), "--seed", str(seed), "--rounds", str(rounds),
                    "--join-ratio", str(join_ratio), "--work", str(work)], check=True, env=env, capture_output=True)


def test_export_is_our_runs_data_model_and_client_draws(digits_root, digits_partition, tmp_path):
    export(digits_root, digits_partition, tmp_path / "work")
    config = TrainConfig(dataset="digits", root=str(digits_root), partition=str(digits_partition), algorithm="fedavg",
                         rounds=2, join_ratio=0.5, seed=3, device="cpu")
    fed, _ = build_federation(config, EngineOptions(), torch.device("cpu"))
    run = json.loads((tmp_path / "work" / "run.json").read_text())
    folder = tmp_path / "work" / "dataset" / run["pfllib_dataset"]
    for client in range(fed.num_clients):
        for split, idx in (("train", fed.train_idx[client]), ("test", fed.test_idx[client])):
            with open(folder / split / f"{client}.npz", "rb") as f:  # as PFLlib's read_data reads it
                data = np.load(f, allow_pickle=True)["data"].tolist()
            assert torch.equal(torch.Tensor(data["x"]).type(torch.float32), fed.images[idx])  # our normalised images
            assert torch.equal(torch.Tensor(data["y"]).type(torch.int64), fed.labels[idx])
    initial = torch.load(tmp_path / "work" / "initial_model.pt")
    assert list(initial) == list(fed.initial_params())
    assert all(torch.equal(initial[k], v) for k, v in fed.initial_params().items())
    rng = np.random.RandomState(3)
    assert run["selections"] == [select_clients(rng, 6, 0.5) for _ in range(3)]
    assert (run["batch_size"], run["lr"], run["local_epochs"], run["seed"]) == (100, 0.01, 2, 3)


@pytest.mark.slow
def test_pfllib_fedrep_equals_ours_round_by_round(digits_root, digits_partition, tmp_path):
    checkout, python = os.environ.get("FEDGMH_PFLLIB"), os.environ.get("FEDGMH_PFLLIB_PYTHON")
    if not checkout or not (Path(checkout) / "system" / "flcore").is_dir() or not python:
        pytest.skip("set FEDGMH_PFLLIB to a PFLlib checkout and FEDGMH_PFLLIB_PYTHON to a Python with its packages "
                    "(tools/pflib_compare/README.md)")
    from fedgmh.cli import main

    export(digits_root, digits_partition, tmp_path / "work", seed=3, rounds=2)
    assert main(["train", "--dataset", "digits", "--root", str(digits_root), "--partition", str(digits_partition),
                 "--algorithm", "fedrep", "--rounds", "2", "--join-ratio", "0.5", "--seed", "3", "--device", "cpu",
                 "--set", "preset=official", "--quiet", "--out", str(tmp_path / "ours")]) == 0
    subprocess.run([python, str(TOOLS / "run_pfllib.py"), "--pfllib", checkout, "--work", str(tmp_path / "work"),
                    "--algorithm", "fedrep", "--rounds", "2", "--out", str(tmp_path / "pfllib.csv")], check=True,
                   capture_output=True)
    with open(tmp_path / "ours" / "metrics.csv") as f:
        ours = [float(r["test_acc"]) for r in csv.DictReader(f)]
    with open(tmp_path / "pfllib.csv") as f:
        theirs = [float(r["test_acc"]) for r in csv.DictReader(f)]
    assert len(ours) == len(theirs) == 3
    assert ours[-1] > ours[0]  # it learned something, so the equality below says something
    np.testing.assert_allclose(theirs, ours, atol=1e-6)
