"""Issue 9, workflow side: a config cannot run shell code, write outside results/<name>/, or carry
values that only fail once jobs run.

Every snakemake call runs in a temporary working directory (`--directory`) on a tiny config of the
embedded `digits` set. The injection tests run the workflow for real (not `-n`: a dry run executes
no shell command, so it could not show an injection) and check that the marker file the payload
tries to create never appears.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml
from conftest import snakemake

REPO = Path(__file__).resolve().parents[1]


def whole_config() -> dict[str, Any]:
    """A config written out whole (not cut from the smoke config): one experiment (FedAvg and FedGMH, 1
    round, 1 seed, 10 clients on digits), one figure, rounds to target."""
    return {
        "name": "sec",
        "device": "cpu",
        "clients": 10,
        "rounds": 1,
        "join_ratio": 1.0,
        "local_epochs": 1,
        "batch_size": 20,
        "lr": 0.05,
        "seeds": [0],
        "experiments": {
            "table2": {
                "title": "Tiny",
                "algorithms": ["fedavg", "fedgmh"],
                "settings": [{"dataset": "digits", "classes_per_client": 2, "alpha": 0.5}],
            }
        },
        "figures": {"figure3": {"experiment": "table2", "setting": "digits_c2_a0.5"}},
        "rounds_to_target": {"figure": "figure3", "targets": [30]},
    }


def write_config(path: Path, config: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(config))
    return path


def payloads(marker: Path) -> list[str]:
    """Shell syntax that creates `marker` when pasted unquoted into a command (whether or not the
    command before it fails)."""
    return [
        f"data;touch {marker};echo",
        f"x$(touch {marker})",
        f"x`touch {marker}`",
        f"x\ntouch {marker}\n",
        f"x & touch {marker} & echo",
        f"x | touch {marker}",
    ]


def quote_breakers(marker: Path) -> list[str]:
    """... and when pasted between single or double quotes."""
    return [f"x' ; touch {marker} ; echo '", f'x" ; touch {marker} ; echo "']


def _set_variant(config: dict[str, Any], value: str) -> None:
    config["experiments"]["table2"]["algorithms"] = ["fedgmh"]
    config["experiments"]["table2"]["variants"] = {"paper": {"preset": "paper"}, "odd": {"mix": value}}


# every string of the config that reaches a shell command, with where the workflow reports it
STRING_KEYS: dict[str, tuple[Callable[[dict[str, Any], str], None], str]] = {
    "data_root": (lambda c, v: c.update(data_root=v), "data_root: "),
    "mirror": (lambda c, v: c.update(mirror=v), "mirror: "),
    "name": (lambda c, v: c.update(name=v), "name: "),
    "stores": (lambda c, v: c.update(stores=["paper_artifacts", v]), "stores[1]: "),
    "reference_tables": (lambda c, v: c.update(reference_tables=v), "reference_tables: "),
    "train_options": (lambda c, v: c.update(train_options={"memory_format": v}), "train_options.memory_format: "),
    "algorithm_options": (lambda c, v: c.update(algorithm_options={"fedgmh": {"mix": v}}), "algorithm_options.fedgmh.mix: "),
    "experiment_options": (
        lambda c, v: c["experiments"]["table2"].update(options={"fedgmh": {"mix": v}}),
        "experiments.table2.options.fedgmh.mix: ",
    ),
    "setting_options": (
        lambda c, v: c["experiments"]["table2"]["settings"][0].update(options={"preset": v}),
        "experiments.table2.settings[0].options.preset: ",
    ),
    "variant_options": (_set_variant, "experiments.table2.variants.odd.mix: "),
    "option_key": (lambda c, v: c.update(train_options={v: 1}), "train_options: "),
    "variant_name": (
        lambda c, v: c["experiments"]["table2"].update(variants={v: {"preset": "paper"}}),
        "experiments.table2.variants: ",
    ),
    "experiment_id": (lambda c, v: c.update(experiments={v: c["experiments"]["table2"]}, figures={}, rounds_to_target=None),
                      "experiments: "),
    "figure_name": (lambda c, v: c.update(figures={v: c["figures"]["figure3"]}, rounds_to_target=None), "figures: "),
    "figure_setting": (lambda c, v: c["figures"]["figure3"].update(setting=v), "figures.figure3.setting "),
    "figure_experiment": (lambda c, v: c["figures"]["figure3"].update(experiment=v), "figures.figure3.experiment "),
    "rounds_to_target_figure": (lambda c, v: c["rounds_to_target"].update(figure=v), "rounds_to_target.figure "),
    "costs_runs": (lambda c, v: c.update(costs_runs=v), "costs_runs: "),
    "controls_summary": (lambda c, v: c.update(controls_summary=v), "controls_summary: "),
}


@pytest.mark.parametrize("key", list(STRING_KEYS))
def test_shell_syntax_in_a_config_string_never_runs(tmp_path: Path, key: str) -> None:
    """A real `snakemake all` with a payload in one key: the workflow refuses the value before any
    job (naming the key) and the marker never appears. (Titles, which may hold any text, are
    checked by the end-to-end test below.)"""
    marker = tmp_path / "INJECTED"
    keys = list(STRING_KEYS)
    values = payloads(marker)
    value = values[keys.index(key) % len(values)]  # a different kind of payload for neighbouring keys
    if key in ("option_key", "experiment_id", "figure_name", "variant_name"):
        value = value.replace("\n", ";")  # a mapping key: keep it on one line
    setter, where = STRING_KEYS[key]
    if key == "reference_tables":  # a file that exists, so only the value's shell syntax can stop it
        reference = tmp_path / value
        reference.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / "reference" / "fedgmh_paper_tables.csv", reference)
    config = whole_config()
    setter(config, value)
    path = write_config(tmp_path / "config.yaml", config)
    result = snakemake(tmp_path, "all", "--cores", "1", "--configfile", str(path), timeout=600)
    out = result.stdout + result.stderr
    assert not marker.exists(), f"{key}: the payload ran\n{out[-3000:]}"
    assert result.returncode != 0, out[-3000:]
    assert where in out, out[-3000:]
    assert not (tmp_path / "results").exists() and not (tmp_path / "logs").exists()  # stopped before any job


def test_free_text_and_paths_with_spaces_reach_the_commands_intact(tmp_path: Path) -> None:
    """A real run where every path key has spaces (data_root, mirror, stores, reference_tables) and
    the titles hold shell syntax: every job succeeds, the titles arrive verbatim, nothing runs."""
    marker = tmp_path / "INJECTED"
    work = tmp_path / "work dir"
    (work / "ref dir").mkdir(parents=True)
    shutil.copy(REPO / "reference" / "fedgmh_paper_tables.csv", work / "ref dir" / "paper tables.csv")
    table_title = " ".join(["Tiny", *(p for p in payloads(marker) if "\n" not in p), *quote_breakers(marker)])
    # over several lines, with a single $ (two would make matplotlib read math)
    figure_title = "\n".join(["Fig", *(p.strip() for p in payloads(marker)[1:4]), *quote_breakers(marker)])
    config = whole_config()
    config.update(
        data_root="data dir/sub dir",
        mirror="mirror dir",  # digits ignores the mirror, but the download command still gets it
        stores=["store dir", "paper_artifacts"],
        reference_tables="ref dir/paper tables.csv",
    )
    config["experiments"]["table2"]["title"] = table_title
    config["figures"]["figure3"]["title"] = figure_title
    path = write_config(tmp_path / "config.yaml", config)

    result = snakemake(work, "all", "--cores", "2", "--configfile", str(path), timeout=900)
    out = result.stdout + result.stderr
    assert not marker.exists(), out[-3000:]
    assert result.returncode == 0, out[-5000:]
    assert (work / "data dir" / "sub dir" / "digits.npz").is_file()
    assert not (work / "data").exists()
    art = work / "paper_artifacts" / "sec"
    assert table_title in (art / "table2.tex").read_text()  # one argument, not split, not expanded
    assert (art / "figure3.png").read_bytes().startswith(b"\x89PNG")
    assert (art / "comparison.md").is_file() and (art / "rounds_to_target.csv").is_file()
    assert len(list((art / "runs").rglob("run.json"))) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml", "work dir"]  # nothing written outside


@pytest.mark.parametrize("name", ["..", ".", "../escape", "a/b", "-rf", ".hidden", "a b", ""])
def test_name_must_be_one_safe_folder_name(tmp_path: Path, name: str) -> None:
    config = whole_config()
    config["name"] = name
    path = write_config(tmp_path / "config.yaml", config)
    result = snakemake(tmp_path, "-n", "all", "--cores", "1", "--configfile", str(path), timeout=300)
    out = result.stdout + result.stderr
    assert result.returncode != 0, out[-3000:]
    assert f"name: {name!r} is not allowed: use one folder name" in out, out[-3000:]


def test_ordinary_names_and_extreme_seeds_plan_fine(tmp_path: Path) -> None:
    config = whole_config()
    config.update(name="mini_v2.1", seeds=[0, 2**32 - 1], partition_seed=2**32 - 1, clients=2)
    config["experiments"]["table2"]["settings"][0]["classes_per_client"] = 10  # the fewest clients: 2, with every class
    config["figures"]["figure3"]["setting"] = "digits_c10_a0.5"
    path = write_config(tmp_path / "config.yaml", config)
    result = snakemake(tmp_path, "-n", "all", "--cores", "1", "--configfile", str(path), timeout=300)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    assert "results/mini_v2.1/runs/table2/digits_c10_a0.5/fedgmh/seed4294967295" in out


def _setting(config: dict[str, Any]) -> dict[str, Any]:
    return config["experiments"]["table2"]["settings"][0]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda c: c.update(seeds=[-1]), "seeds[0]: -1 is less than the minimum of 0"),
        (lambda c: c.update(seeds=[0, 2**32]), "seeds[1]: 4294967296 is greater than the maximum of 4294967295"),
        (lambda c: c["experiments"]["table2"].update(seeds=[2**40]), "experiments.table2.seeds[0]: 1099511627776 is greater than"),
        (lambda c: c.update(partition_seed=-5), "partition_seed: -5 is less than the minimum of 0"),
        (lambda c: c.update(partition_seed=2**32), "partition_seed: 4294967296 is greater than the maximum"),
        (lambda c: c.update(clients=1), "clients: 1 is less than the minimum of 2"),
        (lambda c: _setting(c).update(classes_per_client=11),
         "experiments.table2.settings[0].classes_per_client (11): must be between 1 and K=10, the number of classes of digits"),
        (lambda c: c.update(clients=4),
         "clients (4) and experiments.table2.settings[0].classes_per_client (2) give N x C = 8 < the 10 classes of digits"),
        # what the jobs would refuse: ExDir's class draw, the data's size, a round without clients
        (lambda c: c.update(clients=5), "ExDir(2, 0.5) of digits over clients = 5 clients cannot be drawn with partition_seed 1"),
        (lambda c: c.update(clients=200), "clients (200): the 1797 samples of digits give every client at least 10"),
        (lambda c: c.update(join_ratio=0.05), "join_ratio (0.05) x clients (10) < 1: a round would select no client"),
        # strings that would become a flag or a folder name too long for the file system
        (lambda c: c["experiments"]["table2"].update(variants={"--overwrite": {}}),
         "experiments.table2.variants: '--overwrite' is not allowed"),
        (lambda c: c.update(name="n" * 300), "name: 300 characters long; at most 64"),
    ],
    ids=["seed-negative", "seed-2**32", "experiment-seed", "partition-seed-negative", "partition-seed-2**32", "one-client",
         "classes-per-client", "classes-uncovered", "exdir-undrawable", "too-many-clients", "join-ratio", "variant-flag",
         "long-name"],
)
def test_bad_seeds_clients_classes_and_names_fail_the_dry_run(tmp_path: Path, change: Callable, message: str) -> None:
    config = whole_config()
    change(config)
    path = write_config(tmp_path / "config.yaml", config)
    result = snakemake(tmp_path, "-n", "all", "--cores", "1", "--configfile", str(path), timeout=300)
    out = result.stdout + result.stderr
    assert result.returncode != 0, out[-3000:]
    assert message in out, out[-3000:]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda c: c.update(algorithm_options={"fedgmh": {"betta": 0.5}}),
         "config: algorithm_options.fedgmh.betta = 0.5 is not valid for fedgmh (a run of experiment table2)"),
        (lambda c: _setting(c).update(options={"beta": "abc"}),
         "config: experiments.table2.settings[0].options.beta = 'abc' is not valid for fedgmh"),
        (lambda c: c.update(train_options={"drop_last": "maybe"}), "config: train_options.drop_last = 'maybe' is not valid"),
        (lambda c: c["experiments"]["table2"].update(variants={"v": {"mix": "everything"}}),
         "config: experiments.table2.variants.v.mix = 'everything' is not valid for fedgmh"),
        (lambda c: c["experiments"]["table2"].update(options={"fedgmh": {"preset": "authors"}}),
         "config: experiments.table2.options.fedgmh.preset = 'authors' is not valid for fedgmh"),
        (lambda c: c.update(lr=float("nan")), "config: lr is nan; every number must be finite"),
        (lambda c: c.update(algorithm_options={"fedgmh": {"beta": float("inf")}}),
         "config: algorithm_options.fedgmh.beta is inf; every number must be finite"),
    ],
    ids=["unknown-key", "bad-float", "bad-bool", "bad-choice", "bad-preset", "nan-lr", "inf-option"],
)
def test_bad_options_fail_the_dry_run_naming_the_key(tmp_path: Path, change: Callable, message: str) -> None:
    config = whole_config()
    config["experiments"]["table2"]["algorithms"] = ["fedgmh"]
    change(config)
    path = write_config(tmp_path / "config.yaml", config)
    result = snakemake(tmp_path, "-n", "all", "--cores", "1", "--configfile", str(path), timeout=300)
    out = result.stdout + result.stderr
    assert result.returncode != 0, out[-3000:]
    assert message in out, out[-3000:]


def test_free_text_that_looks_like_a_flag_reaches_the_commands_as_a_value(tmp_path: Path) -> None:
    """Every command of a dry run parses as `fedgmh` reads it, and titles or a layer name such as -h
    arrive as values (in the artifact's job), not as flags."""
    import shlex

    from conftest import artifact_jobs

    from fedgmh.cli import build_parser

    config = whole_config()
    config["experiments"]["table2"].update(title="-h", algorithms=["fedavg", "fedgmh", "pfedla"])
    config["figures"]["figure3"]["title"] = "--help"
    config.update(controls_summary="table2",
                  uploads_to_target={"experiment": "table2", "setting": "digits_c2_a0.5", "targets": [30], "title": "--version"},
                  layer_weights={"experiment": "table2", "setting": "digits_c2_a0.5", "algorithms": ["pfedla"], "layer": "-h",
                                 "title": "--version"})
    path = write_config(tmp_path / "config.yaml", config)
    result = snakemake(tmp_path, "-n", "-p", "all", "--cores", "1", "--configfile", str(path), timeout=300)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    parser = build_parser()
    for line in out.splitlines():
        if line.startswith("Shell command: fedgmh "):
            words = shlex.split(line.removeprefix("Shell command: "))
            try:
                parser.parse_args(words[1:words.index(">")])
            except SystemExit:
                pytest.fail(f"`fedgmh` does not read the command as meant: {line}")
    jobs = artifact_jobs(out)
    params = dict((name, job["params"]) for name, job in jobs if name != "table")
    tables = {job["params"]["experiment"]: job["params"] for name, job in jobs if name == "table"}
    assert tables["table2"]["title"] == "-h" and params["controls_summary"]["title"] == "-h"
    assert params["curves"]["title"] == "--help" and params["uploads_to_target"]["title"] == "--version"
    assert (params["layer_weights"]["title"], params["layer_weights"]["layer"]) == ("--version", "-h")


def test_device_cuda_without_a_gpu_warns_in_a_dry_run_and_stops_a_local_run_before_any_job(tmp_path: Path, monkeypatch) -> None:
    """A dry run of a GPU config stays possible on a machine without a GPU (a cluster's login node checks
    the plan so); run here, the config stops before its first job, naming the key."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # hides every GPU, as on a machine without one
    config = whole_config()
    config["device"] = "cuda"
    path = write_config(tmp_path / "config.yaml", config)
    message = "config: device is 'cuda', but this machine shows no GPU"
    dry = snakemake(tmp_path, "-n", "all", "--cores", "1", "--configfile", str(path), timeout=300)
    assert dry.returncode == 0 and message in dry.stdout + dry.stderr, (dry.stdout + dry.stderr)[-3000:]
    result = snakemake(tmp_path, "all", "--cores", "1", "--configfile", str(path), timeout=300)
    out = result.stdout + result.stderr
    assert result.returncode != 0 and message in out, out[-3000:]
    assert not (tmp_path / "results").exists() and not (tmp_path / "data").exists()  # stopped before any job
