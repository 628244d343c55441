"""The cards are the only source of an algorithm's facts: the workflow's algorithm names, display names
and row order, options, presets; its class holds its behaviour and cost model. A new algorithm is one
card and one class, found by the same discovery as the real ones."""

from __future__ import annotations

import functools
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import load_config, make_federation

import fedgmh.algorithms
import fedgmh.cards
from fedgmh import cards, costs, plan
from fedgmh.algorithms import Algorithm, algorithm_classes, get_algorithm
from fedgmh.cli import main
from fedgmh.engine import run_rounds
from fedgmh.errors import UserError
from fedgmh.report import labels

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src" / "fedgmh"
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"
PAPER_ORDER = ["fedavg", "fedprox", "ditto", "fedamp", "fedcp", "fedfomo", "fedgh", "fedper", "fedrep", "fedrod",
               "lgfedavg", "gmh_o", "gmh_a", "gmh_oa", "fedgmh"]  # Table 2, then Table 5's ablations before FedGMH


def config_with(algorithms: list[str]) -> dict:
    """The smoke config (defaults filled in) with Table 2 run by `algorithms`."""
    config = load_config("smoke.yaml")
    config["experiments"]["table2"]["algorithms"] = algorithms
    return config


def test_the_workflow_takes_algorithm_names_from_the_cards():
    schema = yaml.safe_load(SCHEMA.read_text())
    assert "enum" not in schema["$defs"]["algorithm"]  # the cards are the one list
    assert plan.schema_problems(config_with(cards.algorithm_names()), schema) == []
    problems = plan.schema_problems(config_with(["fedavg", "fedavgg"]), schema)
    assert len(problems) == 1 and problems[0].startswith("  experiments.table2.algorithms[1]: 'fedavgg' is not one of ['cepfl', ")


def test_names_and_row_order_come_from_the_cards():
    # the paper's methods in its row order, then the rest (our controls) by name
    found = cards.all_cards()
    extra = sorted(name for name, card in found.items() if card.paper_row is None)
    assert cards.algorithm_order() == PAPER_ORDER + extra
    assert cards.algorithm_name("lgfedavg") == "LG-FedAvg" and cards.algorithm_name("not_registered") == "not_registered"
    rows = [card.paper_row for card in found.values() if card.paper_row is not None]
    assert len(rows) == len(PAPER_ORDER) and len(set(rows)) == len(rows)


@pytest.mark.parametrize("module", [costs, labels])
def test_no_algorithm_is_named_outside_its_card(module):
    text = Path(module.__file__).read_text()
    assert [name for name in cards.algorithm_names() if f'"{name}"' in text or f"'{name}'" in text] == []


def test_every_card_names_a_class_of_the_module_of_its_own_file_name():
    families = cards.family_names()
    assert families == sorted(p.stem for p in (SRC / "cards").glob("*.py") if p.stem != "__init__")
    for family in families:
        assert (SRC / "algorithms" / f"{family}.py").is_file(), family
    for name, cls in algorithm_classes().items():
        family = cards.card(name).algorithm.partition(":")[0].rpartition(".")[2]
        assert family in families and cls.__module__ == f"fedgmh.algorithms.{family}" and cls.name == name
        assert not {"display_name", "paper_row", "Options", "defaults", "official"} & set(vars(cls)), name  # facts live on the card


def test_every_algorithm_has_its_own_cost_model():
    assert all(cls.exchange.__func__ is not Algorithm.exchange.__func__ for cls in algorithm_classes().values())


def test_costs_do_not_import_the_training_module():
    code = "import sys, fedgmh.costs; print('fedgmh.train' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "False"


def test_an_unknown_algorithm_is_one_clear_error():
    with pytest.raises(UserError, match="unknown algorithm 'fedavgg' \\(did you mean 'fedavg'\\?\\); available: cepfl, "):
        get_algorithm("fedavgg")


# ----------------------------------------------------------- a new algorithm: one card and one class

TOY_CARD = '''
from dataclasses import dataclass

from fedgmh.cards import PFLLIB_LOADER, Card
from fedgmh.config import RangedOptions, option


@dataclass(frozen=True)
class ToyOptions(RangedOptions):
    share: float = option(1.0, "share of the head uploaded", low=0, high=1, low_open=True)


CARDS = (Card("toy", "Toy-Heads", "fedgmh.algorithms.toy:Toy", paper_row=0, options=ToyOptions,
              presets={"official": {**PFLLIB_LOADER, "share": 0.5}}),)
'''

TOY_CLASS = '''
from fedgmh.algorithms.base import Algorithm, Exchange
from fedgmh.engine import Phase
from fedgmh.model import is_head


class Toy(Algorithm):
    """Clients keep their models, get them sent down, upload the head."""

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
'''


def add_family(monkeypatch, tmp_path: Path, family: str, card_text: str, class_text: str = "") -> None:
    """Put `cards/<family>.py` (and `algorithms/<family>.py`) in folders the two packages search, as
    a new file of the source tree would be."""
    for package, text in ((fedgmh.cards, card_text), (fedgmh.algorithms, class_text)):
        folder = tmp_path / package.__name__.rpartition(".")[2]
        folder.mkdir(exist_ok=True)
        (folder / f"{family}.py").write_text(textwrap.dedent(text))
        monkeypatch.setattr(package, "__path__", [*package.__path__, str(folder)])
        monkeypatch.delitem(sys.modules, f"{package.__name__}.{family}", raising=False)


@pytest.fixture
def toy(monkeypatch, tmp_path):
    add_family(monkeypatch, tmp_path, "toy", TOY_CARD, TOY_CLASS)
    yield
    for module in ("fedgmh.cards.toy", "fedgmh.algorithms.toy"):
        sys.modules.pop(module, None)


def _results(algorithms):
    return pd.DataFrame([{"experiment": "t", "setting": "digits_c2_a0.5", "dataset": "digits", "classes_per_client": 2,
                          "alpha": 0.5, "clients": 4, "algorithm": a, "variant": "", "seed": 0, "rounds": 2,
                          "local_epochs": 1, "join_ratio": 0.5, "batch_size": 4, "lr": 0.1, "options": "{}",
                          "best_test_acc": 0.5, "best_round": 1, "final_test_acc": 0.5, "rounds_evaluated": 3,
                          "wall_time_s": 1.0, "run_dir": ""} for a in algorithms])


def test_a_toy_algorithm_of_one_card_and_one_class_shows_up_everywhere(toy, capsys):
    from fedgmh.report import summarize

    # options: the card's preset and ranges
    options, engine = cards.resolve_options("toy", {"preset": "official"})
    assert (options.share, engine.drop_last) == (0.5, True)
    with pytest.raises(UserError, match=r"share must be in \(0, 1\], got 0.0"):
        cards.resolve_options("toy", {"share": "0"})
    # training and the channel's bytes = the analytic traffic of its class
    fed = make_federation([[0, 1] * 4, [2, 3] * 4, [0, 2] * 4, [1, 3] * 4])
    rows = run_rounds(fed, get_algorithm("toy")(fed, options), 1, 0.5)
    sizes = costs.Sizes.of(fed.model)
    assert (rows[0]["bytes_up"], rows[0]["bytes_down"]) == (2 * sizes.head, 2 * sizes.model)  # 2 of 4 clients trained
    assert costs.round_traffic("toy", options, sizes, [2] * 4, [0, 1]) == (rows[0]["bytes_up"], rows[0]["bytes_down"])
    # the cost table
    table = costs.algorithm_costs(["digits"])
    toy_rows = table[(table["algorithm"] == "toy") & (table["preset"] == "paper")].set_index("quantity")["analytic"]
    digits = costs.Sizes.for_dataset("digits")
    assert toy_rows.to_dict() == {"up_per_participant": digits.head / costs.KB, "down_per_participant": digits.model / costs.KB,
                                  "down_per_other_client": 0.0}
    # the names and the row order the tables use
    assert cards.algorithm_name("toy") == "Toy-Heads" and cards.algorithm_order()[0] == "toy"
    cells, _ = summarize(_results(["fedgmh", "toy", "fedavg"]), "t")
    assert list(cells["row_name"]) == ["Toy-Heads", "FedAvg", "FedGMH"]
    # the CLI and the workflow's plan
    assert main(["options", "toy"]) == 0
    assert "share = 1.0 (float, in (0, 1]) [official: 0.5]" in capsys.readouterr().out
    config, schema = config_with(["toy", "fedavg"]), yaml.safe_load(SCHEMA.read_text())
    assert plan.schema_problems(config, schema) == []
    workflow = plan.Plan(config, basedir=REPO)
    toy_runs = [run for run in workflow.runs if run.algorithm == "toy"]
    assert toy_runs and all("--algorithm toy" in " ".join(workflow.train_arguments(run, "p.npz", 1)) for run in toy_runs)


def test_without_its_files_the_toy_is_unknown():
    config, schema = config_with(["toy", "fedavg"]), yaml.safe_load(SCHEMA.read_text())
    assert plan.schema_problems(config, schema)[0].startswith("  experiments.table2.algorithms[0]: 'toy' is not one of ['cepfl', ")


def test_a_card_must_name_a_class_of_its_own_family(monkeypatch, tmp_path):
    add_family(monkeypatch, tmp_path, "stray", '''
        from fedgmh.cards import Card

        CARDS = (Card("stray", "Stray", "fedgmh.algorithms.sharing:FedProx"),)
        ''')
    with pytest.raises(ValueError, match="card 'stray' in fedgmh.cards.stray names 'fedgmh.algorithms.sharing:FedProx': "
                                         "its class belongs in fedgmh.algorithms.stray"):
        cards.all_cards()


def test_two_cards_cannot_share_a_class(monkeypatch, tmp_path):
    add_family(monkeypatch, tmp_path, "toy", TOY_CARD.replace('CARDS = (', 'CARDS = (Card("toy2", "Toy 2", "fedgmh.algorithms.toy:Toy"), '),
               TOY_CLASS)
    try:
        assert get_algorithm("toy").name == "toy"
        with pytest.raises(ValueError, match="named by the cards of both 'toy' and 'toy2'"):
            get_algorithm("toy2")
    finally:
        for module in ("fedgmh.cards.toy", "fedgmh.algorithms.toy"):
            sys.modules.pop(module, None)


def test_a_class_lacking_a_required_hook_is_refused(monkeypatch, tmp_path):
    lacking = TOY_CLASS.split("    def finish_training")[0]
    add_family(monkeypatch, tmp_path, "toy", TOY_CARD, lacking)
    try:
        with pytest.raises(ValueError, match=r"class fedgmh.algorithms.toy:Toy of algorithm 'toy' lacks the hooks every "
                                             r"algorithm defines: finish_training$"):
            get_algorithm("toy")
        fed = make_federation([[0, 1] * 4, [2, 3] * 4])
        with pytest.raises(TypeError, match="abstract method '?finish_training"):
            sys.modules["fedgmh.algorithms.toy"].Toy(fed, cards.resolve_options("toy", {})[0])
    finally:
        for module in ("fedgmh.cards.toy", "fedgmh.algorithms.toy"):
            sys.modules.pop(module, None)


def test_the_hooks_every_algorithm_must_define_are_the_abstract_ones():
    assert Algorithm.__abstractmethods__ == {"exchange", "eval_params", "start_training", "finish_training"}


# ------------------------------------------- a new algorithm: the places docs/cli.md lists for it

CONFIGS = ("config.yaml", "smoke.yaml", "mini.yaml")
#: algorithms with a card that no config runs, and why
NOT_PLANNED = {"fedavg_lp": "the controls experiment runs it as fedavg with eval_prior=mask"}
#: the tests that take every algorithm from the cards (docs/cli.md: they need no edit)
EVERY_ALGORITHM = ("test_cli.py", "test_vectorised.py", "test_resume.py", "test_costs.py", "test_memory.py",
                   "test_batched_evaluation.py")


def adding_section() -> str:
    """docs/cli.md's section "Adding an algorithm"."""
    text = (REPO / "docs" / "cli.md").read_text()
    return text.split("### Adding an algorithm\n", 1)[1].split("\n### ", 1)[0]


@functools.cache
def baselines_table() -> set[str]:
    """The algorithms of docs/baselines.md's table of every algorithm."""
    lines = (REPO / "docs" / "baselines.md").read_text().splitlines()
    start = lines.index("| algorithm | shared | local | evaluated model |") + 2
    names = set()
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        names.update(re.findall(r"`(\w+)`", line.split("|")[1]))
    return names


@functools.cache
def planned(config: str) -> set[str]:
    experiments = yaml.safe_load((REPO / "config" / config).read_text())["experiments"]
    return {name for experiment in experiments.values() for name in experiment["algorithms"]}


@functools.cache
def other_test_files() -> dict[str, str]:
    """The test files other than this one, by name."""
    return {path.name: path.read_text() for path in sorted((REPO / "tests").glob("test_*.py")) if path.name != Path(__file__).name}


def files_naming(name: str) -> list[str]:
    """The test files other than this one that name algorithm NAME in a string."""
    return [file for file, text in other_test_files().items() if f'"{name}"' in text or f"'{name}'" in text]


def missing_places(name: str) -> list[str]:
    """The places checked in docs/cli.md's "Adding an algorithm" that lack algorithm NAME."""
    family = cards.card(name).algorithm.partition(":")[0].rpartition(".")[2]
    missing = [] if get_algorithm(name).__module__ == f"fedgmh.algorithms.{family}" else ["src/fedgmh/algorithms/<family>.py"]
    missing += [] if files_naming(name) else ["tests/test_<family>.py"]
    missing += [] if name in baselines_table() else ["docs/baselines.md"]
    missing += [f"config/{config}" for config in CONFIGS if name not in planned(config) and name not in NOT_PLANNED]
    return missing


def test_every_algorithm_is_in_every_place_docs_cli_md_checks():
    assert {name: missing for name in cards.algorithm_names() if (missing := missing_places(name))} == {}
    assert baselines_table() == set(cards.algorithm_names())  # no row of an algorithm that is gone
    for name in NOT_PLANNED:
        assert name in cards.algorithm_names() and not any(name in planned(config) for config in CONFIGS), name


def test_a_new_algorithm_of_one_card_and_one_class_is_missing_from_the_other_places(monkeypatch, tmp_path):
    add_family(monkeypatch, tmp_path, "newcomer", TOY_CARD.replace("toy", "newcomer"), TOY_CLASS)
    try:
        assert missing_places("newcomer") == ["tests/test_<family>.py", "docs/baselines.md", *(f"config/{c}" for c in CONFIGS)]
    finally:
        for module in ("fedgmh.cards.newcomer", "fedgmh.algorithms.newcomer"):
            sys.modules.pop(module, None)


def test_docs_cli_md_names_each_place_and_only_files_that_exist():
    section = adding_section()
    for place in ("src/fedgmh/cards/<family>.py", "src/fedgmh/algorithms/<family>.py", "tests/test_<family>.py",
                  "docs/baselines.md", *(f"config/{config}" for config in CONFIGS)):
        assert f"`{place}`" in section, place
    paths = [path for path in re.findall(r"`([\w./<>-]+\.(?:py|md|yaml)|[\w/]+/)`", section) if "<" not in path]
    assert paths and [path for path in paths if not (REPO / path).exists()] == []
    for file in EVERY_ALGORITHM:  # the tests said to cover a new algorithm by themselves
        assert "algorithm_names()" in (REPO / "tests" / file).read_text(), file
