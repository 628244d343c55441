"""The paper against the runs: every cell of its tables next to ours, and its claims with a verdict."""

from __future__ import annotations

import functools

from fedgmh.errors import ConfigError, UserError
from fedgmh.report.artifact import Artifact, Entry, Output, aggregated, every, need, official, one, switched_on


def _entry(caption: str, category: str, file: str) -> Entry:
    return Entry(caption=caption, category=category, labels={"file": file})


COMPARISON = "Comparison with the paper"


def _write_comparison(inputs, outputs, params) -> str:
    from fedgmh import report
    from fedgmh.report.compare import STATUSES

    out, other = need(outputs, "md"), every(inputs, "other")
    comparison = report.write_comparison(every(inputs, "results"), need(inputs, "reference"), out, out_tex=one(outputs, "tex"),
                                         out_csv=one(outputs, "csv"), reading="paper", other_paths=other,
                                         out_other_csv=one(outputs, "other"), margin=params["margin"], alpha=params["alpha"])
    counts = comparison["status"].value_counts()
    tally = ", ".join(f"{counts.get(status, 0)} {status}" for status in STATUSES)
    return (f"compare: {len(comparison)} paper cells (paper reading): {tally} -> {out}"
            + (f"; other documents' values from {', '.join(other)}" if other else ""))


COMPARE = Artifact(
    name="compare",
    kind="table",
    switch="reference_tables",
    outputs={
        "md": Output("comparison.md", _entry("comparison.rst", COMPARISON, "comparison.md")),
        "tex": Output("comparison.tex"),
        "csv": Output("comparison.csv", _entry("comparison.rst", COMPARISON, "comparison.csv")),
        "other": Output("comparison_other.csv", when=lambda plan: bool(plan.other_references)),
    },
    inputs=lambda plan, _: {"results": [aggregated(plan, name) for name in plan.config["experiments"]],
                            "reference": [plan.reference] if plan.reference else [], "other": list(plan.other_references)},
    params=lambda plan, _: {"margin": float(plan.config["comparison_margin"]), "alpha": float(plan.config["comparison_alpha"])},
    instances=switched_on(lambda plan: plan.reference),
    document="tex",
    rank=4,
    write=_write_comparison,
)

CLAIMS = "The paper's claims"


def _write_claims(inputs, outputs, params) -> str:
    from fedgmh.report.claims_readings import write_claims
    from fedgmh.report.claims_report import READING_NAMES, counts_text

    out = need(outputs, "md")
    readings, csvs = {"paper": (every(inputs, "results"), every(inputs, "curves"))}, {"paper": need(outputs, "csv")}
    if one(outputs, "official_csv"):
        readings["official"] = (every(inputs, "official_results"), every(inputs, "official_curves"))
        csvs["official"] = one(outputs, "official_csv")
    frames = write_claims(need(inputs, "claims"), readings, out, csvs, title=params["title"], datasets_unavailable=[],
                          costs=one(inputs, "costs"))
    return "\n".join(f"claims, {READING_NAMES[reading]}: {counts_text(frame)} -> {out}, {csvs[reading]}"
                     for reading, frame in frames.items())


@functools.cache
def claim_experiments(plan) -> list[str]:
    """The config's experiments that the claims read (in config order): the claims rule's inputs."""
    from fedgmh.report.claim_file import read_claims

    if not plan.claims:
        return []
    try:
        wanted = set().union(*(claim.experiments() for claim in read_claims(plan.claims)))
    except UserError as err:
        raise ConfigError(f"config: paper_claims: {err}") from None
    return [name for name in plan.config["experiments"] if name in wanted]


@functools.cache
def official_reading(plan) -> dict[str, tuple[str, str]]:
    """Config `official_reading`: paper experiment -> (experiment, variant) of its runs under PFLlib's reading;
    like `clients_figure`, an experiment the config does not have names none."""
    reading, experiments = {}, plan.config["experiments"]
    for paper_experiment, source in (plan.config.get("official_reading") or {}).items():
        experiment, variant = source.split("@", 1)
        if experiment not in experiments:
            continue
        if variant not in (experiments[experiment].get("variants") or {}):
            raise ConfigError(f"config: official_reading.{paper_experiment} {source!r} is not an experiment's variant; "
                              f"experiments with variants: {', '.join(k for k, v in experiments.items() if v.get('variants')) or 'none'}")
        reading[paper_experiment] = (experiment, variant)
    return reading


def official_run_dirs(plan, paper_experiment: str) -> list[str]:
    """Run directories of the runs that stand for `paper_experiment` under PFLlib's reading (config `official_reading`)."""
    experiment, variant = official_reading(plan)[paper_experiment]
    return [run.run_dir for run in plan.runs if run.experiment == experiment and run.variant == variant]


def _check_claims(plan) -> None:
    official_reading(plan)
    claim_experiments(plan)


def _claims_inputs(plan, _) -> dict[str, list[str]]:
    readings = sorted(official_reading(plan))  # paper experiments with runs under PFLlib's reading
    return {
        "claims": [plan.claims] if plan.claims else [],
        "results": [aggregated(plan, name) for name in claim_experiments(plan)],
        "curves": [aggregated(plan, name, "curves") for name in claim_experiments(plan)],
        "costs": [f"{plan.artifacts}/costs.csv"],
        "official_results": [official(plan, name) for name in readings],
        "official_curves": [official(plan, name, "curves") for name in readings],
    }


CLAIMS_ARTIFACT = Artifact(
    name="claims",
    kind="table",
    switch="paper_claims",
    outputs={
        "md": Output("claims.md", _entry("claims.rst", CLAIMS, "claims.md")),
        "csv": Output("claims.csv", _entry("claims.rst", CLAIMS, "claims.csv")),
        "official_csv": Output("claims_pflib.csv", _entry("claims.rst", CLAIMS, "claims_pflib.csv"),
                               when=lambda plan: bool(official_reading(plan))),
    },
    inputs=_claims_inputs,
    params=lambda plan, _: {"title": f"The paper's claims on the runs of config {plan.name}"},
    instances=switched_on(lambda plan: plan.claims),
    check=_check_claims,
    write=_write_claims,
)

ARTIFACTS = (COMPARE, CLAIMS_ARTIFACT)
