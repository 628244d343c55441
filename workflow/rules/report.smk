# Results: aggregate the runs of each experiment, then the report artifacts (fedgmh.report.artifacts):
# LaTeX tables (and CSV), figures, the comparison with the paper and the paper's claims, one rule
# each, made in the loop below from their declarations (docs/artifacts.md, "Adding a table"). Outputs
# with a report entry go into `snakemake --report results/<name>/report.html` (captions:
# workflow/report/*.rst). `report_pdf` puts every table and figure into one LaTeX document and
# compiles it (needs a TeX engine, so it is not part of `all`). Every rule here is a local rule:
# quick, and on a cluster it runs where snakemake runs.

from fedgmh.report.artifacts import artifacts, of_kind
from fedgmh.report.artifacts.paper import official_run_dirs


rule aggregate:
    input:
        records=lambda wildcards: [f"{d}/run.json" for d in PLAN.experiment_run_dirs(wildcards.experiment)],
        metrics=lambda wildcards: [f"{d}/metrics.csv" for d in PLAN.experiment_run_dirs(wildcards.experiment)],
    output:
        results=f"{RESULTS}/aggregate/{{experiment}}.results.csv",
        curves=f"{RESULTS}/aggregate/{{experiment}}.curves.csv",
    log:
        f"{LOGS}/report/aggregate_{{experiment}}.log",
    localrule: True
    params:
        run_dirs=lambda wildcards: PLAN.experiment_run_dirs(wildcards.experiment),
        # what decides the setting ids besides the runs: their variants, and the config's clients for the
        # _n<N> part (only needed, so only given, when some setting has clients of its own)
        labels=lambda wildcards: PLAN.variant_arguments(wildcards.experiment)
        + (["--clients", str(config["clients"])] if PLAN.own_clients else []),
    shell:
        "fedgmh aggregate --experiment {wildcards.experiment:q} --runs {params.run_dirs:q} {params.labels:q}"
        " --out {output.results:q} --curves {output.curves:q} > {log:q} 2>&1"


rule aggregate_official:
    """The runs of PFLlib's reading of a paper experiment (config `official_reading`), filed under the
    paper experiment's name, their accuracies over the rounds the official code evaluates."""
    input:
        records=lambda wildcards: [f"{d}/run.json" for d in official_run_dirs(PLAN, wildcards.experiment)],
        metrics=lambda wildcards: [f"{d}/metrics.csv" for d in official_run_dirs(PLAN, wildcards.experiment)],
    output:
        results=f"{RESULTS}/aggregate_official/{{experiment}}.results.csv",
        curves=f"{RESULTS}/aggregate_official/{{experiment}}.curves.csv",
    log:
        f"{LOGS}/report/aggregate_official_{{experiment}}.log",
    localrule: True
    params:
        run_dirs=lambda wildcards: official_run_dirs(PLAN, wildcards.experiment),
        clients=["--clients", str(config["clients"])] if PLAN.own_clients else [],
    shell:
        "fedgmh aggregate --experiment {wildcards.experiment:q} --runs {params.run_dirs:q} --preset-evaluation"
        " {params.clients:q} --out {output.results:q} --curves {output.curves:q} > {log:q} 2>&1"


# one rule per artifact: its params (a function of the wildcards only) are what Snakemake's params
# trigger compares, so a config edit that changes them makes the artifact again
for _artifact in artifacts().values():

    rule:
        name:
            _artifact.name
        input:
            unpack(lambda wildcards, a=_artifact: a.inputs(PLAN, a.instance(wildcards))),
        output:
            **_artifact.rule_outputs(PLAN, report),
        log:
            _artifact.log(LOGS),
            **{name: f"{LOGS}/report/{file}" for name, file in _artifact.logs.items()},
        wildcard_constraints:
            **(
                {_artifact.wildcard: "|".join(re.escape(name) for name in _artifact.instances(PLAN)) or "(?!)"}
                if _artifact.constrained
                else {}
            ),
        localrule: True
        params:
            name=_artifact.name,
            values=lambda wildcards, a=_artifact: a.params(PLAN, a.instance(wildcards)),
            job=lambda wildcards, input, output, a=_artifact: a.job(PLAN, wildcards, input, output),
        shell:
            "fedgmh artifact {params.name} --job {params.job:q} > {log[0]:q} 2>&1"


rule all_tables:
    """The tables of every configured experiment, and those the config switches on (fedgmh.report.artifacts)."""
    input:
        [path for artifact in of_kind("table") for path in artifact.all_files(PLAN)],
        PLAN.stored_markers(),


rule all_figures:
    """The figures the config asks for (fedgmh.report.artifacts)."""
    input:
        [path for artifact in of_kind("figure") for path in artifact.all_files(PLAN)],
