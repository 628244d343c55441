# Helpers shared by the rules: paths of this config, and the experiment grid expanded into runs.
#
# A run is (experiment, setting, algorithm, seed). Its setting id comes from
# fedgmh.report.assign_setting_ids (the same function names the columns of the tables):
# <dataset>_c<C>_a<alpha>, plus a suffix per swept dimension (e.g. _e4 for local_epochs 4), plus
# @<variant> for experiments with `variants` (rows of the audit tables: one option set each).
# Identical runs requested by several experiments (same dataset, partition, algorithm, options,
# rounds, epochs, join ratio and seed -- e.g. FedGMH in Table 2 and in the ablation Table 5) are
# trained ONCE, in the folder of the first experiment (in config order) that asks for them; the
# other experiments' tables read that folder.
#
# Everything that can be checked without data is checked here, when the DAG is built (so a dry run
# reports it): every run's options are resolved exactly as `fedgmh train --set` will resolve them,
# and every setting's classes_per_client is compared with its dataset's number of classes.
#
# Shell commands: every value and path goes through Snakemake's `{x:q}` (shlex quoting, element by
# element for lists); params that are optional flags are lists of words (`["--title", title]` or
# `[]`), so they are quoted the same way.

import json
import math
import os
import re

from fedgmh.config import parse_overrides
from fedgmh.data import DATASETS as DATASET_INFO
from fedgmh.errors import UserError
from fedgmh.report import assign_setting_ids, format_number
from fedgmh.algorithms import resolve_options  # imports torch: a few seconds per snakemake call

NAME = config["name"]
# `name` is one folder under results/, logs/ and paper_artifacts/: never "..", a path or an option
# (the schema says the same; this keeps the rules safe whatever validated the config)
if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", str(NAME)):
    raise WorkflowError(
        f"config: name {NAME!r} is not allowed: outputs go to results/<name>/, so use one folder name of "
        "letters, digits and _ . - that does not start with . or - (e.g. smoke, paper, mini_v2)"
    )
DATA = config["data_root"].rstrip("/")
RESULTS = f"results/{NAME}"
LOGS = f"logs/{NAME}"
ARTIFACTS = f"paper_artifacts/{NAME}"


wildcard_constraints:
    dataset="[a-z0-9_]+?",
    C="[0-9]+",
    alpha="[0-9][0-9.e+-]*",
    experiment="[a-z][a-z0-9_]*",
    setting="[^/]+",
    algorithm="[a-z][a-z0-9_]*",
    seed="[0-9]+",
    figure="[A-Za-z0-9_.-]+",


def partition_id(dataset, classes_per_client, alpha):
    return f"{dataset}_c{int(classes_per_client)}_a{format_number(alpha)}"


def _check_settings():
    """ExDir(C, alpha) must be drawable: 1 <= C <= the dataset's classes, and N * C >= classes."""
    clients = config["clients"]
    for exp_name, exp in config["experiments"].items():
        for index, setting in enumerate(exp["settings"]):
            key = f"experiments.{exp_name}.settings[{index}].classes_per_client"
            classes, dataset = int(setting["classes_per_client"]), setting["dataset"]
            num_classes = DATASET_INFO[dataset].num_classes
            if classes > num_classes:
                raise WorkflowError(f"config: {key} is {classes}, but {dataset} has only {num_classes} classes; use 1..{num_classes}")
            if clients * classes < num_classes:
                raise WorkflowError(
                    f"config: clients ({clients}) x {key} ({classes}) < the {num_classes} classes of {dataset}, "
                    "so some class would belong to no client; raise clients or classes_per_client"
                )


_check_settings()


def _check_finite(value, key="config"):
    """NaN or infinity anywhere in the config (YAML's .nan, .inf) would train nonsense: refuse it."""
    if isinstance(value, dict):
        for name, item in value.items():
            _check_finite(item, f"{key}.{name}" if key != "config" else str(name))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_finite(item, f"{key}[{index}]")
    elif isinstance(value, float) and not math.isfinite(value):
        raise WorkflowError(f"config: {key} is {value}; every number must be finite")


_check_finite(config)


def _options_for(exp_name, experiment, index, setting, algorithm, variant, variant_options):
    """--set pairs of one run: train_options < algorithm_options < experiment options < setting options < variant,
    and for each key the config key it came from (for error messages)."""
    layers = [
        ("train_options", config.get("train_options") or {}),
        (f"algorithm_options.{algorithm}", (config.get("algorithm_options") or {}).get(algorithm) or {}),
        (f"experiments.{exp_name}.options.{algorithm}", (experiment.get("options") or {}).get(algorithm) or {}),
        (f"experiments.{exp_name}.settings[{index}].options", setting.get("options") or {}),
        (f"experiments.{exp_name}.variants.{variant}", variant_options),
    ]
    options, sources = {}, {}
    for where, values in layers:
        for key, value in values.items():
            options[key] = value
            sources[key] = f"{where}.{key}"
    return options, sources


def set_text(value):
    """A config option value as `fedgmh train --set` receives it (booleans as true/false; floats keep their '.0')."""
    return str(value).lower() if isinstance(value, bool) else str(value)


_CHECKED_OPTIONS = set()


def _check_options(algorithm, options, sources, exp_name):
    """Resolve one run's options as `fedgmh train` will (same strings, same resolver): a bad key or
    value stops the workflow now, naming the config key it came from."""

    def resolve(keys):
        resolve_options(algorithm, parse_overrides([f"{k}={set_text(options[k])}" for k in keys]))

    signature = (algorithm, tuple(sorted((k, set_text(v)) for k, v in options.items())))
    if signature in _CHECKED_OPTIONS:
        return
    try:
        resolve(sorted(options))
    except UserError as err:
        # name the first key that is wrong on its own (with the run's preset, which acts first)
        for key in options:
            try:
                resolve([key] + (["preset"] if "preset" in options and key != "preset" else []))
            except UserError as alone:
                raise WorkflowError(
                    f"config: {sources[key]} = {options[key]!r} is not valid for {algorithm} "
                    f"(a run of experiment {exp_name}); change or remove it: {alone}"
                ) from None
        raise WorkflowError(
            f"config: the options {', '.join(sources[k] for k in sorted(options))} do not go together for {algorithm} "
            f"(a run of experiment {exp_name}); change one of them: {err}"
        ) from None
    _CHECKED_OPTIONS.add(signature)


def _expand_experiments():
    runs = []  # every (experiment, setting, algorithm, seed), in config order
    owner = {}  # physical identity of a run -> its canonical run directory
    for exp_name, exp in config["experiments"].items():
        cells = []
        # an experiment without `variants` is one unnamed variant with no options
        variants = exp.get("variants") or {"": {}}
        for index, setting in enumerate(exp["settings"]):
            for variant, variant_options in variants.items():
                for algorithm in exp["algorithms"]:
                    options, sources = _options_for(exp_name, exp, index, setting, algorithm, variant, variant_options or {})
                    _check_options(algorithm, options, sources, exp_name)
                    cells.append(
                        {
                            "experiment": exp_name,
                            "variant": variant,
                            "dataset": setting["dataset"],
                            "classes_per_client": int(setting["classes_per_client"]),
                            "alpha": setting["alpha"],
                            "algorithm": algorithm,
                            "rounds": int(setting.get("rounds", config["rounds"])),
                            "local_epochs": int(setting.get("local_epochs", exp.get("local_epochs", config["local_epochs"]))),
                            "join_ratio": setting.get("join_ratio", exp.get("join_ratio", config["join_ratio"])),
                            "options": options,
                        }
                    )
        ids = assign_setting_ids(cells)
        seen = {}
        for cell, sid in zip(cells, ids):
            key = (sid, cell["algorithm"])
            if key in seen:
                raise WorkflowError(
                    f"config: experiment {exp_name!r} lists the same setting twice ({sid}, algorithm {cell['algorithm']}); "
                    "remove the duplicate or make the settings differ"
                )
            seen[key] = True
            cell["setting"] = sid
            cell["partition"] = partition_id(cell["dataset"], cell["classes_per_client"], cell["alpha"])
        for cell in cells:
            for seed in exp.get("seeds", config["seeds"]):
                run = dict(cell, seed=int(seed))
                identity = json.dumps(
                    {k: run[k] for k in ("dataset", "classes_per_client", "alpha", "algorithm", "rounds", "local_epochs", "join_ratio", "options", "seed")},
                    sort_keys=True,
                    default=str,
                )
                own_dir = f"{RESULTS}/runs/{exp_name}/{run['setting']}/{run['algorithm']}/seed{seed}"
                run["run_dir"] = owner.setdefault(identity, own_dir)
                run["owner"] = run["run_dir"] == own_dir
                runs.append(run)
    return runs


RUNS = _expand_experiments()
# the runs that are actually trained, by their (canonical) run directory
TRAIN_JOBS = {run["run_dir"]: run for run in RUNS if run["owner"]}
PARTITIONS = {run["partition"]: run for run in RUNS}
DATASETS = sorted({run["dataset"] for run in RUNS})


def _check_figures():
    for name, fig in config["figures"].items():
        exp = fig["experiment"]
        if exp not in config["experiments"]:
            raise WorkflowError(
                f"config: figures.{name}.experiment {exp!r} is not an experiment; experiments: {', '.join(config['experiments'])}"
            )
        settings = sorted({r["setting"] for r in RUNS if r["experiment"] == exp})
        if fig["setting"] not in settings:
            raise WorkflowError(
                f"config: figures.{name}.setting {fig['setting']!r} is not a setting of {exp}; its settings: {', '.join(settings)}"
            )
        unknown = set(fig.get("algorithms", [])) - set(config["experiments"][exp]["algorithms"])
        if unknown:
            raise WorkflowError(f"config: figures.{name}.algorithms {sorted(unknown)} are not run in {exp}")


_check_figures()


def experiment_run_dirs(experiment):
    """Run directories (canonical, possibly another experiment's) of every run of `experiment`."""
    dirs = [run["run_dir"] for run in RUNS if run["experiment"] == experiment]
    if not dirs:
        raise WorkflowError(f"no experiment {experiment!r} in the config; experiments: {', '.join(config['experiments'])}")
    return dirs


def experiment_variant_arguments(experiment):
    """`--variant NAME ...` for `fedgmh aggregate` (one per run, aligned with the run directories), or [] (words, for `:q`)."""
    names = [run["variant"] for run in RUNS if run["experiment"] == experiment]
    return ["--variant", *names] if any(names) else []


def reference_path():
    """config `reference_tables`: as given, else (a relative path missing in the working directory)
    next to the Snakefile, i.e. in the repository; None when null."""
    path = config.get("reference_tables")
    if not path:
        return None
    if not os.path.isabs(path) and not os.path.exists(path):
        in_repo = os.path.join(workflow.basedir, path)
        if os.path.exists(in_repo):
            return in_repo
    if not os.path.exists(path):
        raise WorkflowError(f"config: reference_tables {path!r} not found (neither in the working directory nor in {workflow.basedir})")
    return path


REFERENCE = reference_path()
ROUNDS_TO_TARGET = config.get("rounds_to_target") or {}


def _check_rounds_to_target():
    spec = ROUNDS_TO_TARGET
    if not spec:
        return
    figure = spec["figure"]
    if figure not in config["figures"]:
        raise WorkflowError(f"config: rounds_to_target.figure {figure!r} is not a figure; figures: {', '.join(config['figures']) or 'none'}")
    for algorithm, rounds in (spec.get("paper") or {}).items():
        if len(rounds) != len(spec["targets"]):
            raise WorkflowError(
                f"config: rounds_to_target.paper.{algorithm} has {len(rounds)} rounds for {len(spec['targets'])} targets"
            )


_check_rounds_to_target()


def train_job(wildcards):
    """The run to train in the folder named by these wildcards (a WorkflowError if it is not one)."""
    run_dir = f"{RESULTS}/runs/{wildcards.experiment}/{wildcards.setting}/{wildcards.algorithm}/seed{wildcards.seed}"
    if run_dir not in TRAIN_JOBS:
        raise WorkflowError(
            f"{run_dir} is not a run of config {NAME!r} (or it is trained in another experiment's folder); "
            "ask for a table or figure target instead"
        )
    return TRAIN_JOBS[run_dir]


def partition_of(wildcards):
    run = train_job(wildcards)
    return expand(
        rules.partition.output.partition,
        dataset=run["dataset"],
        C=run["classes_per_client"],
        alpha=format_number(run["alpha"]),
    )


def run_info_json(wildcards):
    """run_info.json: what the run's own record does not say (the partition and who owns the run)."""
    run = train_job(wildcards)
    info = {k: run[k] for k in ("experiment", "variant", "setting", "dataset", "classes_per_client", "alpha")}
    info.update(
        clients=config["clients"],
        train_ratio=config["train_ratio"],
        partition_seed=config["partition_seed"],
        partition=partition_of(wildcards)[0],
        config_name=NAME,
    )
    return json.dumps(info, sort_keys=True, default=str)


def run_records():
    """The markers of every trained run's record put into paper_artifacts/<name>/runs."""
    return [f"{RESULTS}/stored/{os.path.relpath(run_dir, f'{RESULTS}/runs')}.done" for run_dir in TRAIN_JOBS]


def set_arguments(options):
    """`--set key=value ...` for fedgmh train, as a list of words (for `:q`)."""
    words = []
    for key, value in sorted(options.items()):
        words += ["--set", f"{key}={set_text(value)}"]
    return words


def uses_gpu():
    """Whether training jobs occupy a GPU: device cuda[:N], or auto on a machine where torch sees one."""
    device = config["device"]
    if device.startswith("cuda"):
        return True
    if device == "cpu":
        return False
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:
        return False


# Every training job on a GPU machine declares one unit of the resource `gpu`, so `--resources
# gpu=N` bounds the number of concurrent training jobs (N = GPUs x jobs_per_gpu); on a CPU machine
# the training rule declares no gpu resource at all.
TRAIN_RESOURCES = {"gpu": 1} if uses_gpu() else {}
# ... and each of those N jobs takes a GPU slot: `--device cuda:auto --jobs-per-gpu J` locks a free
# slot (fedgmh.gpu_slots: J per GPU, the emptiest GPU first) for the whole run. An explicit cuda:N,
# cpu, or auto on a CPU machine is passed as is (no slots).
TRAIN_DEVICE = "cuda:auto" if config["device"] in ("cuda", "auto") and TRAIN_RESOURCES else config["device"]
TRAIN_SLOTS = ["--jobs-per-gpu", str(config["jobs_per_gpu"])] if TRAIN_DEVICE == "cuda:auto" else []
