"""Per-setting partition shape (issue 12): the chain class assignment, `fedgmh partition --assignment`,
the plan's per-setting `clients` / `assignment`, partition and setting ids, and their labels."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from fedgmh import plan
from fedgmh.cli import main
from fedgmh.partition import PartitionError, chain_holders, exdir, load_partition
from fedgmh.plan import ConfigError, Plan, with_defaults
from fedgmh.filing import PARTITION_WILDCARD, assign_setting_ids, parse_setting_id, partition_id
from fedgmh.report.settings import setting_label
from fedgmh.report.tables import column_label

REPO = Path(__file__).resolve().parents[1]
SCHEMA = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())


def labels(per_class: int = 60, classes: int = 10) -> np.ndarray:
    return np.repeat(np.arange(classes), per_class)


# ----------------------------------------------------------------------------- the partitioner

def test_chain_holders_give_neighbours_c_minus_1_shared_classes() -> None:
    holders = chain_holders(num_clients=10, num_classes=10, c=4)
    held = [{k for k, h in enumerate(holders) if client in h} for client in range(10)]
    assert held[0] == {0, 1, 2, 3} and held[7] == {7, 8, 9, 0} and held[9] == {9, 0, 1, 2}
    assert all(len(held[i] & held[(i + 1) % 10]) == 3 for i in range(10))
    assert all(h == sorted(h) for h in holders)  # increasing client order, as level 1 of ExDir
    # 003's Fig. 6: 8 clients, 4 classes each
    held8 = [{k for k, h in enumerate(chain_holders(8, 10, 4)) if client in h} for client in range(8)]
    assert held8[2] == {2, 3, 4, 5} and all(len(held8[i] & held8[i + 1]) == 3 for i in range(7))
    with pytest.raises(PartitionError, match="assignment chain with N=3 and C=3 covers only 5 of the 10 classes"):
        exdir(np.repeat(np.arange(10), 30), num_clients=3, classes_per_client=3, alpha=1.0, assignment="chain")


def test_chain_partition_holds_the_chain_classes_in_near_equal_shares() -> None:
    y = labels()
    part = exdir(y, num_clients=10, classes_per_client=4, alpha=1e6, seed=1, assignment="chain")
    every = np.concatenate(part.train + part.test)
    assert len(every) == len(y) and len(np.unique(every)) == len(y)  # every sample exactly once
    for client in range(10):
        counts = np.bincount(y[np.concatenate([part.train[client], part.test[client]])], minlength=10)
        assert set(np.flatnonzero(counts)) == {(client + j) % 10 for j in range(4)}
        assert counts[counts > 0].min() >= 14 and counts.max() <= 16  # 60 samples over 4 holders: near-equal
    # deterministic, and different from the random assignment
    again = exdir(y, num_clients=10, classes_per_client=4, alpha=1e6, seed=1, assignment="chain")
    assert again.digest() == part.digest()
    assert exdir(y, num_clients=10, classes_per_client=4, alpha=1e6, seed=1).digest() != part.digest()


def test_random_assignment_is_the_default_and_unchanged() -> None:
    y = labels()
    default = exdir(y, num_clients=10, classes_per_client=2, alpha=0.5, seed=1)
    assert exdir(y, num_clients=10, classes_per_client=2, alpha=0.5, seed=1, assignment="random").digest() == default.digest()
    with pytest.raises(PartitionError, match="assignment 'ring' is not one of random, chain"):
        exdir(y, num_clients=10, classes_per_client=2, alpha=0.5, assignment="ring")


def test_cli_assignment_chain_and_the_default_file(digits_root: Path, tmp_path: Path, capsys) -> None:
    common = ["partition", "--dataset", "digits", "--root", str(digits_root), "--seed", "1"]
    assert main([*common, "--clients", "10", "--classes-per-client", "2", "--alpha", "0.5", "--out", str(tmp_path / "a.npz")]) == 0
    assert main([*common, "--clients", "10", "--classes-per-client", "2", "--alpha", "0.5", "--assignment", "random",
                 "--out", str(tmp_path / "b.npz")]) == 0
    # the default writes exactly the file it wrote before --assignment existed: no assignment in the meta
    assert (tmp_path / "a.npz").read_bytes() == (tmp_path / "b.npz").read_bytes()
    assert "assignment" not in load_partition(tmp_path / "a.npz")[1]
    assert main([*common, "--clients", "8", "--classes-per-client", "4", "--alpha", "1e6", "--assignment", "chain",
                 "--out", str(tmp_path / "c.npz")]) == 0
    part, meta = load_partition(tmp_path / "c.npz")
    assert meta["assignment"] == "chain" and part.num_clients == 8
    capsys.readouterr()
    assert main([*common, "--clients", "4", "--classes-per-client", "3", "--alpha", "1", "--assignment", "chain",
                 "--out", str(tmp_path / "d.npz")]) == 2
    assert "--assignment chain with --clients 4 and --classes-per-client 3 covers only 6 of the 10 classes" in capsys.readouterr().err
    assert not (tmp_path / "d.npz").exists()


# ----------------------------------------------------------------------------- ids and labels

def test_partition_and_setting_ids_gain_suffixes_only_for_new_shapes() -> None:
    assert partition_id("mnist", 2, 0.5) == "mnist_c2_a0.5" == plan.partition_id("mnist", 2, 0.5)
    assert partition_id("mnist", 2, 0.5, clients=100, default_clients=100) == "mnist_c2_a0.5"
    assert partition_id("cifar100", 5, 1e6, clients=20, default_clients=100) == "cifar100_c5_a1000000_n20"
    assert partition_id("fashion_mnist", 4, 1e6, clients=8, default_clients=100, assignment="chain") == "fashion_mnist_c4_a1000000_n8_chain"
    base = {"dataset": "fashion_mnist", "classes_per_client": 4, "alpha": 1e6, "algorithm": "fedavg", "rounds": 100}
    records = [{**base, "clients": 100}, {**base, "clients": 8, "assignment": "chain"}, {**base, "clients": 8, "rounds": 50}]
    # clients and assignment are part of a setting, not swept dimensions: rounds do not vary within one
    assert assign_setting_ids(records, default_clients=100) == [
        "fashion_mnist_c4_a1000000", "fashion_mnist_c4_a1000000_n8_chain", "fashion_mnist_c4_a1000000_n8"]
    assert assign_setting_ids(records[:1]) == ["fashion_mnist_c4_a1000000"]


def test_setting_ids_read_back_into_the_parts_they_were_made_of() -> None:
    base = {"dataset": "fashion_mnist", "classes_per_client": 4, "alpha": 0.05, "algorithm": "fedgmh"}
    records = [{**base, "options": {"eta_h": 0.1}}, {**base, "options": {"eta_h": 0.5}}, {**base, "clients": 8, "assignment": "chain"},
               {**base, "dataset": "cifar100", "alpha": 1e6, "clients": 8, "local_epochs": 4, "variant": "hn_lr=2"},
               {**base, "dataset": "cifar100", "alpha": 1e6, "clients": 8, "local_epochs": 2, "variant": "hn_lr=2"}]
    ids = assign_setting_ids(records, default_clients=100)
    parts = [parse_setting_id(setting) for setting in ids]
    assert [(p.dataset, p.classes_per_client, p.alpha, p.clients, p.assignment) for p in parts] == [
        ("fashion_mnist", 4, 0.05, None, "random")] * 2 + [("fashion_mnist", 4, 0.05, 8, "chain")] + [("cifar100", 4, 1e6, 8, "random")] * 2
    assert [(p.partition, p.sweeps, p.variant) for p in parts[1:4]] == [
        ("fashion_mnist_c4_a0.05", "_edefault_eta_h0.5", ""), ("fashion_mnist_c4_a0.05_n8_chain", "_edefault_eta_hdefault", ""),
        ("cifar100_c4_a1000000_n8", "_e4_eta_hdefault", "hn_lr=2")]
    assert [p.without_variant + (f"@{p.variant}" if p.variant else "") for p in parts] == ids
    assert [re.fullmatch(PARTITION_WILDCARD, p.partition) is not None for p in parts] == [True] * len(ids)
    assert re.fullmatch(PARTITION_WILDCARD, ids[0]) is None  # a setting's swept part is not a partition's
    for text in ("fashion_mnist", "mnist_c2", "mnist_c2_a0.5@", "MNIST_c2_a0.5"):
        with pytest.raises(ValueError, match="is not a setting id"):
            parse_setting_id(text)


def test_labels_of_chain_and_other_clients() -> None:
    chain = {"dataset": "fashion_mnist", "classes_per_client": 4, "alpha": 1e6, "clients": 8, "assignment": "chain"}
    assert setting_label(chain, "fashion_mnist_c4_a1000000_n8_chain") == ("Fashion-MNIST", "chain(4, 1000000), 8 clients")
    assert setting_label(chain, "fashion_mnist_c4_a1000000_chain") == ("Fashion-MNIST", "chain(4, 1000000)")  # config's clients
    plain = {"dataset": "cifar100", "classes_per_client": 5, "alpha": 0.5, "clients": 20}
    assert setting_label(plain, "cifar100_c5_a0.5_n20_e4@official") == ("CIFAR-100", "ExDir(5, 0.5), 20 clients")
    assert setting_label({**plain, "clients": 100}, "cifar100_c5_a0.5_beta0.1") == ("CIFAR-100", "ExDir(5, 0.5)")
    cell = {**chain, "column": "fashion_mnist_c4_a1000000_n8_chain", "local_epochs": 5}
    assert column_label(cell, ["local_epochs"]) == ("Fashion-MNIST", "chain(4, 1000000), 8 clients E=5")


# ----------------------------------------------------------------------------- the plan

def load(name: str) -> dict:
    return with_defaults(yaml.safe_load((REPO / "config" / name).read_text()), SCHEMA)


def shape_config() -> dict:
    config = load("smoke.yaml")
    config["experiments"] = {"shape": {"algorithms": ["fedavg", "fedper"], "settings": [
        {"dataset": "digits", "classes_per_client": 2, "alpha": 0.5},
        {"dataset": "digits", "classes_per_client": 4, "alpha": 1e6, "clients": 8, "assignment": "chain"},
        {"dataset": "digits", "classes_per_client": 2, "alpha": 0.5, "clients": 20},
    ]}}
    config["figures"] = {"chain": {"experiment": "shape", "setting": "digits_c4_a1000000_n8_chain"}}
    config["rounds_to_target"] = None
    config["uploads_to_target"] = {"experiment": "shape", "setting": "digits_c2_a0.5_n20", "targets": [40, 50, 60],
                                   "paper": {"fedavg": [80, 220, 660]}}
    config["layer_weights"] = {"experiment": "shape", "setting": "digits_c4_a1000000_n8_chain", "algorithms": ["fedper"]}
    assert plan.schema_problems(config, SCHEMA) == []
    return config


def test_plan_of_settings_with_their_own_clients_and_assignment() -> None:
    shape = Plan(shape_config(), basedir=REPO)
    assert list(shape.partitions) == ["digits_c2_a0.5", "digits_c4_a1000000_n8_chain", "digits_c2_a0.5_n20"]
    assert sorted({run.setting for run in shape.runs}) == ["digits_c2_a0.5", "digits_c2_a0.5_n20", "digits_c4_a1000000_n8_chain"]
    assert shape.partition_arguments("digits_c2_a0.5") == ["--clients", "10", "--classes-per-client", "2", "--alpha", "0.5"]
    assert shape.partition_arguments("digits_c4_a1000000_n8_chain") == [
        "--clients", "8", "--classes-per-client", "4", "--alpha", "1000000", "--assignment", "chain"]
    assert shape.partition_arguments("digits_c2_a0.5_n20")[:2] == ["--clients", "20"]
    assert shape.own_clients and not Plan(load("table2_mnist.yaml"), basedir=REPO).own_clients
    run = shape.train_job("shape", "digits_c4_a1000000_n8_chain", "fedper", 0)
    assert (run.clients, run.assignment, run.partition) == (8, "chain", "digits_c4_a1000000_n8_chain")
    words = shape.train_arguments(run, f"{shape.results}/partitions/{run.partition}.npz", 1)
    assert words[words.index("--setting") + 1] == "digits_c4_a1000000_n8_chain"
    with pytest.raises(ConfigError, match="partition 'digits_c3_a1' is not one of config 'smoke'"):
        shape.partition_job("digits_c3_a1")
    assert shape.uploads_to_target["setting"] == "digits_c2_a0.5_n20" and shape.layer_weights["algorithms"] == ["fedper"]


def test_the_shipped_configs_keep_their_partitions_and_settings() -> None:
    """The paper's settings keep their partition ids (committed records depend on them); the other
    documents' experiments (chain, cepfl_protocol) add their own partitions beside them."""
    smoke = Plan(load("smoke.yaml"), basedir=REPO)
    assert list(smoke.partitions) == ["digits_c2_a0.5", "digits_c4_a1000000_chain", "digits_c5_a1000000_n20"]
    assert all(run.clients == 10 and run.assignment == "random" for run in smoke.runs if run.experiment not in ("chain", "cepfl_protocol"))
    mini = Plan(load("mini.yaml"), basedir=REPO)
    assert sorted(mini.partitions) == ["cifar100_c50_a1000000_n20", "cifar100_c5_a0.5", "cifar100_c5_a5",
                                       "fashion_mnist_c4_a1000000_n10_chain", "mnist_c2_a0.5", "mnist_c2_a5"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda s: s.update(classes_per_client=11, assignment="chain"),
         "config: experiments.shape.settings[1].classes_per_client (11): must be between 1 and K=10, the number of classes of digits"),
        (lambda s: s.update(clients=4, classes_per_client=3),
         "config: experiments.shape.settings[1].assignment (chain) with experiments.shape.settings[1].clients (4) and "
         "experiments.shape.settings[1].classes_per_client (3) covers only 6 of the 10 classes of digits"),
        (lambda s: s.update(clients=4, classes_per_client=2, assignment="random"),
         "config: experiments.shape.settings[1].clients (4) and experiments.shape.settings[1].classes_per_client (2) give "
         "N x C = 8 < the 10 classes of digits"),
    ],
    ids=["chain-c-above-k", "chain-coverage", "setting-clients"],
)
def test_bad_shapes_name_the_key(change, message: str) -> None:
    config = shape_config()
    change(config["experiments"]["shape"]["settings"][1])
    with pytest.raises(ConfigError) as err:
        Plan(config, basedir=REPO)
    assert message in str(err.value)


@pytest.mark.parametrize(
    ("key", "change", "message"),
    [
        ("uploads_to_target", {"experiment": "table9"}, "config: uploads_to_target.experiment 'table9' is not an experiment"),
        ("uploads_to_target", {"setting": "digits_c2_a0.5_n8"}, "config: uploads_to_target.setting 'digits_c2_a0.5_n8' is not a setting of shape"),
        ("uploads_to_target", {"paper": {"fedavg": [1]}}, "config: uploads_to_target.paper.fedavg has 1 values for 3 targets"),
        ("layer_weights", {"algorithms": ["fedrep"]}, "config: layer_weights.algorithms ['fedrep'] are not run in shape"),
        ("layer_weights", {"setting": "digits_c4_a1000000_n8"}, "config: layer_weights.setting 'digits_c4_a1000000_n8' is not a setting"),
    ],
)
def test_report_keys_are_checked(key: str, change: dict, message: str) -> None:
    config = shape_config()
    config[key].update(change)
    with pytest.raises(ConfigError) as err:
        Plan(config, basedir=REPO)
    assert message in str(err.value)


def test_schema_takes_the_new_keys() -> None:
    config = shape_config()
    config["experiments"]["shape"]["settings"][1]["assignment"] = "ring"
    config["experiments"]["shape"]["settings"][2]["clients"] = 1
    config["uploads_to_target"]["metric"] = "best"
    problems = plan.schema_problems(config, SCHEMA)
    assert any("settings[1].assignment: 'ring' is not one of ['random', 'chain']" in p for p in problems)
    assert any("settings[2].clients: 1 is less than the minimum of 2" in p for p in problems)
    assert any("uploads_to_target.metric: 'best' is not one of" in p for p in problems)
    assert json.dumps(SCHEMA["properties"]["other_references"]["default"]) == '["reference/cepfl_paper_table1.csv"]'
