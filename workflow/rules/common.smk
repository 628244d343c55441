# The config, checked, and its plan: which partitions and training runs the rules make, and with
# which arguments (fedgmh.plan, unit-tested in tests/test_plan.py; it imports no torch, so building
# the DAG stays fast).
#
# The config is validated against workflow/schemas/config.schema.yaml (which also gives the
# defaults), then everything that can be checked without data is checked by the plan (options
# resolved exactly as `fedgmh train --set` resolves them, ExDir settings against the datasets'
# classes, figure and table references), so a dry run reports every problem, naming the config key.
#
# Shell commands: every value and path goes through Snakemake's `{x:q}` (shlex quoting, element by
# element for lists); params that are optional flags are lists of words (`["--layer", layer]` or
# `[]`), so they are quoted the same way. Free text (titles, a layer's name) is one word with its flag,
# `--title={params.title:q}` or `[f"--title={title}"]`, so that a title such as `-h` is a value, not an option.

import json
import os
import re
import shlex
import sys

import yaml
from snakemake.exceptions import WorkflowError
from snakemake.logging import logger as snakemake_logger

from fedgmh import warm
from fedgmh.campaign import SNAPSHOT, run_order
from fedgmh.errors import UserError
from fedgmh.filing import PARTITION_WILDCARD, format_number
from fedgmh.plan import TRAIN_MEM_MB, Plan, config_problems, default_gpu_slots
from fedgmh.snakemake_locks import hold_alive, record_own_locks
from fedgmh.stop_summary import StopSummary

# Held for this Snakemake's life (in its working folder): a campaign removes a lock that a killed
# Snakemake left only while no Snakemake holds it (fedgmh.snakemake_locks).
ALIVE_LOCK = hold_alive()

with open(workflow.current_basedir.join("../schemas/config.schema.yaml").get_path_or_uri(secret_free=True)) as _schema:
    # defaults filled in, --config's text items read, then every problem key by key (also algorithm names against the registry)
    _problems = config_problems(config, yaml.safe_load(_schema))
if _problems:
    raise WorkflowError("invalid configuration (see config/README.md for every key):\n" + "\n".join(_problems))

try:
    PLAN = Plan(config, basedir=workflow.basedir)
except UserError as _err:
    raise WorkflowError(str(_err)) from None

NAME, DATA, RESULTS, LOGS, ARTIFACTS = PLAN.name, PLAN.data, PLAN.results, PLAN.logs, PLAN.artifacts

# A local run on a GPU machine without `--resources gpu=N`: N = the GPUs x jobs_per_gpu, so that
# `snakemake all_tables --cores 8` never starts more training jobs than the GPUs' slots.
if PLAN.uses_gpu and workflow.local_exec and "gpu" not in workflow.global_resources:
    workflow.register_resource("gpu", default_gpu_slots(config))
    print(
        f"training jobs at once: {default_gpu_slots(config)} (GPUs x jobs_per_gpu; --resources gpu=N after the target sets N)",
        file=sys.stderr,
    )

# device cuda on a machine without a GPU: a warning while planning (a dry run, or a cluster's login node whose
# executor sends the training jobs to GPU nodes), an error before the first job of a run on this machine
if PLAN.device_problem:
    print(f"warning: {PLAN.device_problem}", file=sys.stderr)


# config warm_train: the training jobs of a local CPU run ask one warm server (fedgmh.warm: torch
# imported once, a forked process per run) to run them, instead of importing torch in each process.
# Still one job per run; a job that finds no server trains in its own process. The server exits
# with Snakemake even when no hook runs (Ctrl-C, Snakemake killed), removing its socket and folder.
WARM_SERVER = []

# Ctrl-C: the stopped jobs' error reports stay off the terminal, and `onerror` prints one line instead (fedgmh.stop_summary)
STOP_SUMMARY = StopSummary()
STOP_SUMMARY.install(snakemake_logger)


onstart:
    if config.get("campaign"):  # this call's lock files, which a campaign may remove once it is gone
        record_own_locks(getattr(workflow.persistence, "_lockfile", {}).values())
    if PLAN.device_problem and workflow.local_exec:
        raise WorkflowError(PLAN.device_problem)
    if config["warm_train"] and workflow.local_exec and warm.served(config["device"]):
        WARM_SERVER.extend(warm.start(f"{LOGS}/warm-server.log"))
        os.environ[warm.SOCKET_VARIABLE] = WARM_SERVER[1]


onsuccess:
    if WARM_SERVER:
        warm.shut_down(*WARM_SERVER)


onerror:
    if WARM_SERVER:
        warm.shut_down(*WARM_SERVER)
    if STOP_SUMMARY.stopping:
        print(STOP_SUMMARY.summary(LOGS), file=sys.stderr)


wildcard_constraints:
    dataset="[a-z0-9_]+?",
    partition=PARTITION_WILDCARD,
    experiment="[a-z][a-z0-9_]*",
    setting="[^/]+",
    algorithm="[a-z][a-z0-9_]*",
    seed="[0-9]+",
    figure="[A-Za-z0-9_.-]+",


def train_job(wildcards):
    """The run to train in the folder named by these wildcards (a WorkflowError if it is not one)."""
    try:
        return PLAN.train_job(wildcards.experiment, wildcards.setting, wildcards.algorithm, wildcards.seed)
    except UserError as err:
        raise WorkflowError(str(err)) from None


# config campaign (`fedgmh campaign run` sets it): its runs' folders, each with its rank (the first run ranks highest)
CAMPAIGN_RANKS = {f"{RESULTS}/runs/{name}": rank for rank, name in enumerate(reversed(run_order(config["campaign"])), 1)}


def train_priority(wildcards):
    """Which training jobs Snakemake starts first when it can start only some: a run with a snapshot
    (cut off earlier: its hours of work go on instead of waiting, or being lost with a leased machine),
    then a campaign's runs in the campaign's order, then the rest."""
    return run_priority(PLAN.run_dir(wildcards.experiment, wildcards.setting, wildcards.algorithm, wildcards.seed))


def run_priority(run_dir):
    """The priority of the training job of the run in `run_dir` (`train_priority`)."""
    cut_off = os.path.exists(f"{run_dir}/{SNAPSHOT}")
    return CAMPAIGN_RANKS.get(run_dir, 0) + (len(CAMPAIGN_RANKS) + 1 if cut_off else 0)


def batch_lines(batch):
    """The runs file of a batch job, one `fedgmh train` argument line per run; a function of `input` and
    `threads`, so that Snakemake's params trigger ignores it (as rule train's `arguments`)."""

    def lines(wildcards, input, threads):
        return [shlex.join(PLAN.train_words(run, input.partition, threads)) for run in batch]

    return lines


def batch_priority(batch):
    """A batch job's priority: its most urgent run's (train_priority)."""
    return lambda wildcards: max(run_priority(run.run_dir) for run in batch)


def partition_job(wildcards):
    """A run of the partition named by the wildcard `partition`: its dataset and parameters (a WorkflowError if the config has none)."""
    try:
        return PLAN.partition_job(wildcards.partition)
    except UserError as err:
        raise WorkflowError(str(err)) from None


def partition_of(wildcards):
    return expand(rules.partition.output.partition, partition=train_job(wildcards).partition)
