"""A report artifact (a table, figure or document under paper_artifacts/<name>/) declared once.

An `Artifact` says everything the workflow and the CLI need of one kind of output: its files and
their entries in Snakemake's HTML report, the config key that switches it on, its inputs and params
as functions of the `Plan`, the config checks it needs, and `write`, which calls the report module
directly. The modules of `fedgmh.report.artifacts` declare them (`ARTIFACTS` lists) and
`artifacts()` collects them as `fedgmh.cards` collects the algorithm cards; report.smk makes one
rule of each (docs/artifacts.md, "Adding a table"). No pandas here: the workflow reads the
declarations while it builds its DAG, and `write` imports what it draws with.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: a `fedgmh.plan.Plan` (not imported: the plan imports the artifacts to run their checks)
Plan = Any
KINDS = ("table", "figure", "document")
#: a rule's named inputs or outputs: each a list of paths (one path, none, or several)
Files = Mapping[str, list[str]]


@dataclass(frozen=True)
class Entry:
    """An output's entry in `snakemake --report`: its caption (a file of workflow/report/), category and labels."""

    caption: str
    category: str
    labels: Mapping[str, str]
    subcategory: str | None = None


@dataclass(frozen=True)
class Output:
    """One output file, under paper_artifacts/<name>/ (`{experiment}` / `{figure}`: the artifact's wildcard)."""

    path: str
    entry: Entry | None = None
    #: whether the plan makes this file at all (None: always)
    when: Callable[[Plan], bool] | None = None


def _no_params(plan: Plan, instance: str) -> dict[str, Any]:
    return {}


def _no_check(plan: Plan) -> None:
    return None


def _one(plan: Plan) -> list[str]:
    return [""]


@dataclass(frozen=True)
class Artifact:
    """One kind of report output: the rule report.smk makes of it and the `write` the rule calls."""

    name: str
    kind: str
    outputs: Mapping[str, Output]
    #: the named inputs of one instance (the wildcard's value, "" without a wildcard)
    inputs: Callable[[Plan, str], dict[str, list[str]]]
    #: writes the outputs and returns the line the job logs; or its 'module:function', imported only when a
    #: job runs it, for a write that needs torch (the costs: the models' sizes), so this package stays off the torch side
    write: Callable[[Files, Files, Mapping[str, Any]], str] | str
    params: Callable[[Plan, str], dict[str, Any]] = _no_params
    #: `experiment` or `figure` for one output per experiment / figure; None: one output
    wildcard: str | None = None
    #: the wildcard values `all_tables` / `all_figures` ask for (without a wildcard: [""] when switched on, else [])
    instances: Callable[[Plan], list[str]] = _one
    #: whether the wildcard is held to `instances` (so that another rule's outputs are not taken for this one's)
    constrained: bool = False
    #: the config key that switches it on, if any (documentation: the rule is there either way)
    switch: str | None = None
    #: the config checks it needs, run when the plan is made (a ConfigError naming the key)
    check: Callable[[Plan], None] = _no_check
    #: the output that report_pdf puts into its document (None: none) and where (lower first)
    document: str | None = None
    rank: int = 0
    #: the document's caption of a figure instance (report_pdf)
    caption: Callable[[Plan, str], str] | None = None
    #: extra log files besides the job's own, by name (under logs/<name>/report/)
    logs: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"artifact {self.name}: kind {self.kind!r} is not one of {', '.join(KINDS)}")

    def run(self, inputs: Files, outputs: Files, params: Mapping[str, Any]) -> str:
        """Write the outputs (`write`) and return the line the job logs."""
        write = self.write
        if isinstance(write, str):
            module, function = write.split(":")
            write = getattr(importlib.import_module(module), function)
        return write(inputs, outputs, params)

    def instance(self, wildcards: Mapping[str, str]) -> str:
        """The instance a job of the rule makes: its wildcard's value ("" without a wildcard)."""
        return wildcards[self.wildcard] if self.wildcard else ""

    def rule_outputs(self, plan: Plan, marked: Callable[..., Any]) -> dict[str, Any]:
        """The outputs as the rule declares them: each with its report entry, if any, through `marked`
        (Snakemake's `report`; a caption's path is relative to workflow/rules/)."""
        return {name: path if (entry := self.outputs[name].entry) is None
                else marked(path, caption=f"../report/{entry.caption}", category=entry.category, subcategory=entry.subcategory,
                            labels=dict(entry.labels))
                for name, path in self.output_paths(plan).items()}

    def job(self, plan: Plan, wildcards: Mapping[str, str], inputs: Mapping[str, Any], outputs: Mapping[str, Any]) -> str:
        """What `fedgmh artifact` hands to `write`, as JSON: a job's named inputs and outputs, and its params."""
        def files(named: Mapping[str, Any]) -> dict[str, list[str]]:
            return {name: [str(value)] if isinstance(value, str) else [str(v) for v in value] for name, value in named.items()}

        return json.dumps({"input": files(inputs), "output": files(outputs), "params": self.params(plan, self.instance(wildcards))})

    def log(self, logs: str) -> str:
        """The job's log file under the config's logs folder."""
        return f"{logs}/report/{self.name}{'_{' + self.wildcard + '}' if self.wildcard else ''}.log"

    def output_paths(self, plan: Plan) -> dict[str, str]:
        """Each output the plan makes, by name: its path with the wildcard still in braces."""
        return {name: f"{plan.artifacts}/{out.path}" for name, out in self.outputs.items() if out.when is None or out.when(plan)}

    def file(self, plan: Plan, output: str, instance: str = "") -> str:
        """One output file of one instance."""
        path = self.output_paths(plan)[output]
        return path.replace("{" + self.wildcard + "}", instance) if self.wildcard else path

    def files(self, plan: Plan, instance: str = "") -> list[str]:
        """The output files of one instance."""
        return [self.file(plan, output, instance) for output in self.output_paths(plan)]

    def all_files(self, plan: Plan) -> list[str]:
        """The output files of every instance the plan asks for (`all_tables` / `all_figures`)."""
        return [path for instance in self.instances(plan) for path in self.files(plan, instance)]


def aggregated(plan: Plan, experiment: str, table: str = "results") -> str:
    """The aggregate of an experiment's runs (rule aggregate): `results` or `curves`."""
    return f"{plan.results}/aggregate/{experiment}.{table}.csv"


def official(plan: Plan, experiment: str, table: str = "results") -> str:
    """The aggregate of the runs of PFLlib's reading of a paper experiment (rule aggregate_official)."""
    return f"{plan.results}/aggregate_official/{experiment}.{table}.csv"


def one(files: Files, name: str) -> str | None:
    """The one path of a named input or output, None when it has none."""
    paths = files.get(name) or []
    return paths[0] if paths else None


def need(files: Files, name: str) -> str:
    """The one path of a named input or output the artifact cannot do without: a UserError when the job has none."""
    from fedgmh.errors import UserError

    path = one(files, name)
    if path is None:
        raise UserError(f"--job gives no {name!r} path")
    return path


def every(files: Files, name: str) -> list[str]:
    """The paths of a named input or output, [] when it has none."""
    return list(files.get(name) or [])


def title(plan: Plan, experiment: str) -> str:
    """An experiment's title (config `experiments.<name>.title`, else its name)."""
    return plan.config["experiments"][experiment].get("title", experiment)


def switched_on(value: Any) -> Callable[[Plan], list[str]]:
    """`instances` of an artifact without a wildcard made when `value(plan)` is set."""
    return lambda plan: [""] if value(plan) else []
