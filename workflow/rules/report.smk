# Results: aggregate the runs of each experiment, then LaTeX tables (+ CSV) and accuracy curves.


rule aggregate:
    input:
        records=lambda wildcards: [f"{d}/run.json" for d in experiment_run_dirs(wildcards.experiment)],
        metrics=lambda wildcards: [f"{d}/metrics.csv" for d in experiment_run_dirs(wildcards.experiment)],
    output:
        results=f"{RESULTS}/aggregate/{{experiment}}.results.csv",
        curves=f"{RESULTS}/aggregate/{{experiment}}.curves.csv",
    log:
        f"{LOGS}/report/aggregate_{{experiment}}.log",
    params:
        run_dirs=lambda wildcards: " ".join(shlex.quote(d) for d in experiment_run_dirs(wildcards.experiment)),
    shell:
        "fedgmh aggregate --experiment {wildcards.experiment} --runs {params.run_dirs}"
        " --out {output.results} --curves {output.curves} > {log} 2>&1"


rule table:
    input:
        results=rules.aggregate.output.results,
        reference=[config["reference_tables"]] if config["reference_tables"] else [],
    output:
        tex=f"{ARTIFACTS}/{{experiment}}.tex",
        csv=f"{ARTIFACTS}/{{experiment}}.csv",
        cells=f"{ARTIFACTS}/{{experiment}}.cells.csv",
    log:
        f"{LOGS}/report/table_{{experiment}}.log",
    params:
        title=lambda wildcards: shlex.quote(config["experiments"][wildcards.experiment].get("title", wildcards.experiment)),
        reference=lambda wildcards, input: f"--reference {shlex.quote(input.reference[0])}" if input.reference else "",
    shell:
        "fedgmh table --results {input.results} --experiment {wildcards.experiment} --title {params.title}"
        " --out {output.tex} --csv {output.csv} --cells {output.cells} {params.reference} > {log} 2>&1"


rule curves:
    input:
        curves=lambda wildcards: expand(rules.aggregate.output.curves, experiment=config["figures"][wildcards.figure]["experiment"]),
    output:
        pdf=f"{ARTIFACTS}/{{figure}}.pdf",
        png=f"{ARTIFACTS}/{{figure}}.png",
    log:
        f"{LOGS}/report/curves_{{figure}}.log",
    params:
        experiment=lambda wildcards: config["figures"][wildcards.figure]["experiment"],
        setting=lambda wildcards: shlex.quote(config["figures"][wildcards.figure]["setting"]),
        algorithms=lambda wildcards: (
            "--algorithm " + " ".join(config["figures"][wildcards.figure]["algorithms"])
            if config["figures"][wildcards.figure].get("algorithms")
            else ""
        ),
    shell:
        "fedgmh curves --curves {input.curves} --experiment {params.experiment} --setting {params.setting}"
        " {params.algorithms} --out {output.pdf} --png {output.png} > {log} 2>&1"


rule all_tables:
    """The LaTeX tables (and CSVs) of every configured experiment."""
    input:
        expand(rules.table.output, experiment=list(config["experiments"])),


rule all_figures:
    """The accuracy-per-round figures listed under `figures` in the config."""
    input:
        expand(rules.curves.output, figure=list(config["figures"])),
