"""The workflow's plan (fedgmh.plan): runs expanded from a config, trained once when shared, their
`fedgmh train` arguments, the checks of a dry run, and no torch while the DAG is built."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import SCHEMA_FILE
from conftest import load_config as load

from fedgmh import plan
from fedgmh.cadence import snapshot_cadence
from fedgmh.plan import GPU_RUNTIME_MINUTES, ConfigError, Plan

REPO = Path(__file__).resolve().parents[1]
SCHEMA = yaml.safe_load(SCHEMA_FILE.read_text())


def test_paper_plan_trains_each_run_once() -> None:
    paper = Plan(load("config.yaml"), basedir=REPO)
    assert len(paper.runs) > len(paper.train_jobs) == 1819  # tests/test_workflow.py counts them per table
    assert len(paper.partitions) == 9 and paper.datasets == ["cifar10", "cifar100", "fashion_mnist", "mnist"]
    # Table 5's FedGMH runs are Table 2's: trained in Table 2's folder, read by both tables
    table5 = [run for run in paper.runs if run.experiment == "table5" and run.algorithm == "fedgmh"]
    assert table5 and all(not run.owner and "/runs/table2/" in run.run_dir for run in table5)
    assert all(paper.train_jobs[run.run_dir].experiment == "table2" for run in table5)
    assert paper.experiment_run_dirs("table5") == [run.run_dir for run in paper.runs if run.experiment == "table5"]
    audit = paper.variant_arguments("audit")
    assert audit[0] == "--variant" and len(audit) == 1 + len(paper.experiment_run_dirs("audit")) and audit[1] == "paper"
    assert paper.variant_arguments("table2") == []
    with pytest.raises(ConfigError, match="no experiment 'table9'"):
        paper.experiment_run_dirs("table9")
    with pytest.raises(ConfigError, match="trained in another experiment's folder"):
        paper.train_job("table5", "cifar100_c5_a0.5", "fedgmh", 0)


def test_cpu_channels_last_lays_out_3_channel_images_on_a_cpu_and_keeps_the_run() -> None:
    """Config cpu_channels_last: `--set memory_format=channels_last` for CIFAR runs trained on a CPU only;
    an execution option, so every run's spec (its key, the rerun trigger) is the same."""
    def sets(plan: Plan, dataset: str) -> list[str]:
        run = next(run for run in plan.train_jobs.values() if run.dataset == dataset and run.experiment == "table2")
        words = plan.train_arguments(run, "p.npz", 1)
        return [value for flag, value in zip(words, words[1:]) if flag == "--set"]

    plain = Plan(load("config.yaml", device="cpu"), basedir=REPO)
    laid_out = Plan(load("config.yaml", device="cpu", cpu_channels_last=True), basedir=REPO)
    assert "memory_format=channels_last" in sets(laid_out, "cifar100") and "memory_format=channels_last" not in sets(plain, "cifar100")
    assert "memory_format=channels_last" not in sets(laid_out, "mnist")  # one channel: no faster there
    assert [run.spec for run in laid_out.runs] == [run.spec for run in plain.runs]
    on_gpu = Plan(load("config.yaml", device="cuda:0", cpu_channels_last=True), basedir=REPO)
    assert "memory_format=channels_last" not in sets(on_gpu, "cifar100")


def test_train_arguments_are_the_runs(tmp_path: Path) -> None:
    smoke = Plan(load("smoke.yaml", stores=["paper_artifacts", "their store"]), basedir=REPO)
    run = smoke.train_job("audit_beta", "digits_c2_a0.5_beta0.1@official", "fedgmh", 0)
    words = smoke.train_arguments(run, "results/smoke/partitions/digits_c2_a0.5.npz", 3)
    words.remove("--overwrite")  # the workflow replaces whatever run its folder holds (train rule)
    pairs = dict(zip(words[::2], words[1::2]))
    assert pairs | {"--set": None, "--store": None} == {
        "--dataset": "digits", "--root": "data", "--partition": "results/smoke/partitions/digits_c2_a0.5.npz",
        "--algorithm": "fedgmh", "--rounds": "2", "--join-ratio": "0.5", "--local-epochs": "1", "--batch-size": "20",
        "--lr": "0.05", "--seed": "0", "--device": "cpu", "--threads": "3", "--set": None, "--store": None,
        "--out": "results/smoke/runs/audit_beta/digits_c2_a0.5_beta0.1@official/fedgmh/seed0", "--config-name": "smoke",
        "--experiment": "audit_beta", "--setting": "digits_c2_a0.5_beta0.1@official", "--variant": "official",
    }
    sets = [value for flag, value in zip(words, words[1:]) if flag == "--set"]
    assert sets == ["beta=0.1", "eta_h=1.0", "preset=official"]  # booleans/floats as `fedgmh train --set` reads them
    assert [value for flag, value in zip(words, words[1:]) if flag == "--store"] == ["paper_artifacts", "their store"]
    plain = smoke.train_arguments(smoke.train_job("table2", "digits_c2_a0.5", "fedavg", 1), "p.npz", 1)
    assert "--variant" not in plain and plain[-2:] == ["--setting", "digits_c2_a0.5"]
    # an experiment's own batch size (CE-pFL's protocol) reaches its runs, and only them
    cepfl = dict(zip(*[iter(smoke.train_arguments(smoke.train_job("cepfl_protocol", "digits_c5_a1000000_n20", "fedavg", 0), "p.npz", 1))] * 2))
    assert (cepfl["--batch-size"], cepfl["--lr"]) == ("16", "0.05")
    # a GPU config: every job takes a GPU slot, J of them per GPU, and one unit of the resource `gpu`
    gpu = Plan(load("smoke.yaml", device="cuda", jobs_per_gpu=4), basedir=REPO)
    words = gpu.train_arguments(gpu.train_job("table2", "digits_c2_a0.5", "fedavg", 1), "p.npz", 1)
    assert " ".join(words).count("--device cuda:auto --jobs-per-gpu 4 --threads 1") == 1
    assert gpu.gpu_resources == {"gpu": 1} and smoke.gpu_resources == {}
    assert Plan(load("smoke.yaml", device="cuda:1"), basedir=REPO).train_device == "cuda:1"  # an explicit GPU: no slots


def test_checkpoint_every_reaches_the_jobs_only_when_set() -> None:
    """Unset, a job's words are as before (so Snakemake sees no changed params); set, every job gets it."""
    default = Plan(load("smoke.yaml"), basedir=REPO)
    assert "--checkpoint-every" not in default.train_arguments(default.train_job("table2", "digits_c2_a0.5", "fedavg", 1), "p.npz", 1)
    sparse = Plan(load("smoke.yaml", checkpoint_every=50), basedir=REPO)
    words = sparse.train_arguments(sparse.train_job("table2", "digits_c2_a0.5", "fedavg", 1), "p.npz", 1)
    assert words[words.index("--checkpoint-every") + 1] == "50"
    # GPU rounds are short: the full campaign snapshots by time (fedgmh.cadence)
    assert snapshot_cadence(Plan(load("table2_full.yaml"), basedir=REPO).config["checkpoint_every"])[1] > 0
    for value, fine in ((-1, False), ("soon", False), ("60s", True), ("2.5s", True)):
        config = load("smoke.yaml")
        config["checkpoint_every"] = value
        assert any("checkpoint_every" in problem for problem in plan.schema_problems(config, SCHEMA)) is not fine, value


def test_a_sweep_of_batch_size_or_lr_names_its_settings() -> None:
    config = load("smoke.yaml")
    config["experiments"] = {"sweep": {"algorithms": ["fedavg"], "lr": 0.1, "settings": [
        {"dataset": "digits", "classes_per_client": 2, "alpha": 0.5},
        {"dataset": "digits", "classes_per_client": 2, "alpha": 0.5, "batch_size": 8, "lr": 0.02}]}}
    config.update(figures={}, rounds_to_target=None, clients_figure=None, costs_runs=None, controls_summary=None,
                  uploads_to_target=None, layer_weights=None)
    assert plan.schema_problems(config, SCHEMA) == []
    sweep = Plan(config, basedir=REPO)
    runs = [run for run in sweep.runs if run.seed == 0]
    assert [(run.setting, run.batch_size, run.lr) for run in runs] == [("digits_c2_a0.5_b20_lr0.1", 20, 0.1),
                                                                       ("digits_c2_a0.5_b8_lr0.02", 8, 0.02)]
    words = sweep.train_arguments(runs[1], "p.npz", 1)
    assert words[words.index("--batch-size") + 1] == "8" and words[words.index("--lr") + 1] == "0.02"


def test_train_runtime_grows_with_the_work() -> None:
    paper = Plan({**load("config.yaml"), "device": "cpu"}, basedir=REPO)
    mnist = paper.train_job("table2", "mnist_c2_a0.5", "fedavg", 0)
    cifar = paper.train_job("table2", "cifar100_c5_a0.5", "fedavg", 0)
    all_clients = paper.train_job("table4", "cifar100_c5_a0.5_j1", "fedavg", 0)
    assert paper.train_runtime(mnist) < paper.train_runtime(cifar) < paper.train_runtime(all_clients)
    # twice the measured CPU rate: the committed MNIST run of 200 rounds, E = 2 took 7668 s (128 min)
    assert paper.train_runtime(mnist) == pytest.approx(2 * 7668 / 60, abs=1)
    smoke = Plan(load("smoke.yaml"), basedir=REPO)
    assert smoke.train_runtime(smoke.train_job("table2", "digits_c2_a0.5", "fedavg", 0)) == 10  # the floor
    # on a GPU the CPU estimate, capped: no GPU queue is asked for days (CIFAR-100, 300 rounds, every client: 130 h on a CPU)
    gpu = Plan({**load("config.yaml"), "device": "cuda"}, basedir=REPO)
    assert paper.train_runtime(all_clients) > GPU_RUNTIME_MINUTES == gpu.train_runtime(all_clients) == 360
    assert gpu.train_runtime(mnist) == paper.train_runtime(mnist)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda c: c["algorithm_options"]["fedgmh"].update(betta=0.5),
         "config: algorithm_options.fedgmh.betta = 0.5 is not valid for fedgmh (a run of experiment table2)"),
        (lambda c: c["algorithm_options"]["gmh_o"].update(heads="per_label", server_pass="batched"),  # each fine alone
         "config: the options algorithm_options.gmh_o.beta, algorithm_options.gmh_o.eta_h, algorithm_options.gmh_o.heads, "
         "algorithm_options.gmh_o.server_pass do not go together for gmh_o"),
        (lambda c: c["experiments"]["table6"]["settings"].append(dict(c["experiments"]["table6"]["settings"][0])),
         "config: experiment 'table6' lists the same setting twice (digits_c2_a0.5_beta0.1, algorithm fedgmh)"),
        (lambda c: c["experiments"]["table2"]["settings"][0].update(classes_per_client=11),
         "config: experiments.table2.settings[0].classes_per_client (11): must be between 1 and K=10, the number of classes of digits"),
        (lambda c: c.update(lr=float("inf")), "config: lr is inf; every number must be finite"),
        (lambda c: c["figures"]["figure4"].update(algorithms=["fedavg"]), "config: figures.figure4.algorithms ['fedavg'] are not run in table5"),
        (lambda c: c["rounds_to_target"].update(paper={"fedgmh": [1]}), "config: rounds_to_target.paper.fedgmh has 1 rounds for 2 targets"),
        (lambda c: c.update(reference_tables="nowhere.csv"), "config: reference_tables 'nowhere.csv' not found"),
        (lambda c: c.update(name="../up"), "config: name '../up' is not allowed"),
        # what a job would refuse: ExDir's class draw (N x C = K almost never covers every class), the data's size,
        # a participation that selects no client
        (lambda c: c["experiments"]["table2"]["settings"][0].update(clients=5),
         "config: experiments.table2.settings[0]: ExDir(2, 0.5) of digits over experiments.table2.settings[0].clients = 5 "
         "clients cannot be drawn with partition_seed 1: could not give every class 1 holders in 1000 draws"),
        (lambda c: c["experiments"]["table2"]["settings"][0].update(clients=200),
         "config: experiments.table2.settings[0].clients (200): the 1797 samples of digits give every client at least 10, "
         "so at most 179 clients; use fewer clients"),
        (lambda c: c.update(join_ratio=0.05), "config: join_ratio (0.05) x clients (10) < 1: a round would select no client"),
        (lambda c: c["experiments"]["table2_pflib"]["variants"].update({"--overwrite": {}}),
         "config: experiments.table2_pflib.variants: '--overwrite' is not allowed"),
        (lambda c: c.update(name="n" * 300), "config: name is 300 characters long; at most 64"),
        (lambda c: c["experiments"].update({"t" * 300: c["experiments"].pop("table7")}),
         "bytes long; file systems allow at most 255"),
    ],
    ids=["unknown-option", "options-together", "same-setting-twice", "classes", "inf", "figure-algorithms", "rounds-to-target",
         "reference", "name", "exdir-undrawable", "too-many-clients", "join-ratio", "variant-flag", "long-name", "long-folder"],
)
def test_a_config_the_workflow_cannot_run_names_the_key(change, message: str) -> None:
    config = load("smoke.yaml")
    Plan(copy.deepcopy(config), basedir=REPO)  # the shipped config plans
    change(config)
    with pytest.raises(ConfigError) as err:
        Plan(config, basedir=REPO)
    assert message in str(err.value)


def test_schema_problems_name_the_key() -> None:
    config = load("smoke.yaml")
    config["experiments"]["table2"]["settings"][0]["alpha"] = -1
    config["experiments"]["audit"]["variants"]["bad/name"] = {}
    config["mirror"] = "x;touch y"
    assert plan.schema_problems(config, SCHEMA) == [
        "  experiments.audit.variants: 'bad/name' is not allowed: "
        + SCHEMA["$defs"]["experiment"]["properties"]["variants"]["propertyNames"]["x-message"],
        "  experiments.table2.settings[0].alpha: -1 is less than or equal to the minimum of 0",
        "  mirror: 'x;touch y' is not allowed: " + SCHEMA["properties"]["mirror"]["x-message"],
    ]


def test_a_list_given_with_snakemakes_config_flag_is_read_as_numbers() -> None:
    """`snakemake --config seeds=[0,1,2]` gives the items as text ('0'): the workflow reads them as the
    numbers the schema wants; text that is not a number stays, and the schema refuses it."""
    from snakemake.cli import parse_config

    config = load("smoke.yaml") | parse_config(["seeds=[0,1,2]"])
    assert plan.config_problems(config, SCHEMA) == [] and config["seeds"] == [0, 1, 2]
    config = load("smoke.yaml") | {"seeds": ["a"]}
    assert plan.config_problems(config, SCHEMA) == ["  seeds[0]: 'a' is not of type 'integer'"]
    config = load("smoke.yaml") | parse_config(["seeds=[0,-1]"])  # read as a number, then out of range
    assert plan.config_problems(config, SCHEMA) == ["  seeds[1]: -1 is less than the minimum of 0"]


def test_schema_limits_what_becomes_a_folder_or_a_command_word() -> None:
    config = load("smoke.yaml")
    config["name"] = "n" * 65
    config["experiments"]["table2_pflib"]["variants"]["--overwrite"] = {}
    config["experiments"]["table2_pflib"]["variants"]["v" * 65] = {}
    config["experiments"]["e" * 65] = config["experiments"]["table7"]
    config["train_options"] = {"k" * 65: "x" * 65}
    variant_names = SCHEMA["$defs"]["experiment"]["properties"]["variants"]["propertyNames"]
    assert plan.schema_problems(config, SCHEMA) == [
        "  experiments: 65 characters long; at most 64",
        "  experiments.table2_pflib.variants: '--overwrite' is not allowed: " + str(variant_names.get("x-message")),
        "  experiments.table2_pflib.variants: 65 characters long; at most 64",
        "  name: 65 characters long; at most 64",
        "  train_options: 65 characters long; at most 64",
        "  train_options." + "k" * 65 + ": 65 characters long; at most 64",
    ]


def test_every_train_job_s_words_parse_back_to_its_run() -> None:
    """The words reach `fedgmh train` as its parser reads them: each value where it belongs, none taken for a flag."""
    from fedgmh.cli import build_parser

    smoke = Plan(load("smoke.yaml"), basedir=REPO)
    parser = build_parser()
    for run in smoke.train_jobs.values():
        args = parser.parse_args(["train", *smoke.train_arguments(run, "p.npz", 1)])
        assert (args.experiment, args.setting, args.variant or "", args.out, args.algorithm, args.seed) == \
            (run.experiment, run.setting, run.variant, run.run_dir, run.algorithm, run.seed)
        assert args.set == [f"{k}={plan.set_text(v)}" for k, v in sorted(run.options.items())]


def test_gpu_visible_respects_cuda_visible_devices(monkeypatch) -> None:
    for hidden in ("", "-1"):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", hidden)
        assert not plan.gpu_visible()
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert plan.gpu_visible() == (Path("/proc/driver/nvidia/gpus").is_dir() or any(Path("/dev").glob("nvidia[0-9]*")))


def test_the_plan_imports_no_torch() -> None:
    """The workflow builds its plan on every snakemake call: without torch (seconds to import)."""
    code = (
        "import sys, yaml\n"
        "sys.path.insert(0, 'tests'); from conftest import load_config as load\n"
        "from fedgmh.plan import Plan\n"
        "Plan(load('config.yaml'), basedir='.')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'torchvision') or m.startswith('fedgmh.algorithms')))"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO, env=env)
    assert out.stdout.strip() == "[]"


def test_official_reading_names_the_runs_of_a_variant() -> None:
    """`official_reading` maps a paper experiment to the runs of another experiment's variant; a
    variant that does not exist is a config error naming the experiments that have variants."""
    from fedgmh.report.artifacts.paper import official_reading, official_run_dirs

    paper = Plan(load("config.yaml"), basedir=REPO)
    assert sorted(official_reading(paper)) == ["table2", "table5"]
    dirs = official_run_dirs(paper, "table2")
    official = [run for run in paper.runs if run.experiment == "table2_pflib" and run.variant == "official"]
    assert dirs == [run.run_dir for run in official] and all("@official/" in d for d in dirs)
    assert all(run.options.get("preset") == "official" for run in official)
    assert not set(dirs) & set(paper.experiment_run_dirs("table2"))
    with pytest.raises(ConfigError, match=r"official_reading.table2 'table2_pflib@pflib' is not an experiment's variant.*table2_pflib"):
        Plan(load("config.yaml", official_reading={"table2": "table2_pflib@pflib"}), basedir=REPO)
    with pytest.raises(ConfigError, match="official_reading.table2 'table2@official'"):
        Plan(load("config.yaml", official_reading={"table2": "table2@official"}), basedir=REPO)
    # an experiment the config does not have names no runs (a config trimmed to some experiments)
    assert official_reading(Plan(load("config.yaml", official_reading={"table2": "table9@official"}), basedir=REPO)) == {}


def test_train_batches_join_the_runs_of_a_setting_that_can_share_a_step() -> None:
    """config runs_per_job: the runs of one experiment, setting and float arithmetic, in config order, cut
    into batches of at most N and at least 2 (sizes differing by one at most); every run in one batch
    at most; 1 (the default) = no batch, one job per run."""
    assert Plan(load("smoke.yaml"), basedir=REPO).train_batches == []
    assert Plan(load("smoke.yaml", runs_per_job=1), basedir=REPO).train_batches == []
    smoke = Plan(load("smoke.yaml", runs_per_job=3), basedir=REPO)
    batches = smoke.train_batches
    order = list(smoke.train_jobs)
    members = [run.run_dir for batch in batches for run in batch]
    assert len(members) == len(set(members)) and set(members) <= set(order)
    assert members == sorted(members, key=order.index)  # config order
    for batch in batches:
        assert 2 <= len(batch) <= 3
        assert len({(run.experiment, run.setting, run.dataset, run.partition, run.rounds, run.local_epochs, run.join_ratio,
                     run.batch_size, run.lr) for run in batch}) == 1
    table2 = [[(run.algorithm, run.seed) for run in batch] for batch in batches if batch[0].experiment == "table2"]
    # 12 methods x 2 seeds = 24 runs of one setting: 8 batches of 3, an algorithm's seeds next to each other
    assert table2[:2] == [[("fedavg", 0), ("fedavg", 1), ("fedprox", 0)], [("fedprox", 1), ("ditto", 0), ("ditto", 1)]]
    assert len(table2) == 8
    # a setting of 7 runs: 3, 2, 2 (not 3, 3, 1); a lone run stays a job of its own
    assert [len(chunk) for chunk in plan.even_chunks(list(range(7)), 3)] == [3, 2, 2]
    alone = set(order) - set(members)
    assert all(sum(run.experiment == smoke.train_jobs[d].experiment and run.setting == smoke.train_jobs[d].setting
                   for run in smoke.train_jobs.values()) == 1 for d in alone)


def test_runs_of_other_float_arithmetic_are_not_batched_together() -> None:
    """`fedgmh train-group` refuses runs of different numerics or tf32: they go to different batches."""
    config = load("smoke.yaml", runs_per_job=4, algorithm_options={"fedavg": {"numerics": "pytorch"}})
    batches = Plan(config, basedir=REPO).train_batches
    table2 = [[run.algorithm for run in batch] for batch in batches if batch[0].experiment == "table2"]
    assert ["fedavg", "fedavg"] in table2 and not any("fedavg" in b and len(set(b)) > 1 for b in table2)


def test_a_batch_job_asks_for_its_runs_summed_runtime() -> None:
    smoke = Plan(load("smoke.yaml", runs_per_job=3), basedir=REPO)
    batch = smoke.train_batches[0]
    assert smoke.batch_runtime(batch) == sum(smoke.train_runtime(run) for run in batch)


def test_gpu_count_counts_the_driver_entries_cuda_visible_devices_leaves(tmp_path: Path) -> None:
    driver = tmp_path / "gpus"
    assert plan.gpu_count({}, driver) == 0 and plan.default_gpu_slots({"jobs_per_gpu": 4}, {}) >= 4
    for bus in ("0000:01:00.0", "0000:02:00.0", "0000:03:00.0"):
        (driver / bus).mkdir(parents=True)
    assert plan.gpu_count({}, driver) == 3
    assert plan.gpu_count({"CUDA_VISIBLE_DEVICES": "1"}, driver) == 1
    assert plan.gpu_count({"CUDA_VISIBLE_DEVICES": "-1"}, driver) == 0


def test_the_schema_gives_the_defaults_of_fedgmh_train_and_partition() -> None:
    """The workflow's defaults (the schema's) are the CLI's: a config that leaves a key out trains as
    `fedgmh train` / `fedgmh partition` without the flag (the CLI's from `TrainConfig`, tests/test_cli.py)."""
    import dataclasses

    from fedgmh.cli import build_parser
    from fedgmh.config import TrainConfig

    top = SCHEMA["properties"]
    train = {f.name: f.default for f in dataclasses.fields(TrainConfig)
             if f.default is not dataclasses.MISSING and f.name in top}
    assert set(train) >= {"join_ratio", "local_epochs", "batch_size", "lr", "device"}
    partition = vars(build_parser().parse_args(["partition", "--dataset", "digits", "--root", "r", "--clients", "2",
                                                "--classes-per-client", "1", "--alpha", "1", "--out", "o"]))
    cli = {**train, "train_ratio": partition["train_ratio"], "partition_seed": partition["seed"]}
    assert {key: top[key].get("default") for key in cli} == cli


def test_every_default_of_the_schema_is_of_a_top_level_key() -> None:
    """`with_defaults` fills in top-level keys only: a default deeper in the schema would be ignored."""
    def where_defaults(node: object, path: tuple = ()) -> list[tuple]:
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
        return [found for key, value in items for found in ([path] if key == "default" else []) + where_defaults(value, (*path, key))]

    found = where_defaults(SCHEMA)
    assert found and all(len(path) == 2 and path[0] == "properties" for path in found), found
