"""Editing the config retrains: the workflow never keeps a run of old settings for new ones.

The real workflow runs several times in one temporary folder (a 1-2 round FedProx run on the
embedded `digits` set): after each edit, on the command line or in the file, the run's record must
be of the new settings (trained again), or, when the settings are back to ones the store holds, the
stored record reused; never the old run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import snakemake, tiny_config
from conftest import load_config as load

from fedgmh.plan import Plan

REPO = Path(__file__).resolve().parents[1]
RUN = "results/edit/runs/table2/digits_c2_a0.5/fedprox/seed0"
TARGET = "results/edit/stored/table2/digits_c2_a0.5/fedprox/seed0.done"


def make(workdir: Path, config: dict, *override: str) -> tuple[dict, str]:
    path = workdir / "edit.yaml"
    path.write_text(yaml.safe_dump(config))
    result = snakemake(workdir, TARGET, "--cores", "1", "--configfile", str(path), *(["--config", *override] if override else []))
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    record = json.loads((workdir / RUN / "run.json").read_text())
    log = (workdir / "logs/edit/train/table2/digits_c2_a0.5/fedprox/seed0.log")
    return record, log.read_text() if log.exists() else ""


def settings(record: dict) -> dict:
    config = record["config"]
    return {key: config[key] for key in ("rounds", "lr", "batch_size", "local_epochs", "join_ratio")} | {
        "mu": record["algorithm_options"]["mu"]}


def test_editing_the_config_retrains_and_going_back_reuses_the_stored_record(tmp_path: Path) -> None:
    config = tiny_config("edit", ["fedprox"], rounds=1, seeds=[0])
    first, _ = make(tmp_path, config)
    assert settings(first) == {"rounds": 1, "lr": 0.05, "batch_size": 20, "local_epochs": 1, "join_ratio": 0.5, "mu": 0.0}

    # on the command line (the README's example): trained again with the new settings
    edited, log = make(tmp_path, config, "rounds=2", "lr=0.2")
    assert (settings(edited)["rounds"], settings(edited)["lr"]) == (2, 0.2) and "reused the record" not in log
    # in the file: each kind of key (a setting, an algorithm option)
    for key, value in (("batch_size", 10), ("local_epochs", 2), ("join_ratio", 1.0)):
        edited, log = make(tmp_path, {**config, key: value})
        assert settings(edited)[key] == value and "reused the record" not in log, key
    config_mu = {**config, "algorithm_options": {**config["algorithm_options"], "fedprox": {"mu": 0.01}}}
    edited, _ = make(tmp_path, config_mu)
    assert settings(edited)["mu"] == 0.01

    # back to the first settings: the stored record of exactly that run is reused, not trained
    again, log = make(tmp_path, config)
    assert "reused the record" in log
    assert {k: again[k] for k in ("best_test_acc", "best_round", "final_test_acc", "started_utc")} == \
        {k: first[k] for k in ("best_test_acc", "best_round", "final_test_acc", "started_utc")}
    # every run's record stayed in the store, none written over by another
    stored = [json.loads(p.read_text()) for p in (tmp_path / "paper_artifacts/edit/runs").rglob("run.json")]
    assert len(stored) == 6 and len({json.dumps(settings(r), sort_keys=True) for r in stored}) == 6
    # nothing changed since: nothing to do
    result = snakemake(tmp_path, TARGET, "--cores", "1", "--configfile", str(tmp_path / "edit.yaml"), "-n")
    assert "Nothing to be done" in result.stdout + result.stderr


@pytest.mark.parametrize(("layer", "edit"), [
    ("top", {"rounds": 4}), ("top", {"lr": 0.1}), ("top", {"batch_size": 7}), ("top", {"local_epochs": 3}),
    ("top", {"join_ratio": 1.0}), ("top", {"train_options": {"lr_decay": 1.0}}),
    ("top", {"algorithm_options": {"fedprox": {"mu": 0.5}}}),
    ("experiment", {"lr": 0.1}), ("experiment", {"options": {"fedprox": {"mu": 0.5}}}),
    ("setting", {"rounds": 5}), ("setting", {"options": {"lr_decay": 1.0}}),
])
def test_every_setting_that_decides_the_numbers_is_in_the_runs_spec(layer: str, edit: dict) -> None:
    """The train rule's `params.run` (Run.spec) changes with every key that decides a run's numbers,
    wherever in the config it is set, so Snakemake's params trigger retrains the run."""
    base = load("smoke.yaml")
    edited = load("smoke.yaml")
    target = {"top": edited, "experiment": edited["experiments"]["table2"],
              "setting": edited["experiments"]["table2"]["settings"][0]}[layer]
    target.update(edit)
    before = Plan(base, basedir=REPO).train_job("table2", "digits_c2_a0.5", "fedprox", 0)
    after = Plan(edited, basedir=REPO).train_job("table2", "digits_c2_a0.5", "fedprox", 0)
    assert before.spec != after.spec and before.spec.text != after.spec.text
    assert before.run_dir == after.run_dir  # the same folder: the run there is replaced, not kept


def test_where_a_run_is_filed_is_not_its_spec() -> None:
    """Renaming the experiment's title or adding an unrelated experiment does not retrain a run."""
    base = load("smoke.yaml")
    edited = load("smoke.yaml")
    edited["experiments"]["table2"]["title"] = "another title"
    edited["experiments"]["extra"] = {"algorithms": ["fedavg"], "settings": [{"dataset": "digits", "classes_per_client": 2, "alpha": 5}]}
    assert Plan(base, basedir=REPO).train_job("table2", "digits_c2_a0.5", "fedprox", 0).spec.text == \
        Plan(edited, basedir=REPO).train_job("table2", "digits_c2_a0.5", "fedprox", 0).spec.text
