# Results: aggregate the runs of each experiment, then LaTeX tables (and CSV), accuracy curves, the
# rounds-to-target table and the comparison with the paper. Outputs marked with report(...) go into
# `snakemake --report report.html` (captions: workflow/report/*.rst). `report_pdf` puts every table
# and figure into one LaTeX document and compiles it (needs a TeX engine, so it is not part of `all`).
# Every rule here is a local rule: quick, and on a cluster it runs where snakemake runs.

# the experiments whose per-client accuracy is drawn, whose runs' bytes go into costs.csv and whose
# controls are summarised (config `clients_figure`, `costs_runs`, `controls_summary`); None: no such output
CLIENTS_FIGURE = PLAN.experiment_key("clients_figure")
COSTS_RUNS = PLAN.experiment_key("costs_runs")
CONTROLS = PLAN.experiment_key("controls_summary")
REFERENCE = PLAN.reference
ROUNDS_TO_TARGET = PLAN.rounds_to_target


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
        variants=lambda wildcards: PLAN.variant_arguments(wildcards.experiment),
    shell:
        "fedgmh aggregate --experiment {wildcards.experiment:q} --runs {params.run_dirs:q} {params.variants:q}"
        " --out {output.results:q} --curves {output.curves:q} > {log:q} 2>&1"


rule table:
    input:
        results=rules.aggregate.output.results,
        reference=[REFERENCE] if REFERENCE else [],
    output:
        tex=report(f"{ARTIFACTS}/{{experiment}}.tex", caption="../report/table.rst", category="Tables",
                   subcategory="{experiment}", labels={"table": "{experiment}", "format": "LaTeX"}),
        csv=report(f"{ARTIFACTS}/{{experiment}}.csv", caption="../report/table.rst", category="Tables",
                   subcategory="{experiment}", labels={"table": "{experiment}", "format": "CSV"}),
        cells=f"{ARTIFACTS}/{{experiment}}.cells.csv",
    log:
        f"{LOGS}/report/table_{{experiment}}.log",
    localrule: True
    params:
        title=lambda wildcards: config["experiments"][wildcards.experiment].get("title", wildcards.experiment),
        reference=lambda wildcards, input: ["--reference", input.reference[0]] if input.reference else [],
        accuracy=config["table_accuracy"],
    shell:
        "fedgmh table --results {input.results:q} --experiment {wildcards.experiment:q} --title {params.title:q}"
        " --accuracy {params.accuracy:q} --out {output.tex:q} --csv {output.csv:q} --cells {output.cells:q}"
        " {params.reference:q} > {log:q} 2>&1"


rule curves:
    wildcard_constraints:
        figure="|".join(re.escape(name) for name in config["figures"]) or "(?!)",  # not client_accuracy
    input:
        curves=lambda wildcards: expand(rules.aggregate.output.curves, experiment=config["figures"][wildcards.figure]["experiment"]),
    output:
        pdf=f"{ARTIFACTS}/{{figure}}.pdf",
        png=report(f"{ARTIFACTS}/{{figure}}.png", caption="../report/figure.rst", category="Figures",
                   labels={"figure": "{figure}"}),
    log:
        f"{LOGS}/report/curves_{{figure}}.log",
    localrule: True
    params:
        experiment=lambda wildcards: config["figures"][wildcards.figure]["experiment"],
        setting=lambda wildcards: config["figures"][wildcards.figure]["setting"],
        algorithms=lambda wildcards: (
            ["--algorithm", *config["figures"][wildcards.figure]["algorithms"]]
            if config["figures"][wildcards.figure].get("algorithms")
            else []
        ),
        title=lambda wildcards: (
            ["--title", config["figures"][wildcards.figure]["title"]] if config["figures"][wildcards.figure].get("title") else []
        ),
    shell:
        "fedgmh curves --curves {input.curves:q} --experiment {params.experiment:q} --setting {params.setting:q}"
        " {params.algorithms:q} {params.title:q} --out {output.pdf:q} --png {output.png:q} > {log:q} 2>&1"


rule client_accuracy:
    """Per-client test accuracy per method and setting (box plots) of experiment `clients_figure`,
    from the runs' clients.csv; runs recorded without one are named in the figure."""
    input:
        results=lambda wildcards: expand(rules.aggregate.output.results, experiment=CLIENTS_FIGURE),
    output:
        pdf=f"{ARTIFACTS}/client_accuracy.pdf",
        png=report(f"{ARTIFACTS}/client_accuracy.png", caption="../report/clients.rst", category="Figures",
                   labels={"figure": "client accuracy"}),
        csv=f"{ARTIFACTS}/client_accuracy.csv",
    log:
        f"{LOGS}/report/client_accuracy.log",
    localrule: True
    params:
        experiment=CLIENTS_FIGURE,
        round="best" if config["table_accuracy"] == "best" else "last",
        title=lambda wildcards: f"Per-client test accuracy: {config['experiments'][CLIENTS_FIGURE].get('title', CLIENTS_FIGURE)}",
    shell:
        "fedgmh clients --results {input.results:q} --experiment {params.experiment:q} --round {params.round:q}"
        " --title {params.title:q} --out {output.pdf:q} --png {output.png:q} --csv {output.csv:q} > {log:q} 2>&1"


rule rounds_to_target:
    input:
        curves=lambda wildcards: expand(rules.aggregate.output.curves, experiment=config["figures"][ROUNDS_TO_TARGET["figure"]]["experiment"]),
    output:
        tex=report(f"{ARTIFACTS}/rounds_to_target.tex", caption="../report/rounds.rst", category="Tables",
                   subcategory="rounds to target", labels={"table": "rounds to target", "format": "LaTeX"}),
        csv=report(f"{ARTIFACTS}/rounds_to_target.csv", caption="../report/rounds.rst", category="Tables",
                   subcategory="rounds to target", labels={"table": "rounds to target", "format": "CSV"}),
    log:
        f"{LOGS}/report/rounds_to_target.log",
    localrule: True
    params:
        experiment=lambda wildcards: config["figures"][ROUNDS_TO_TARGET["figure"]]["experiment"],
        setting=lambda wildcards: config["figures"][ROUNDS_TO_TARGET["figure"]]["setting"],
        targets=[format_number(t) for t in ROUNDS_TO_TARGET.get("targets", [])],
        paper=json.dumps(ROUNDS_TO_TARGET.get("paper") or {}),
    shell:
        "fedgmh rounds --curves {input.curves:q} --experiment {params.experiment:q} --setting {params.setting:q}"
        " --target {params.targets:q} --paper {params.paper:q} --out {output.tex:q} --csv {output.csv:q} > {log:q} 2>&1"


rule compare:
    input:
        results=expand(rules.aggregate.output.results, experiment=list(config["experiments"])),
        reference=[REFERENCE] if REFERENCE else [],
    output:
        md=report(f"{ARTIFACTS}/comparison.md", caption="../report/comparison.rst", category="Comparison with the paper",
                  labels={"file": "comparison.md"}),
        tex=f"{ARTIFACTS}/comparison.tex",
        csv=report(f"{ARTIFACTS}/comparison.csv", caption="../report/comparison.rst", category="Comparison with the paper",
                   labels={"file": "comparison.csv"}),
    log:
        f"{LOGS}/report/compare.log",
    localrule: True
    shell:
        "fedgmh compare --results {input.results:q} --reference {input.reference:q} --out {output.md:q}"
        " --tex {output.tex:q} --csv {output.csv:q} > {log:q} 2>&1"


rule costs:
    """Section 2.3: storage and communication from the actual model (mnist, cifar10, cifar100),
    next to the bytes measured in the runs of experiment `costs_runs` (Table 2's: every algorithm
    counts what it sends)."""
    input:
        records=[f"{d}/run.json" for d in PLAN.experiment_run_dirs(COSTS_RUNS)] if COSTS_RUNS else [],
    output:
        csv=report(f"{ARTIFACTS}/costs.csv", caption="../report/costs.rst", category="Tables",
                   subcategory="costs", labels={"table": "costs", "format": "CSV"}),
        tex=report(f"{ARTIFACTS}/costs.tex", caption="../report/costs.rst", category="Tables",
                   subcategory="costs", labels={"table": "costs", "format": "LaTeX"}),
    log:
        f"{LOGS}/report/costs.log",
    localrule: True
    params:
        runs=lambda wildcards, input: ["--runs", *(os.path.dirname(r) for r in input.records)] if input.records else [],
    shell:
        "fedgmh costs --out {output.csv:q} --tex {output.tex:q} {params.runs:q} > {log:q} 2>&1"


rule controls_summary:
    """The controls experiment (config `controls_summary`) read as shares: how much of each
    method's gain over FedAvg the label set alone explains, next to what the label distribution
    predicts with no model."""
    input:
        results=lambda wildcards: expand(rules.aggregate.output.results, experiment=CONTROLS),
        stats=lambda wildcards: sorted({f"{RESULTS}/partitions/{run.partition}.stats.csv" for run in PLAN.runs if run.experiment == CONTROLS}),
    output:
        md=report(f"{ARTIFACTS}/controls_summary.md", caption="../report/controls.rst", category="Tables",
                  subcategory="controls", labels={"table": "controls summary", "format": "Markdown"}),
        csv=f"{ARTIFACTS}/controls_summary.csv",
    log:
        f"{LOGS}/report/controls_summary.log",
    localrule: True
    params:
        title=lambda wildcards: config["experiments"][CONTROLS].get("title", CONTROLS),
    shell:
        "fedgmh controls --results {input.results:q} --stats {input.stats:q} --out {output.md:q} --csv {output.csv:q}"
        " --title {params.title:q} > {log:q} 2>&1"


rule all_tables:
    """The LaTeX tables (and CSVs) of every configured experiment, the rounds-to-target table
    (config `rounds_to_target`) and the comparison with the paper (config `reference_tables`)."""
    input:
        expand(rules.table.output, experiment=list(config["experiments"])),
        rules.rounds_to_target.output if ROUNDS_TO_TARGET else [],
        rules.compare.output if REFERENCE else [],
        rules.costs.output,
        rules.controls_summary.output if CONTROLS else [],
        PLAN.stored_markers(),


rule all_figures:
    """The accuracy-per-round figures listed under `figures` in the config, and the per-client
    accuracy of experiment `clients_figure`."""
    input:
        expand(rules.curves.output, figure=list(config["figures"])),
        rules.client_accuracy.output if CLIENTS_FIGURE else [],


rule report_pdf:
    """Every table (the paper's value beside ours) and figure in one LaTeX document, report.tex,
    compiled to report.pdf with latexmk (Debian: latexmk texlive-latex-base texlive-latex-recommended
    texlive-latex-extra). Not part of `all`: the rest of the workflow needs no TeX."""
    input:
        results=expand(rules.aggregate.output.results, experiment=list(config["experiments"])),
        reference=[REFERENCE] if REFERENCE else [],
        tables=[
            *([rules.rounds_to_target.output.tex] if ROUNDS_TO_TARGET else []),
            rules.costs.output.tex,
            *([rules.compare.output.tex] if REFERENCE else []),
        ],
        figures=[
            *expand(rules.curves.output.pdf, figure=list(config["figures"])),
            *([rules.client_accuracy.output.pdf] if CLIENTS_FIGURE else []),
            *expand(rules.partition.output.heatmap, partition=list(PLAN.partitions)),
        ],
    output:
        tex=f"{ARTIFACTS}/report.tex",
        pdf=f"{ARTIFACTS}/report.pdf",
    log:
        main=f"{LOGS}/report/report_pdf.log",
        latex=f"{LOGS}/report/latexmk.log",
    localrule: True
    params:
        title=f"FedGMH reproduction: every table and figure of config {NAME}",
        titles=json.dumps({name: exp.get("title", name) for name, exp in config["experiments"].items()}),
        captions=json.dumps({
            **{
                name: f"{fig.get('title', name)}: test accuracy per round, mean over seeds (band: ±1 std), one line per "
                f"method; experiment {fig['experiment']}, setting {fig['setting']}."
                for name, fig in config["figures"].items()
            },
            "client_accuracy": "Per-client test accuracy per method and setting (the runs' clients.csv; runs recorded "
            "before it existed are named, not drawn).",
        }),
        reference=lambda wildcards, input: ["--reference", input.reference[0]] if input.reference else [],
        accuracy=config["table_accuracy"],
    shell:
        "fedgmh document --out {output.tex:q} --title {params.title:q} --results {input.results:q} --titles {params.titles:q}"
        " {params.reference:q} --accuracy {params.accuracy:q} --input {input.tables:q} --figure {input.figures:q}"
        " --captions {params.captions:q}"
        " --pdf {output.pdf:q} --log {log.latex:q} > {log.main:q} 2>&1"
