"""The first hour's messages: `fedgmh train`'s start-up line and one-seed rule, `fedgmh options`' closest name."""

from __future__ import annotations

import pytest

from fedgmh.cli import main


@pytest.fixture(scope="module")
def part(tmp_path_factory):
    from fedgmh import data

    root = tmp_path_factory.mktemp("messages")
    data.download("digits", root / "data")
    path = root / "digits_c3_a0.5.npz"
    assert main(["partition", "--dataset", "digits", "--root", str(root / "data"), "--clients", "6",
                 "--classes-per-client", "3", "--alpha", "0.5", "--out", str(path)]) == 0
    return path


def train(part, *extra):
    return ["train", "--root", str(part.parent / "nowhere"), "--partition", str(part), "--algorithm", "fedgmh",
            "--rounds", "200", "--out", str(part.parent / "run"), *extra]


def test_train_says_what_it_trains_before_anything_else(part, capsys):
    assert main(train(part, "--seed", "3")) == 2  # the data root is missing: the line came first all the same
    said = capsys.readouterr()
    lines = said.out.splitlines() + said.err.splitlines()
    assert lines[0] == (f"train: fedgmh on digits ExDir(3, 0.5), 6 clients ({part.name}), seed 3, 200 rounds -> "
                        f"{part.parent / 'run'}; loading torch and the data")
    assert len(lines) == 2 and "error" in lines[1]


def test_the_start_line_is_silent_with_quiet_and_names_the_file_it_cannot_read(part, capsys, tmp_path):
    from argparse import Namespace

    from fedgmh.cli_train import start_line

    main(train(part, "--quiet"))
    assert "train:" not in capsys.readouterr().out
    other = tmp_path / "other.npz"
    other.write_bytes(b"not a zip")
    args = Namespace(algorithm="fedavg", partition=str(other), dataset=None, seed=0, rounds=5, out="runs/a")
    assert start_line(args).startswith("train: fedavg on the partition's dataset (other.npz), seed 0, 5 rounds -> runs/a")


@pytest.mark.parametrize("seeds", [["--seed", "0,1,2"], ["--seed=0,1,2"], ["--seeds", "0", "1", "2"], ["--seed", "0, 1"]])
def test_several_seeds_get_one_line_saying_one_train_is_one_seed(part, capsys, seeds):
    assert main(train(part, *seeds)) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "usage:" not in err
    assert err.startswith("fedgmh train: error: --seed") and "one `fedgmh train` is one seed" in err
    assert "for s in 0 1 2" in err and "seeds: [0, 1, 2]" in err


def test_a_seed_that_is_not_a_number_is_still_argparse_s_error(part, capsys):
    assert main(train(part, "--seed", "abc")) == 2
    assert "invalid int value: 'abc'" in capsys.readouterr().err


def test_a_served_command_line_with_several_seeds_is_refused_in_one_line(part):
    from fedgmh.cli import served_train_problem

    assert "one `fedgmh train` is one seed" in served_train_problem(train(part, "--seeds", "0", "1"))


def test_options_suggests_the_closest_algorithm(capsys):
    assert main(["options", "fedgmhh"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fedgmh options: error: unknown algorithm 'fedgmhh' (did you mean 'fedgmh'?)")
    assert len(err.splitlines()) == 1


def test_an_offline_download_says_the_whole_command_with_the_mirror_found_here(tmp_path, monkeypatch, capsys):
    import torchvision.datasets

    class Offline:
        def __init__(self, **kwargs):
            raise RuntimeError("Error downloading train-images-idx3-ubyte.gz: <urlopen error>")

    monkeypatch.setattr(torchvision.datasets, "MNIST", Offline)
    (tmp_path / "shared" / "data" / "MNIST").mkdir(parents=True)
    (tmp_path / "repo").mkdir()
    monkeypatch.chdir(tmp_path / "repo")
    assert main(["download", "mnist", "--root", "data"]) == 2
    err = capsys.readouterr().err
    assert "`fedgmh download mnist --root data --mirror DIR`" in err and "laid out like shared/data, here ../shared/data (in the workflow" in err
    assert err.rstrip().endswith("torchvision said: Error downloading train-images-idx3-ubyte.gz: <urlopen error>")


def test_hand_runs_of_several_seeds_become_a_table_on_screen_and_a_curve(tmp_path, capsys):
    from test_report import make_run

    runs = [make_run(tmp_path / "runs", algorithm="fedgmh", seed=seed, best=best, labelled=False)
            for seed, best in enumerate([0.98, 0.97, 0.99])]
    out = tmp_path / "runs"
    assert main(["aggregate", "--runs", *map(str, runs), "--out", str(out / "results.csv"), "--curves", str(out / "curves.csv")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "  FedGMH on mnist_c2_a0.5: best test accuracy 98.00 ± 0.82 % (3 seeds: 0 1 2)"
    assert main(["curves", "--curves", str(out / "curves.csv"), "--out", str(out / "curves.png")]) == 0
    assert (out / "curves.png").stat().st_size > 0


def test_the_hand_run_s_outputs_are_ignored_by_git():
    import shutil
    import subprocess
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    if shutil.which("git") is None or not (repo / ".git").exists():
        pytest.skip("not a git checkout")
    made = ["data/mnist.npz", "mnist_c2_a0.5.npz", "mnist_c2_a0.5.stats.csv", "runs/fedgmh_s0/run.json", "runs/results.csv"]
    ignored = subprocess.run(["git", "check-ignore", "--no-index", *made], cwd=repo, capture_output=True, text=True).stdout.split()
    assert ignored == made


def test_every_unknown_config_key_gets_a_line_with_the_closest_one(capsys, monkeypatch):
    from test_plan import REPO, SCHEMA, load

    from fedgmh import plan

    config = load("smoke.yaml") | {"local_epoch": 3, "roundz": 5}
    config["experiments"]["table2"]["algorthms"] = ["fedavg"]
    assert plan.schema_problems(config, SCHEMA) == [
        "  local_epoch: unknown key (did you mean 'local_epochs'?)",
        "  roundz: unknown key (did you mean 'rounds'?)",
        "  experiments.table2.algorthms: unknown key (did you mean 'algorithms'?)",
    ]
    monkeypatch.chdir(REPO)
    assert main(["plan", "--configfile", "config/smoke.yaml", "--config", "local_epoch=3", "roundz=5", "seeds=0,1,2"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "more)" not in err
    assert "local_epoch: unknown key (did you mean 'local_epochs'?); roundz: unknown key (did you mean 'rounds'?)" in err
    assert err.rstrip().endswith("seeds: '0,1,2' is not of type 'array' (a list is written in brackets: seeds=[0,1,2]) "
                                 "(every key: config/README.md)")


def test_a_single_value_where_a_list_is_wanted_gets_the_list_syntax():
    from test_plan import SCHEMA, load

    from fedgmh import plan

    assert plan.schema_problems(load("smoke.yaml") | {"seeds": 3}, SCHEMA) == [
        "  seeds: 3 is not of type 'array' (a list is written in brackets: seeds=[3])"]


def test_the_list_syntax_works_for_fedgmh_plan(capsys, monkeypatch):
    from test_plan import REPO

    monkeypatch.chdir(REPO)
    assert main(["plan", "--configfile", "config/smoke.yaml", "--config", "seeds=[0,1,2]"]) == 0
    assert "plan smoke:" in capsys.readouterr().out


@pytest.mark.parametrize(("argv", "words"), [(["train", "--rounds", "abc"], "fedgmh train: error: argument --rounds: invalid int value"),
                                             (["nothing"], "fedgmh: error: argument command: invalid choice: 'nothing'"),
                                             (["store"], "fedgmh store: error: the following arguments are required: verb")])
def test_a_usage_error_is_one_line_naming_help(capsys, argv, words):
    """argparse printed its usage block (4 to 10 lines) before the error."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith(words) and "--help` lists the arguments" in err, err
