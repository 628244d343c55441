"""The workflow's plan: a config checked and expanded into partitions and training runs, without torch.

The Snakemake rules (workflow/rules/*.smk) ask a `Plan` what to run and with which arguments; it
is built once per snakemake call, while the DAG is built, so it imports neither torch, pandas nor
the algorithm classes (names and options come from the algorithm cards, `fedgmh.cards`).

A run is (experiment, setting, algorithm, seed). Its setting id comes from
`fedgmh.filing.assign_setting_ids` (the same function names the columns of the tables):
<dataset>_c<C>_a<alpha>, plus _n<N> for a setting whose `clients` differ from the config's and
_chain for the chain class assignment (the partition's id is this much), plus a suffix per swept dimension (e.g. _e4 for local_epochs 4), plus
@<variant> for experiments with `variants` (rows of the audit tables: one option set each).
Identical runs requested by several experiments (same dataset, partition, algorithm, options,
rounds, epochs, join ratio and seed -- e.g. FedGMH in Table 2 and in the ablation Table 5) are
trained ONCE, in the folder of the first experiment (in config order) that asks for them; the
other experiments' tables read that folder. With config `runs_per_job` > 1, `Plan.train_batches` says
which trained runs one `fedgmh train-group` job trains together (the workflow's batch rules).

Everything that can be checked without data is checked when the plan is made (so a dry run
reports it), each problem as a `ConfigError` naming the config key: every run's options are
resolved exactly as `fedgmh train --set` will resolve them; every setting's ExDir parameters are
checked as `fedgmh partition` checks them (the datasets' sizes stand in for their labels) and its
class draw, which depends on partition_seed alone, is replayed; a join ratio must select a client;
names that become folders or command words are checked (no leading -, folder names short enough)
(`fedgmh.plan_checks`); the report keys are checked by the artifacts that read them
(`fedgmh.report.artifacts`). The sample draw of ExDir, which needs the labels, is checked by the
partition job.
"""

from __future__ import annotations

import functools
import math
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from fedgmh.cards import algorithm_names, resolve_options
from fedgmh.config import parse_overrides
from fedgmh.datasets import DATASETS
from fedgmh.errors import ConfigError, did_you_mean
from fedgmh.filing import assign_setting_ids, format_number, partition_id, run_subfolder
from fedgmh.gpu_slots import visible_devices
from fedgmh.plan_checks import check_folder_names, check_names, check_options, check_settings, inherited, set_text
from fedgmh.report.artifacts import artifacts
from fedgmh.runspec import RunSpec

#: what a training job asks of a cluster by default (profiles may override it): the largest peak
#: RSS among the committed records is 2511 MiB (run.json `memory.peak_rss_bytes`, MNIST, 200 rounds)
TRAIN_MEM_MB = 4000
#: CPU minutes per round and local epoch at 20 % participation, the slowest committed records
#: (run.json `wall_time_s`, a 2-core CPU running two jobs): MNIST ExDir(2, 0.5), 200 rounds,
#: E = 2: 7668 s; CIFAR-100 ExDir(5, 0.5), 8 rounds, E = 1: 626 s. Other datasets use the rate
#: of the one with their number of channels.
CPU_MINUTES_PER_ROUND_EPOCH = {1: 7668 / 60 / 400, 3: 626 / 60 / 8}
#: a training job's runtime at most, in minutes, when the runs use a GPU: the longest run of the paper
#: (CIFAR-100, 300 rounds) with margin; the CPU estimate above would ask a GPU queue for days
GPU_RUNTIME_MINUTES = 360


def schema_problems(config: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    """One line per key of `config` that the JSON schema rejects, saying which key and why
    (jsonschema's own text dumps the schema): every unknown key on a line of its own with the closest
    known one. A `$defs` entry marked `x-enum: registry` (the algorithm names) gets the names of the
    algorithm cards as its enum."""
    return _problem_lines(_schema_errors(config, schema, algorithm_names()))


def config_problems(config: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    """The workflow's check of a config, in place: the schema's defaults filled in (`with_defaults`),
    the text items of lists that the schema wants as numbers or booleans read as them (`snakemake
    --config seeds=[0,1,2]` gives '0', '1', '2'), then `schema_problems`' lines. The schema is walked
    once, and once more only when items were read (a number read may be out of range)."""
    with_defaults(config, schema)
    algorithms = algorithm_names()
    errors = _schema_errors(config, schema, algorithms)
    read = [error for error in errors if _list_item_as_text(error)]
    for error in read:
        *where, last = error.absolute_path
        target = config
        for step in where:
            target = target[step]
        target[last] = yaml.safe_load(error.instance)
    return _problem_lines(_schema_errors(config, schema, algorithms) if read else errors)


def _problem_lines(errors: list[Any]) -> list[str]:
    return [line for error in errors for line in (_unknown_keys(error) or [_describe(error)])]


def _unknown_keys(error: Any) -> list[str]:
    """'  path.key: unknown key (did you mean ...?)' for each key an `additionalProperties: false` refuses."""
    if error.validator != "additionalProperties" or error.validator_value is not False or not isinstance(error.instance, dict):
        return []
    known = error.schema.get("properties", {})
    patterns = error.schema.get("patternProperties", {})
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path).lstrip(".")
    return [f"  {where + '.' if where else ''}{key}: unknown key{did_you_mean(str(key), known)}"
            for key in error.instance if key not in known and not any(re.search(p, str(key)) for p in patterns)]


def _list_item_as_text(error: Any) -> bool:
    """Whether a schema error is a list item that is text but reads as the number or boolean the schema
    wants, as `snakemake --config key=[...]` gives it."""
    if error.validator != "type" or not isinstance(error.instance, str) or not error.absolute_path \
            or not isinstance(error.absolute_path[-1], int):
        return False
    try:
        wanted = yaml.safe_load(error.instance)
    except yaml.YAMLError:
        return False
    return isinstance(wanted, (int, float)) and error.validator_value in ("integer", "number") or \
        isinstance(wanted, bool) and error.validator_value == "boolean"


def _schema_errors(config: dict[str, Any], schema: dict[str, Any], algorithms: list[str]) -> list[Any]:
    import jsonschema

    schema = {**schema, "$defs": {name: {**spec, "enum": algorithms} if spec.get("x-enum") == "registry" else spec
                                  for name, spec in schema.get("$defs", {}).items()}}
    validator = jsonschema.Draft202012Validator(schema)
    return sorted(validator.iter_errors(config), key=lambda e: list(map(str, e.absolute_path)))


def _describe(error: Any) -> str:
    """'  key.path: why' for one jsonschema error."""
    while error.validator in ("anyOf", "oneOf") and error.context:  # e.g. a variant: options or null
        error = max(error.context, key=lambda e: len(e.absolute_path))  # the alternative that got furthest
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path).lstrip(".")
    message = error.message
    if error.validator == "pattern" and "x-message" in error.schema:  # the schema's own advice for this key
        message = f"{error.instance!r} is not allowed: {error.schema['x-message']}"
    if error.validator == "maxLength":  # without the (long) value itself
        message = f"{len(error.instance)} characters long; at most {error.validator_value}"
    wanted = error.validator_value if error.validator == "type" else None
    if (wanted == "array" or isinstance(wanted, list) and "array" in wanted) and where and not isinstance(error.instance, (dict, list)):
        items = ",".join(part.strip() for part in str(error.instance).split(","))
        message += f" (a list is written in brackets: {where.rsplit('.', 1)[-1]}=[{items}])"
    return f"  {where or '(top level)'}: {message}"


def gpu_visible() -> bool:
    """Whether this machine has an NVIDIA GPU that CUDA_VISIBLE_DEVICES does not hide, told without
    importing torch (the driver's /proc entries or device files)."""
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
    if hidden is not None and hidden.strip() in ("", "-1"):
        return False
    gpus = Path("/proc/driver/nvidia/gpus")
    return (gpus.is_dir() and any(gpus.iterdir())) or any(Path("/dev").glob("nvidia[0-9]*"))


def gpu_count(env: Mapping[str, str] | None = None, driver: Path = Path("/proc/driver/nvidia/gpus")) -> int:
    """How many NVIDIA GPUs this machine shows (the driver's /proc entries), as CUDA_VISIBLE_DEVICES limits
    them, told without importing torch; 0 without a driver entry."""
    shown = len(list(driver.iterdir())) if driver.is_dir() else 0
    visible = visible_devices(env)
    return shown if visible is None else min(shown, len(visible))


def default_gpu_slots(config: dict[str, Any], env: Mapping[str, str] | None = None) -> int:
    """The training jobs at once on a GPU machine when `--resources gpu=N` is not given: the GPUs x
    `jobs_per_gpu` (at least one GPU: device cuda names one even where none shows)."""
    return max(1, gpu_count(env)) * int(config.get("jobs_per_gpu", 1))


@dataclass(frozen=True)
class Run:
    """One training run of an experiment; `run_dir` is where it is trained (another experiment's
    folder when that experiment asks for the same run first: then `owner` is False)."""

    experiment: str
    variant: str
    setting: str
    dataset: str
    classes_per_client: int
    alpha: float
    clients: int
    assignment: str
    train_ratio: float
    partition_seed: int
    algorithm: str
    rounds: int
    local_epochs: int
    join_ratio: float
    batch_size: int
    lr: float
    options: dict[str, Any] = field(hash=False)
    seed: int
    partition: str
    run_dir: str
    owner: bool

    @functools.cached_property
    def spec(self) -> RunSpec:
        """What the run is, its partition's data unknown (`RunSpec.from_run`): runs with equal specs are
        trained once, and the train rule's params carry it, so an edit of the config that changes it
        makes Snakemake train the run again. Where it is filed (experiment, variant, setting id, folder)
        is not part of it."""
        return RunSpec.from_run(self)


class Plan:
    """The runs, partitions and paths of one config (validated against the schema, defaults filled in)."""

    def __init__(self, config: dict[str, Any], basedir: Path | str = ".") -> None:
        self.config = config
        self.name = str(config["name"])
        check_names(config)
        self.data = config["data_root"].rstrip("/")
        self.results, self.logs, self.artifacts = f"results/{self.name}", f"logs/{self.name}", f"paper_artifacts/{self.name}"
        check_finite(config)
        check_settings(config)
        self._checked_options: set[tuple] = set()
        self.runs = self._expand()
        check_folder_names(self.runs)
        #: the runs that are trained, by their run directory
        self.train_jobs = {run.run_dir: run for run in self.runs if run.owner}
        self.partitions = {run.partition: run for run in self.runs}
        self.datasets = sorted({run.dataset for run in self.runs})
        self.reference = self._reference_path(Path(basedir))
        self.claims = self._find_file("paper_claims", config["paper_claims"], Path(basedir)) if config.get("paper_claims") else None
        self.other_references = [self._find_file(f"other_references[{i}]", path, Path(basedir))
                                 for i, path in enumerate(config.get("other_references") or [])]
        #: the report keys of the config, checked by the artifacts that read them (fedgmh.report.artifacts)
        self.rounds_to_target = config.get("rounds_to_target") or {}
        self.uploads_to_target = config.get("uploads_to_target") or {}
        self.layer_weights = config.get("layer_weights") or {}
        for artifact in artifacts().values():
            artifact.check(self)
        #: whether some setting has its own number of clients (then `fedgmh aggregate` is told the config's)
        self.own_clients = any(run.clients != int(config["clients"]) for run in self.runs)
        self.uses_gpu = self._uses_gpu()

    # ----------------------------------------------------------------------------- checks

    def partition_job(self, partition: str) -> Run:
        """A run of the partition with this id (file name), whose fields give `fedgmh partition` its
        parameters (a ConfigError when the config has no such partition)."""
        if partition not in self.partitions:
            raise ConfigError(
                f"partition {partition!r} is not one of config {self.name!r}; its partitions: {', '.join(self.partitions) or 'none'}"
            )
        return self.partitions[partition]

    def partition_arguments(self, partition: str) -> list[str]:
        """`--clients N --classes-per-client C --alpha A`, plus `--assignment chain` for a chain partition."""
        run = self.partition_job(partition)
        words = ["--clients", str(run.clients), "--classes-per-client", str(run.classes_per_client), "--alpha", format_number(run.alpha)]
        return words + (["--assignment", run.assignment] if run.assignment != "random" else [])

    def _reference_path(self, basedir: Path) -> str | None:
        """config `reference_tables`: as given, else (a relative path missing in the working directory)
        next to the Snakefile (`basedir`), i.e. in the repository; None when null."""
        path = self.config.get("reference_tables")
        if not path:
            return None
        return self._find_file("reference_tables", path, basedir)

    @staticmethod
    def _find_file(key: str, path: str, basedir: Path) -> str:
        """A file the config names: as given, else (a relative path missing in the working directory) next to the Snakefile."""
        if not os.path.isabs(path) and not os.path.exists(path) and (basedir / path).exists():
            return str(basedir / path)
        if not os.path.exists(path):
            raise ConfigError(f"config: {key} {path!r} not found (neither in the working directory nor in {basedir})")
        return path

    @property
    def device_problem(self) -> str | None:
        """Why this machine cannot train the config's jobs itself: device cuda[:N] and no GPU visible here.
        None when it can. Not an error while planning: a dry run, or a cluster's login node sending the jobs
        to GPU nodes, is fine; the workflow stops a local run with it before the first job."""
        device = self.config["device"]
        if not device.startswith("cuda") or gpu_visible():
            return None
        return (f"config: device is {device!r}, but this machine shows no GPU (no NVIDIA driver entry, or CUDA_VISIBLE_DEVICES "
                "hides them), so training jobs run here would fail: use device cpu or auto, or run the workflow where its jobs "
                "reach a GPU (on a GPU machine, or with a cluster executor)")

    def _uses_gpu(self) -> bool:
        """Whether training jobs occupy a GPU: device cuda[:N], or auto on a machine with a GPU."""
        device = self.config["device"]
        return device.startswith("cuda") or (device == "auto" and gpu_visible())

    # ----------------------------------------------------------------------------- the runs

    def _options_for(self, exp_name: str, experiment: dict, index: int, setting: dict, algorithm: str, variant: str,
                     variant_options: dict) -> tuple[dict[str, Any], dict[str, str]]:
        """--set pairs of one run: train_options < algorithm_options < experiment options < setting options < variant,
        and for each key the config key it came from (for error messages)."""
        layers = [
            ("train_options", self.config.get("train_options") or {}),
            (f"algorithm_options.{algorithm}", (self.config.get("algorithm_options") or {}).get(algorithm) or {}),
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

    def _cells(self, exp_name: str, exp: dict) -> Iterator[dict[str, Any]]:
        """Every (setting, variant, algorithm) of an experiment, in config order, its options checked."""
        config = self.config
        variants = exp.get("variants") or {"": {}}  # an experiment without `variants` is one unnamed variant
        for index, setting in enumerate(exp["settings"]):
            for variant, variant_options in variants.items():
                for algorithm in exp["algorithms"]:
                    options, sources = self._options_for(exp_name, exp, index, setting, algorithm, variant, variant_options or {})
                    check_options(algorithm, options, sources, exp_name, self._checked_options)
                    yield {
                        "experiment": exp_name,
                        "variant": variant,
                        "dataset": setting["dataset"],
                        "classes_per_client": int(setting["classes_per_client"]),
                        "alpha": setting["alpha"],
                        "clients": int(setting.get("clients", config["clients"])),
                        "assignment": setting.get("assignment", "random"),
                        "train_ratio": config["train_ratio"],
                        "partition_seed": config["partition_seed"],
                        "algorithm": algorithm,
                        "rounds": int(setting.get("rounds", config["rounds"])),
                        "local_epochs": int(inherited(self.config, setting, exp, "local_epochs")[0]),
                        "join_ratio": inherited(self.config, setting, exp, "join_ratio")[0],
                        "batch_size": int(inherited(self.config, setting, exp, "batch_size")[0]),
                        "lr": inherited(self.config, setting, exp, "lr")[0],
                        "options": options,
                    }

    def _expand(self) -> list[Run]:
        runs = []  # every (experiment, setting, algorithm, seed), in config order
        owner: dict[RunSpec, str] = {}  # what decides a run's results -> the run directory it is trained in
        for exp_name, exp in self.config["experiments"].items():
            cells = list(self._cells(exp_name, exp))
            seen = set()
            for cell, sid in zip(cells, assign_setting_ids(cells, default_clients=self.config["clients"])):
                if (sid, cell["algorithm"]) in seen:
                    raise ConfigError(
                        f"config: experiment {exp_name!r} lists the same setting twice ({sid}, algorithm {cell['algorithm']}); "
                        "remove the duplicate or make the settings differ"
                    )
                seen.add((sid, cell["algorithm"]))
                cell.update(setting=sid, partition=partition_id(cell["dataset"], cell["classes_per_client"], cell["alpha"], cell["clients"],
                                                                self.config["clients"], cell["assignment"]))
            for cell in cells:
                for seed in exp.get("seeds", self.config["seeds"]):
                    own_dir = self.run_dir(exp_name, cell["setting"], cell["algorithm"], seed)
                    run = Run(**cell, seed=int(seed), run_dir=own_dir, owner=True)
                    run_dir = owner.setdefault(run.spec, own_dir)
                    runs.append(replace(run, run_dir=run_dir, owner=run_dir == own_dir))
        return runs

    # ----------------------------------------------------------------------------- what the rules ask

    def run_dir(self, experiment: str, setting: str, algorithm: str, seed: int | str) -> str:
        return f"{self.results}/runs/{run_subfolder(experiment, setting, algorithm, seed)}"

    def train_job(self, experiment: str, setting: str, algorithm: str, seed: int | str) -> Run:
        """The run trained in this folder (a ConfigError if none is: not a run, or trained in another experiment's folder)."""
        run_dir = self.run_dir(experiment, setting, algorithm, seed)
        if run_dir not in self.train_jobs:
            raise ConfigError(
                f"{run_dir} is not a run of config {self.name!r} (or it is trained in another experiment's folder); "
                "ask for a table or figure target instead"
            )
        return self.train_jobs[run_dir]

    def experiment_run_dirs(self, experiment: str) -> list[str]:
        """Run directories (possibly another experiment's) of every run of `experiment`, in config order."""
        dirs = [run.run_dir for run in self.runs if run.experiment == experiment]
        if not dirs:
            raise ConfigError(f"no experiment {experiment!r} in the config; experiments: {', '.join(self.config['experiments'])}")
        return dirs

    def variant_arguments(self, experiment: str) -> list[str]:
        """`--variant NAME ...` for `fedgmh aggregate` (one per run, aligned with the run directories), or []."""
        names = [run.variant for run in self.runs if run.experiment == experiment]
        return ["--variant", *names] if any(names) else []

    def experiment_key(self, key: str) -> str | None:
        """The experiment a config key such as `clients_figure` names, or None when it names none of this config's."""
        value = self.config.get(key)
        return value if value in self.config["experiments"] else None

    def stored_markers(self) -> list[str]:
        """The marker file of every trained run whose record is put into paper_artifacts/<name>/runs."""
        return [self.stored_marker(run_dir) for run_dir in self.train_jobs]

    def stored_marker(self, run_dir: str) -> str:
        """The marker file saying that the record of the run trained in `run_dir` is in the store."""
        return f"{self.results}/stored/{os.path.relpath(run_dir, f'{self.results}/runs')}.done"

    def record_destination(self, run: Run) -> str:
        """Where the run's record is committed: paper_artifacts/<name>/runs/<the run folder's path below results/<name>/runs>."""
        return f"{self.artifacts}/runs/{os.path.relpath(run.run_dir, f'{self.results}/runs')}"

    @property
    def train_device(self) -> str:
        """--device of training jobs: on a GPU machine (device cuda or auto) `cuda:auto`, which locks a free
        GPU slot for the whole run (fedgmh.gpu_slots); an explicit cuda:N, cpu, or auto on a CPU machine as is."""
        return "cuda:auto" if self.config["device"] in ("cuda", "auto") and self.uses_gpu else self.config["device"]

    @property
    def gpu_resources(self) -> dict[str, int]:
        """What a training job declares of the resource `gpu`: one unit on a GPU machine (`--resources gpu=N`
        then bounds the concurrent training jobs, N = GPUs x jobs_per_gpu), nothing on a CPU machine."""
        return {"gpu": 1} if self.uses_gpu else {}

    def train_runtime(self, run: Run) -> int:
        """A training job's runtime in minutes for a cluster's scheduler (profiles may override it): twice
        the CPU estimate from the measured rates (CPU_MINUTES_PER_ROUND_EPOCH), at least 10; when the runs
        use a GPU, which is faster, at most GPU_RUNTIME_MINUTES."""
        rate = CPU_MINUTES_PER_ROUND_EPOCH[DATASETS[run.dataset].channels]
        minutes = max(10, math.ceil(2 * rate * run.rounds * run.local_epochs * run.join_ratio / 0.2))
        return min(minutes, GPU_RUNTIME_MINUTES) if self.uses_gpu else minutes

    @functools.cached_property
    def train_batches(self) -> list[list[Run]]:
        """The trained runs that one `fedgmh train-group` job trains together (config `runs_per_job` > 1),
        each batch a list of at least two runs, in config order; every other run is a job of its own.

        A batch holds runs of one experiment and setting (so one data set, partition, rounds, epochs, join
        ratio, batch size and learning rate: their steps can be joined, and its runs differ by algorithm and
        seed) and one float arithmetic (`train-group` refuses to mix them). Such runs, in config order (an
        algorithm's seeds next to each other), are cut into the fewest batches of at most `runs_per_job`,
        of sizes that differ by one at most (7 runs at 3 a job: 3, 2, 2)."""
        size = int(self.config.get("runs_per_job", 1))
        if size < 2:
            return []
        shared: dict[tuple, list[Run]] = {}
        for run in self.train_jobs.values():
            shared.setdefault(self._step_key(run), []).append(run)
        return [batch for runs in shared.values() for batch in even_chunks(runs, size) if len(batch) > 1]

    def _step_key(self, run: Run) -> tuple:
        """What runs trained in one batch must share: experiment, setting, and float arithmetic (engine
        options numerics and tf32, as the run's --set pairs resolve them)."""
        pairs = tuple(f"{k}={set_text(v)}" for k, v in sorted(run.options.items()))
        return run.experiment, run.setting, *float_arithmetic(run.algorithm, pairs)

    def batch_files(self, index: int, batch: list[Run]) -> tuple[str, str]:
        """(log, runs file) of the job training batch `index` of `train_batches` (`fedgmh train-group`)."""
        folder = f"{self.logs}/train/{batch[0].experiment}/{batch[0].setting}"
        return f"{folder}/batch{index}.log", f"{folder}/batch{index}.runs"

    def batch_runtime(self, batch: list[Run]) -> int:
        """A batch job's runtime in minutes: the sum of its runs' (`train_runtime`). Its runs share one
        process (threads under one interpreter lock) and wait for each other every step, so at worst they
        take as long as one after the other; a limit that is too short would stop all of them."""
        return sum(self.train_runtime(run) for run in batch)

    def train_words(self, run: Run, partition: str, threads: int) -> list[str]:
        """`train_arguments` and the record's `--put-record` destination: a run's words in a batch's
        runs file (`fedgmh train-group`) and after `fedgmh train` where there is no Snakemake."""
        return [*self.train_arguments(run, partition, threads), "--put-record", self.record_destination(run)]

    def lays_out_channels_last(self, run: Run) -> bool:
        """Config `cpu_channels_last`: a run of 3-channel images trained on a CPU (where that layout is faster),
        its layout not chosen by its options. An execution option: the run's spec is the same."""
        return (self.config["cpu_channels_last"] and not self.uses_gpu and DATASETS[run.dataset].channels == 3
                and "memory_format" not in run.options)

    def train_arguments(self, run: Run, partition: str, threads: int) -> list[str]:
        """The arguments of `fedgmh train` for `run` (words, each quoted by the rule), the workflow's
        labels of the run (`--experiment`, ...: recorded in run.json) included."""
        config = self.config
        words = ["--dataset", run.dataset, "--root", self.data, "--partition", partition, "--algorithm", run.algorithm,
                 "--rounds", str(run.rounds), "--join-ratio", format_number(run.join_ratio), "--local-epochs", str(run.local_epochs),
                 "--batch-size", str(run.batch_size), "--lr", format_number(run.lr), "--seed", str(run.seed),
                 "--device", self.train_device]
        if self.train_device == "cuda:auto":
            words += ["--jobs-per-gpu", str(config["jobs_per_gpu"])]
        words += ["--threads", str(threads)]
        if config.get("checkpoint_every") is not None:
            words += ["--checkpoint-every", str(config["checkpoint_every"])]
        for key, value in sorted(run.options.items()):
            words += ["--set", f"{key}={set_text(value)}"]
        if self.lays_out_channels_last(run):
            words += ["--set", "memory_format=channels_last"]
        for folder in config["stores"]:
            words += ["--store", folder]
        # --overwrite: Snakemake decided the folder's run must be made (its outputs are already removed); the
        # run there is replaced, a stored record of this run is still reused (train rule, params.run)
        words += ["--out", run.run_dir, "--overwrite", "--config-name", self.name, "--experiment", run.experiment,
                  "--setting", run.setting]
        return words + (["--variant", run.variant] if run.variant else [])


def with_defaults(config: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """`config` with the schema's defaults filled in where a key is missing (all of them are
    top-level keys': tests/test_plan.py)."""
    import copy

    for key, spec in schema["properties"].items():
        if "default" in spec:
            config.setdefault(key, copy.deepcopy(spec["default"]))
    return config


@functools.lru_cache(maxsize=None)
def float_arithmetic(algorithm: str, pairs: tuple[str, ...]) -> tuple[str, bool]:
    """Engine options numerics and tf32 of a run of `algorithm` with these --set pairs."""
    _, engine = resolve_options(algorithm, parse_overrides(list(pairs)))
    return engine.numerics, engine.tf32


def even_chunks(items: list, size: int) -> list[list]:
    """`items` in order, cut into the fewest chunks of at most `size` items whose lengths differ by one at most."""
    if not items:
        return []
    count = math.ceil(len(items) / size)
    base, longer = divmod(len(items), count)
    chunks, start = [], 0
    for index in range(count):
        end = start + base + (index < longer)
        chunks.append(items[start:end])
        start = end
    return chunks


def check_finite(value: Any, key: str = "config") -> None:
    """NaN or infinity anywhere in the config (YAML's .nan, .inf) would train nonsense: refuse it."""
    if isinstance(value, dict):
        for name, item in value.items():
            check_finite(item, f"{key}.{name}" if key != "config" else str(name))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            check_finite(item, f"{key}[{index}]")
    elif isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"config: {key} is {value}; every number must be finite")
