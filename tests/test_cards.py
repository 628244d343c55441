"""The algorithm cards and what reads them stay light: the cards import neither torch, numpy nor
pandas; the CLI's parser and the workflow's plan import neither torch nor pandas; the report
commands the workflow runs import no torch. Each is checked in a fresh interpreter whose imports of
those packages fail (a meta-path blocker), so a new import anywhere below them fails the test."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fedgmh import cards
from fedgmh.errors import UserError

REPO = Path(__file__).resolve().parents[1]

BLOCKER = '''
import sys

class Blocker:
    """Fails every import of the packages named in argv[1]."""

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in sys.argv[1].split(","):
            raise ImportError(f"{name} is blocked")

sys.meta_path.insert(0, Blocker())
'''


def run_blocked(blocked: str, code: str, *args: str) -> str:
    """Run `code` in a fresh interpreter (cwd: the repository) where importing any of `blocked`
    (comma-separated) fails; returns its stdout, fails the test on an error."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "src"), str(REPO / "tests"), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", BLOCKER + textwrap.dedent(code), blocked, *args], capture_output=True, text=True,
                         cwd=REPO, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_the_blocker_blocks():
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    out = subprocess.run([sys.executable, "-c", BLOCKER + "import numpy", "numpy"], capture_output=True, text=True, env=env)
    assert out.returncode != 0 and "numpy is blocked" in out.stderr


def test_the_cards_import_neither_torch_numpy_nor_pandas():
    out = run_blocked("torch,numpy,pandas", """
        import importlib
        from fedgmh import cards
        for family in cards.family_names():
            importlib.import_module(f"fedgmh.cards.{family}")
        for name in cards.algorithm_names():
            for preset in cards.card(name).preset_names():
                cards.resolve_options(name, {"preset": preset})
            cards.option_rows(name)
        print(len(cards.algorithm_names()))
        """)
    assert int(out) == len(cards.algorithm_names()) >= 23


def test_the_cli_parser_and_the_plan_need_neither_torch_nor_pandas():
    out = run_blocked("torch,pandas", """
        import fedgmh.cli as c
        c.build_parser()
        import yaml
        from fedgmh.plan import Plan
        from conftest import load_config as load
        plan = Plan(load("mini.yaml"), basedir=".")
        print(len(plan.runs))
        """)
    assert int(out) > 0


def test_the_report_commands_of_the_workflow_import_no_torch(tmp_path):
    setting = REPO / "paper_artifacts" / "mini" / "runs" / "table2" / "cifar100_c5_a0.5"
    runs = sorted(str(p.parent) for algorithm in ("fedavg", "fedgmh") for p in (setting / algorithm).rglob("run.json"))
    assert len(runs) >= 2
    out = run_blocked("torch", """
        import json
        import sys
        from fedgmh.cli import main
        tmp, runs = sys.argv[2], sys.argv[3:]
        results, curves = f"{tmp}/r.csv", f"{tmp}/c.csv"
        commands = [
            ["aggregate", "--experiment", "table2", "--runs", *runs, "--out", results, "--curves", curves],
            ["artifact", "table", "--job", json.dumps({
                "input": {"results": [results], "reference": ["reference/fedgmh_paper_tables.csv"]},
                "output": {"tex": [f"{tmp}/t.tex"], "csv": [f"{tmp}/t.csv"]},
                "params": {"experiment": "table2", "title": "T", "accuracy": "best"}})],
            ["curves", "--curves", curves, "--experiment", "table2", "--out", f"{tmp}/f.png"],
            ["rounds", "--curves", curves, "--experiment", "table2", "--setting", "cifar100_c5_a0.5", "--target", "10",
             "--out", f"{tmp}/rounds.tex"],
            ["compare", "--results", results, "--reference", "reference/fedgmh_paper_tables.csv", "--out", f"{tmp}/compare.md"],
        ]
        for command in commands:
            assert main(command) == 0, command
        print("torch" in sys.modules)
        """, str(tmp_path), *runs)
    assert out.split()[-1] == "False"
    assert (tmp_path / "t.tex").is_file() and (tmp_path / "f.png").is_file()


def test_the_partition_command_imports_no_torch(tmp_path):
    """`fedgmh partition` (a workflow job per partition) reads the prepared dataset and draws the
    heat-map without torch: torch's import would be most of the job's start-up."""
    from fedgmh.data import download

    download("digits", tmp_path)
    out = run_blocked("torch", """
        import sys
        from fedgmh.cli import main
        root = sys.argv[2]
        assert main(["partition", "--dataset", "digits", "--root", root, "--clients", "10", "--classes-per-client", "2",
                     "--alpha", "0.5", "--out", f"{root}/p.npz", "--heatmap", f"{root}/p.png"]) == 0
        print("torch" in sys.modules)
        """, str(tmp_path))
    assert out.split()[-1] == "False"
    assert (tmp_path / "p.npz").is_file() and (tmp_path / "p.png").is_file()


def test_ranges_are_checked_with_one_line_errors():
    cases = [("fedgmh", {"beta": "1.5"}, "beta must be in [0, 1], got 1.5"),
             ("fedgmh", {"eta_h": "0"}, "eta_h must be a finite number > 0, got 0.0"),
             ("fedfomo", {"epsilon_decay": "-0.1"}, "epsilon_decay must be a finite number >= 0, got -0.1"),
             ("cepfl", {"window": "1"}, "window must be an integer >= 2, got 1 (a slope needs two losses)"),
             ("cepfl", {"smoothing": "0"}, "smoothing must be in (0, 1], got 0.0"),
             ("perfedavg", {"delta": "1e-9"}, "delta must be a finite number >= 1.19209e-07, got 1e-09 (2**-23, float32's resolution")]
    for name, overrides, message in cases:
        with pytest.raises(UserError) as err:
            cards.resolve_options(name, overrides)
        assert str(err.value).startswith(message) and "\n" not in str(err.value), (name, str(err.value))
    fedcac = cards.card("fedcac").options
    with pytest.raises(UserError, match="beta must be an integer >= 1, got 2.0"):
        fedcac(beta=2.0)  # built directly, not from --set strings
    assert fedcac(beta=2).beta == 2


def test_every_preset_is_resolved_the_same_way():
    for name in cards.algorithm_names():
        card = cards.card(name)
        assert card.preset_names()[:2] == cards.PRESETS
        paper, _ = card.resolve({})
        assert card.resolve({"preset": "paper"})[0] == paper
        for preset in card.preset_names():
            options, engine = card.resolve({"preset": preset})
            for key, value in card.preset(preset).items():
                assert getattr(options, key, None) == value or getattr(engine, key, None) == value, (name, preset, key)
    with pytest.raises(UserError, match="option preset='anchor': choose one of paper, official"):
        cards.resolve_options("fedavg", {"preset": "anchor"})
