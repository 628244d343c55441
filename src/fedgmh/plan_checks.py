"""The plan's checks of a config's runs, each problem a `ConfigError` naming the config key (`fedgmh.plan`).

Names that become folders or command words; every setting's ExDir parameters and class draw, as
`fedgmh partition` checks them (the datasets' sizes standing in for their labels); a join ratio that
selects a client; every run's options, resolved as `fedgmh train --set` resolves them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from fedgmh import partition
from fedgmh.cards import resolve_options
from fedgmh.config import parse_overrides, selects_a_client
from fedgmh.datasets import DATASETS
from fedgmh.errors import ConfigError, UserError
from fedgmh.filing import format_number

#: `name` is one folder under results/, logs/ and paper_artifacts/: never "..", a path or an option
NAME_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
#: a variant's name ends setting ids and is a word of `fedgmh train --variant` / `fedgmh aggregate --variant`: never an option
VARIANT_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.=+-]*")
#: the longest config name and variant name (as the schema's maxLength), so that every folder name stays short
MAX_NAME_CHARS = 64
#: the longest folder name file systems allow (bytes)
MAX_FOLDER_NAME_BYTES = 255


def set_text(value: Any) -> str:
    """A config option value as `fedgmh train --set` receives it (booleans as true/false; floats keep their '.0')."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def check_names(config: dict[str, Any]) -> None:
    """The config's name and its variants' names (the schema says the same; this keeps the rules safe regardless)."""
    name = str(config["name"])
    if len(name) > MAX_NAME_CHARS:
        raise ConfigError(f"config: name is {len(name)} characters long; at most {MAX_NAME_CHARS} (it names folders)")
    if not NAME_PATTERN.fullmatch(name):
        raise ConfigError(
            f"config: name {name!r} is not allowed: outputs go to results/<name>/, so use one folder name of "
            "letters, digits and _ . - that does not start with . or - (e.g. smoke, paper, mini_v2)"
        )
    for exp_name, exp in config["experiments"].items():
        for variant in exp.get("variants") or {}:
            if not VARIANT_PATTERN.fullmatch(variant) or len(variant) > MAX_NAME_CHARS:
                raise ConfigError(
                    f"config: experiments.{exp_name}.variants: {variant!r} is not allowed: a variant's name ends setting ids "
                    f"and is a command word, so use up to {MAX_NAME_CHARS} letters, digits and _ . = + - that do not "
                    "start with . = + or -"
                )


def check_folder_names(runs: list) -> None:
    """Every folder name of a run directory fits the file system (long experiment ids, option values or variants)."""
    for run in runs:
        for part in Path(run.run_dir).parts:
            if len(part.encode()) > MAX_FOLDER_NAME_BYTES:
                raise ConfigError(
                    f"config: experiment {run.experiment[:40]!r}: the folder name {part[:40]!r}... of its runs is "
                    f"{len(part.encode())} bytes long; file systems allow at most {MAX_FOLDER_NAME_BYTES}: shorten what it "
                    "is made of (the experiment id, the setting's swept options, the variant)"
                )


def check_settings(config: dict[str, Any]) -> None:
    """Every setting's ExDir parameters must be drawable (`check_partition`; N: the setting's `clients`,
    else the config's), and a round must select a client: N x join_ratio >= 1."""
    drawable: set[tuple] = set()  # ExDir class draws found drawable (one per partition shape)
    for exp_name, exp in config["experiments"].items():
        for index, setting in enumerate(exp["settings"]):
            where = f"experiments.{exp_name}.settings[{index}]"
            clients_key = f"{where}.clients" if "clients" in setting else "clients"
            clients = int(setting.get("clients", config["clients"]))
            join_ratio, join_key = inherited(config, setting, exp, "join_ratio", where, f"experiments.{exp_name}")
            if not selects_a_client(clients, join_ratio):
                raise ConfigError(
                    f"config: {join_key} ({format_number(join_ratio)}) x {clients_key} ({clients}) < 1: a round would select "
                    f"no client (`fedgmh train` refuses it); use a join_ratio of at least 1/{clients}"
                )
            check_partition(config, where, clients_key, setting, clients, drawable)


def check_partition(config: dict[str, Any], where: str, clients_key: str, setting: dict, clients: int, drawable: set[tuple]) -> None:
    """What `fedgmh partition` would refuse of a setting, without its data: the parameters
    (`partition.check_parameters`, the dataset's size standing in for its labels) and ExDir's class
    draw, replayed from partition_seed (`partition.class_holders`)."""
    info, classes, alpha = DATASETS[setting["dataset"]], int(setting["classes_per_client"]), setting["alpha"]
    assignment, train_ratio = setting.get("assignment", "random"), config["train_ratio"]
    named = {"clients": f"{clients_key} ({clients})", "classes_per_client": f"{where}.classes_per_client ({classes})",
             "alpha": f"{where}.alpha ({format_number(alpha)})", "train_ratio": f"train_ratio ({format_number(train_ratio)})",
             "assignment": f"{where}.assignment ({assignment})"}
    try:
        partition.check_parameters(info.num_samples, info.num_classes, clients, classes, alpha, train_ratio, assignment,
                                   named=named, dataset=setting["dataset"])
    except partition.PartitionError as err:
        raise ConfigError(f"config: {err}") from None
    draw = (info.num_classes, clients, classes, assignment)
    seed = config["partition_seed"]
    if draw not in drawable:
        try:
            partition.class_holders(np.random.RandomState(seed), clients, info.num_classes, classes, assignment)
        except partition.PartitionError as err:
            raise ConfigError(
                f"config: {where}: ExDir({classes}, {format_number(alpha)}) of {info.name} over {clients_key} = {clients} clients "
                f"cannot be drawn with partition_seed {seed}: {err}"
            ) from None
    drawable.add(draw)


def inherited(config: dict[str, Any], setting: dict, experiment: dict, key: str, where: str = "setting",
               exp_where: str = "experiment") -> tuple[Any, str]:
    """A setting's value of `key` (its own, else its experiment's, else the config's) and the config key it came
    from (`where`: the setting's, `exp_where`: its experiment's)."""
    if key in setting:
        return setting[key], f"{where}.{key}"
    if key in experiment:
        return experiment[key], f"{exp_where}.{key}"
    return config[key], key


def check_options(algorithm: str, options: dict[str, Any], sources: dict[str, str], exp_name: str, checked: set[tuple]) -> None:
    """Resolve one run's options as `fedgmh train` will (same strings, same resolver): a bad key or
    value stops the workflow now, naming the config key it came from."""

    def resolve(keys: list[str]) -> None:
        resolve_options(algorithm, parse_overrides([f"{k}={set_text(options[k])}" for k in keys]))

    signature = (algorithm, tuple(sorted((k, set_text(v)) for k, v in options.items())))
    if signature in checked:
        return
    try:
        resolve(sorted(options))
    except UserError as err:
        # name the first key that is wrong on its own (with the run's preset, which acts first)
        for key in options:
            try:
                resolve([key] + (["preset"] if "preset" in options and key != "preset" else []))
            except UserError as alone:
                raise ConfigError(
                    f"config: {sources[key]} = {options[key]!r} is not valid for {algorithm} "
                    f"(a run of experiment {exp_name}); change or remove it: {alone}"
                ) from None
        raise ConfigError(
            f"config: the options {', '.join(sources[k] for k in sorted(options))} do not go together for {algorithm} "
            f"(a run of experiment {exp_name}); change one of them: {err}"
        ) from None
    checked.add(signature)
