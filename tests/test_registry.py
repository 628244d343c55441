"""The registry is the only source of an algorithm's facts: the workflow's algorithm names, display
names and row order, costs; a new algorithm is one file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import make_federation
from test_plan import load as load_config

import fedgmh.algorithms.options as options_module
from fedgmh import costs, plan
from fedgmh.algorithms import OPTION_SETS, REGISTRY, Algorithm, Exchange, register, resolve_options
from fedgmh.algorithms.options import GMHOptions, OptionSet
from fedgmh.engine import Phase, run_rounds
from fedgmh.model import is_head
from fedgmh.report import names

REPO = Path(__file__).resolve().parents[1]
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"
PAPER_ORDER = ["fedavg", "fedprox", "ditto", "fedamp", "fedcp", "fedfomo", "fedgh", "fedper", "fedrep", "fedrod",
               "lgfedavg", "gmh_o", "gmh_a", "gmh_oa", "fedgmh"]  # Table 2, then Table 5's ablations before FedGMH


def config_with(algorithms: list[str]) -> dict:
    """The smoke config (defaults filled in) with Table 2 run by `algorithms`."""
    config = load_config("smoke.yaml")
    config["experiments"]["table2"]["algorithms"] = algorithms
    return config


def test_the_workflow_takes_algorithm_names_from_the_registry():
    schema = yaml.safe_load(SCHEMA.read_text())
    assert "enum" not in schema["$defs"]["algorithm"]  # the registry is the one list
    assert plan.schema_problems(config_with(list(REGISTRY)), schema) == []
    problems = plan.schema_problems(config_with(["fedavg", "fedavgg"]), schema)
    assert len(problems) == 1 and problems[0].startswith("  experiments.table2.algorithms[1]: 'fedavgg' is not one of ['cepfl', ")


def test_names_and_row_order_come_from_the_classes():
    # the paper's methods in its row order, then the rest (our controls) by name
    extra = sorted(name for name, cls in REGISTRY.items() if cls.paper_row is None)
    assert list(names.ALGORITHM_ORDER) == PAPER_ORDER + extra
    assert dict(names.ALGORITHM_NAMES) == {name: cls.display_name for name, cls in REGISTRY.items()}
    assert names.algorithm_name("lgfedavg") == "LG-FedAvg" and names.algorithm_name("not_registered") == "not_registered"
    rows = [cls.paper_row for cls in REGISTRY.values() if cls.paper_row is not None]
    assert len(rows) == len(PAPER_ORDER) and len(set(rows)) == len(rows)


@pytest.mark.parametrize("module", [costs, names])
def test_no_algorithm_is_named_outside_its_class(module):
    text = Path(module.__file__).read_text()
    assert [name for name in REGISTRY if f'"{name}"' in text or f"'{name}'" in text] == []


def test_every_algorithm_has_its_own_cost_model():
    assert all(cls.exchange.__func__ is not Algorithm.exchange.__func__ for cls in REGISTRY.values())


def test_costs_do_not_import_the_training_module():
    code = "import sys, fedgmh.costs; print('fedgmh.train' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "False"


class Toy(Algorithm):
    """A toy algorithm, defined only here: clients keep their models, get them sent down, upload the head."""

    name = "toy"
    display_name = "Toy-Heads"
    paper_row = 0  # before FedAvg

    def __init__(self, fed, options) -> None:
        super().__init__(fed, options)
        self.models = [fed.initial_params()] * fed.num_clients

    @classmethod
    def exchange(cls, options, sizes, labels, models=None) -> Exchange:
        return Exchange(up=sizes.head, down=sizes.model, down_other=0)

    def eval_params(self, client):
        return self.models[client]

    def start_training(self, rnd, client):
        return [Phase(self.fed.channel.download(self.models[client]))]

    def finish_training(self, rnd, client, phases, results):
        self.fed.channel.upload({k: v for k, v in results[-1].params.items() if is_head(k)})
        self.models[client] = results[-1].params
        return results[-1]


@pytest.fixture
def toy():
    register(Toy)
    yield Toy
    del REGISTRY[Toy.name], OPTION_SETS[Toy.name]


def test_every_class_has_the_option_set_of_its_name():
    assert set(OPTION_SETS) == set(REGISTRY)
    for name, cls in REGISTRY.items():
        declared = OPTION_SETS[name]
        assert (cls.Options, cls.defaults, cls.official) == (declared.Options, dict(declared.defaults), dict(declared.official)), name
    assert REGISTRY["gmh_o"].defaults == {"heads": "single"} and REGISTRY["fedgmh"].official["eval_last"] == 20


def test_options_are_declared_in_one_place():
    class Twice(Algorithm):
        name = "twice"
        official = {"drop_last": True}

    OPTION_SETS["twice"] = OptionSet(GMHOptions)
    try:
        with pytest.raises(ValueError, match="declares official on its class and in OPTION_SETS"):
            register(Twice)
        assert "twice" not in REGISTRY
    finally:
        del OPTION_SETS["twice"]


def test_options_resolve_without_torch():
    """The workflow checks every run's options while it builds its DAG: that must not import torch
    (seconds per snakemake call) nor the algorithm classes."""
    code = ("import sys; from fedgmh.algorithms import OPTION_SETS, option_rows, resolve_options\n"
            "for name in OPTION_SETS:\n"
            "    resolve_options(name, {'preset': 'official'}); option_rows(name)\n"
            "print(len(OPTION_SETS), sorted(m for m in sys.modules if m == 'torch' or m.startswith('fedgmh.algorithms.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.split() == [str(len(REGISTRY)), "['fedgmh.algorithms.options']"]


def _results(algorithms):
    return pd.DataFrame([{"experiment": "t", "setting": "digits_c2_a0.5", "dataset": "digits", "classes_per_client": 2,
                          "alpha": 0.5, "clients": 4, "algorithm": a, "variant": "", "seed": 0, "rounds": 2,
                          "local_epochs": 1, "join_ratio": 0.5, "batch_size": 4, "lr": 0.1, "options": "{}",
                          "best_test_acc": 0.5, "best_round": 1, "final_test_acc": 0.5, "rounds_evaluated": 3,
                          "wall_time_s": 1.0, "run_dir": ""} for a in algorithms])


def test_a_toy_algorithm_defined_in_one_place_shows_up_everywhere(toy):
    from fedgmh.report import summarize

    # options, training and the channel's bytes = the analytic traffic of its class
    options, _ = resolve_options("toy", {"preset": "official"})
    fed = make_federation([[0, 1] * 4, [2, 3] * 4, [0, 2] * 4, [1, 3] * 4])
    rows = run_rounds(fed, toy(fed, options), 1, 0.5, seed=0)
    sizes = costs.Sizes.of(fed.model)
    assert (rows[0]["bytes_up"], rows[0]["bytes_down"]) == (2 * sizes.head, 2 * sizes.model)  # 2 of 4 clients trained
    assert costs.round_traffic("toy", options, sizes, [2] * 4, [0, 1]) == (rows[0]["bytes_up"], rows[0]["bytes_down"])
    # the cost table
    table = costs.algorithm_costs(["digits"])
    toy_rows = table[table["algorithm"] == "toy"].set_index("quantity")["analytic"]
    digits = costs.Sizes.for_dataset("digits")
    assert toy_rows.to_dict() == {"up_per_participant": digits.head / costs.KB, "down_per_participant": digits.model / costs.KB,
                                  "down_per_other_client": 0.0}
    # the names and the row order the tables use
    assert names.algorithm_name("toy") == "Toy-Heads" and names.ALGORITHM_ORDER[0] == "toy"
    cells, _ = summarize(_results(["fedgmh", "toy", "fedavg"]), "t")
    assert list(cells["row_name"]) == ["Toy-Heads", "FedAvg", "FedGMH"]


def test_the_workflow_finds_an_algorithm_that_declares_its_options_on_its_class(monkeypatch):
    """Planning reads OPTION_SETS without torch; a name missing there makes it import the algorithm
    modules (here: a stand-in for a module of the package that holds Toy), and then it plans."""
    imported = []

    def load_all():
        imported.append(True)
        if "toy" not in REGISTRY:
            register(Toy)

    monkeypatch.setattr(options_module, "load_registry", load_all)
    config, schema = config_with(["toy", "fedavg"]), yaml.safe_load(SCHEMA.read_text())
    try:
        assert "toy" not in OPTION_SETS
        assert options_module.option_set("toy") is OPTION_SETS["toy"] and len(imported) == 1  # e.g. `fedgmh options toy`
        del REGISTRY["toy"], OPTION_SETS["toy"]
        assert plan.schema_problems(config, schema) == [] and len(imported) == 2  # the workflow's config check
        workflow = plan.Plan(config, basedir=REPO)
        toy_runs = [run for run in workflow.runs if run.algorithm == "toy"]
        assert toy_runs and all("--algorithm toy" in " ".join(workflow.train_arguments(run, "p.npz", 1)) for run in toy_runs)
    finally:
        REGISTRY.pop("toy", None), OPTION_SETS.pop("toy", None)
    # without it, the check names the key and the known algorithms
    monkeypatch.undo()
    problems = plan.schema_problems(config, schema)
    assert problems[0].startswith("  experiments.table2.algorithms[0]: 'toy' is not one of ['cepfl', ")
