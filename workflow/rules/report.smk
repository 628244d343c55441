# Results: aggregate the runs of each experiment, then LaTeX tables (and CSV), accuracy curves, the
# rounds-to-target table, the comparison with the paper and the paper's claims. Outputs marked with
# report(...) go into `snakemake --report results/<name>/report.html` (captions: workflow/report/*.rst). `report_pdf` puts every table
# and figure into one LaTeX document and compiles it (needs a TeX engine, so it is not part of `all`).
# Every rule here is a local rule: quick, and on a cluster it runs where snakemake runs.

# the experiments whose per-client accuracy is drawn, whose runs' bytes go into costs.csv and whose
# controls are summarised (config `clients_figure`, `costs_runs`, `controls_summary`); None: no such output
CLIENTS_FIGURE = PLAN.experiment_key("clients_figure")
COSTS_RUNS = PLAN.experiment_key("costs_runs")
CONTROLS = PLAN.experiment_key("controls_summary")
REFERENCE = PLAN.reference
OTHER_REFERENCES = PLAN.other_references
ROUNDS_TO_TARGET = PLAN.rounds_to_target
#: its targets and the paper's rounds as `fedgmh rounds` and `fedgmh curves` take them
TARGET_WORDS = (
    ["--target", *(format_number(t) for t in ROUNDS_TO_TARGET.get("targets", []))]
    + ["--paper", json.dumps(ROUNDS_TO_TARGET.get("paper") or {})]
    if ROUNDS_TO_TARGET and ROUNDS_TO_TARGET.get("targets")
    else []
)
UPLOADS_TO_TARGET = PLAN.uploads_to_target
LAYER_WEIGHTS = PLAN.layer_weights
CLAIMS = PLAN.claims
OFFICIAL = sorted(PLAN.official_reading)  # paper experiments with runs under PFLlib's reading


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
        records=lambda wildcards: [f"{d}/run.json" for d in PLAN.official_run_dirs(wildcards.experiment)],
        metrics=lambda wildcards: [f"{d}/metrics.csv" for d in PLAN.official_run_dirs(wildcards.experiment)],
    output:
        results=f"{RESULTS}/aggregate_official/{{experiment}}.results.csv",
        curves=f"{RESULTS}/aggregate_official/{{experiment}}.curves.csv",
    log:
        f"{LOGS}/report/aggregate_official_{{experiment}}.log",
    localrule: True
    params:
        run_dirs=lambda wildcards: PLAN.official_run_dirs(wildcards.experiment),
        clients=["--clients", str(config["clients"])] if PLAN.own_clients else [],
    shell:
        "fedgmh aggregate --experiment {wildcards.experiment:q} --runs {params.run_dirs:q} --preset-evaluation"
        " {params.clients:q} --out {output.results:q} --curves {output.curves:q} > {log:q} 2>&1"


rule table:
    input:
        results=rules.aggregate.output.results,
        reference=[REFERENCE] if REFERENCE else [],
    output:
        tex=report(
            f"{ARTIFACTS}/{{experiment}}.tex",
            caption="../report/table.rst",
            category="Tables",
            subcategory="{experiment}",
            labels={"table": "{experiment}", "format": "LaTeX"},
        ),
        csv=report(
            f"{ARTIFACTS}/{{experiment}}.csv",
            caption="../report/table.rst",
            category="Tables",
            subcategory="{experiment}",
            labels={"table": "{experiment}", "format": "CSV"},
        ),
        cells=f"{ARTIFACTS}/{{experiment}}.cells.csv",
    log:
        f"{LOGS}/report/table_{{experiment}}.log",
    localrule: True
    params:
        title=lambda wildcards: config["experiments"][wildcards.experiment].get("title", wildcards.experiment),
        reference=lambda wildcards, input: ["--reference", input.reference[0]] if input.reference else [],
        accuracy=config["table_accuracy"],
    shell:
        "fedgmh table --results {input.results:q} --experiment {wildcards.experiment:q} --title={params.title:q}"
        " --accuracy {params.accuracy:q} --out {output.tex:q} --csv {output.csv:q} --cells {output.cells:q}"
        " {params.reference:q} > {log:q} 2>&1"


rule curves:
    input:
        curves=lambda wildcards: expand(
            rules.aggregate.output.curves, experiment=config["figures"][wildcards.figure]["experiment"]
        ),
    output:
        pdf=f"{ARTIFACTS}/{{figure}}.pdf",
        png=report(
            f"{ARTIFACTS}/{{figure}}.png", caption="../report/figure.rst", category="Figures", labels={"figure": "{figure}"}
        ),
    log:
        f"{LOGS}/report/curves_{{figure}}.log",
    wildcard_constraints:
        figure="|".join(re.escape(name) for name in config["figures"]) or "(?!)",  # not client_accuracy
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
            [f"--title={config['figures'][wildcards.figure]['title']}"]
            if config["figures"][wildcards.figure].get("title")
            else []
        ),
        targets=lambda wildcards: (  # the figure of `rounds_to_target`: its targets as lines, the paper's rounds as stars
            TARGET_WORDS if ROUNDS_TO_TARGET and ROUNDS_TO_TARGET.get("figure") == wildcards.figure else []
        ),
    shell:
        "fedgmh curves --curves {input.curves:q} --experiment {params.experiment:q} --setting {params.setting:q}"
        " {params.algorithms:q} {params.title:q} {params.targets:q} --out {output.pdf:q} --png {output.png:q} > {log:q} 2>&1"


rule client_accuracy:
    """Per-client test accuracy per method and setting (box plots) of experiment `clients_figure`,
    from the runs' clients.csv; runs recorded without one are named in the figure."""
    input:
        results=lambda wildcards: expand(rules.aggregate.output.results, experiment=CLIENTS_FIGURE),
    output:
        pdf=f"{ARTIFACTS}/client_accuracy.pdf",
        png=report(
            f"{ARTIFACTS}/client_accuracy.png",
            caption="../report/clients.rst",
            category="Figures",
            labels={"figure": "client accuracy"},
        ),
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
        " --title={params.title:q} --out {output.pdf:q} --png {output.png:q} --csv {output.csv:q} > {log:q} 2>&1"


rule dots:
    """Each seed's accuracy per cell of a paper table's experiment, next to the paper's mean ± std."""
    input:
        results=rules.aggregate.output.results,
        reference=[REFERENCE] if REFERENCE else [],
    output:
        pdf=f"{ARTIFACTS}/{{experiment}}_seeds.pdf",
        png=report(
            f"{ARTIFACTS}/{{experiment}}_seeds.png",
            caption="../report/dots.rst",
            category="Figures",
            labels={"figure": "{experiment} seeds"},
        ),
    log:
        f"{LOGS}/report/dots_{{experiment}}.log",
    wildcard_constraints:
        experiment="|".join(re.escape(name) for name in DOT_PLOTS) or "(?!)",
    localrule: True
    params:
        title=lambda wildcards: config["experiments"][wildcards.experiment].get("title", wildcards.experiment),
        accuracy=config["table_accuracy"],
    shell:
        "fedgmh dots --results {input.results:q} --reference {input.reference:q} --experiment {wildcards.experiment:q}"
        " --accuracy {params.accuracy:q} --title={params.title:q} --out {output.pdf:q} --png {output.png:q} > {log:q} 2>&1"


rule rounds_to_target:
    input:
        curves=lambda wildcards: expand(
            rules.aggregate.output.curves, experiment=config["figures"][ROUNDS_TO_TARGET["figure"]]["experiment"]
        ),
    output:
        tex=report(
            f"{ARTIFACTS}/rounds_to_target.tex",
            caption="../report/rounds.rst",
            category="Tables",
            subcategory="rounds to target",
            labels={"table": "rounds to target", "format": "LaTeX"},
        ),
        csv=report(
            f"{ARTIFACTS}/rounds_to_target.csv",
            caption="../report/rounds.rst",
            category="Tables",
            subcategory="rounds to target",
            labels={"table": "rounds to target", "format": "CSV"},
        ),
    log:
        f"{LOGS}/report/rounds_to_target.log",
    localrule: True
    params:
        experiment=lambda wildcards: config["figures"][ROUNDS_TO_TARGET["figure"]]["experiment"],
        setting=lambda wildcards: config["figures"][ROUNDS_TO_TARGET["figure"]]["setting"],
        targets=TARGET_WORDS,
    shell:
        "fedgmh rounds --curves {input.curves:q} --experiment {params.experiment:q} --setting {params.setting:q}"
        " {params.targets:q} --out {output.tex:q} --csv {output.csv:q} > {log:q} 2>&1"


rule uploads_to_target:
    """Cumulative client uploads until each method's accuracy reaches the targets (config
    `uploads_to_target`; CE-pFL's Table 1), from the runs' per-round `clients_up`."""
    input:
        curves=lambda wildcards: expand(rules.aggregate.output.curves, experiment=UPLOADS_TO_TARGET["experiment"]),
    output:
        tex=report(
            f"{ARTIFACTS}/uploads_to_target.tex",
            caption="../report/uploads.rst",
            category="Tables",
            subcategory="uploads to target",
            labels={"table": "uploads to target", "format": "LaTeX"},
        ),
        csv=report(
            f"{ARTIFACTS}/uploads_to_target.csv",
            caption="../report/uploads.rst",
            category="Tables",
            subcategory="uploads to target",
            labels={"table": "uploads to target", "format": "CSV"},
        ),
    log:
        f"{LOGS}/report/uploads_to_target.log",
    localrule: True
    params:
        experiment=lambda wildcards: UPLOADS_TO_TARGET["experiment"],
        setting=lambda wildcards: UPLOADS_TO_TARGET["setting"],
        targets=[format_number(t) for t in UPLOADS_TO_TARGET.get("targets", [])],
        metric=UPLOADS_TO_TARGET.get("metric") or "test_acc_mean",
        paper=json.dumps(UPLOADS_TO_TARGET.get("paper") or {}),
        title=UPLOADS_TO_TARGET.get("title") or "Client uploads to target",
    shell:
        "fedgmh uploads --curves {input.curves:q} --experiment {params.experiment:q} --setting {params.setting:q}"
        " --target {params.targets:q} --metric {params.metric:q} --paper {params.paper:q} --title={params.title:q}"
        " --out {output.tex:q} --csv {output.csv:q} > {log:q} 2>&1"


rule layer_weights:
    """Per-layer aggregation weights of pFedLA-like runs (config `layer_weights`; pFedLA's Fig. 6):
    one clients x clients heat-map per algorithm and layer, from the runs' layer_weights.csv."""
    input:
        results=lambda wildcards: expand(rules.aggregate.output.results, experiment=LAYER_WEIGHTS["experiment"]),
    output:
        pdf=f"{ARTIFACTS}/layer_weights.pdf",
        png=report(
            f"{ARTIFACTS}/layer_weights.png",
            caption="../report/layer_weights.rst",
            category="Figures",
            labels={"figure": "layer weights"},
        ),
        csv=f"{ARTIFACTS}/layer_weights.csv",
    log:
        f"{LOGS}/report/layer_weights.log",
    localrule: True
    params:
        experiment=lambda wildcards: LAYER_WEIGHTS["experiment"],
        setting=lambda wildcards: LAYER_WEIGHTS["setting"],
        algorithms=lambda wildcards: LAYER_WEIGHTS["algorithms"],
        layer=lambda wildcards: [f"--layer={LAYER_WEIGHTS['layer']}"] if LAYER_WEIGHTS.get("layer") is not None else [],
        seed=lambda wildcards: ["--seed", str(LAYER_WEIGHTS["seed"])] if LAYER_WEIGHTS.get("seed") is not None else [],
        title=lambda wildcards: [f"--title={LAYER_WEIGHTS['title']}"] if LAYER_WEIGHTS.get("title") else [],
    shell:
        "fedgmh layer-weights --results {input.results:q} --experiment {params.experiment:q} --setting {params.setting:q}"
        " --algorithm {params.algorithms:q} {params.layer:q} {params.seed:q} {params.title:q}"
        " --out {output.pdf:q} --png {output.png:q} --csv {output.csv:q} > {log:q} 2>&1"


rule compare:
    """Every cell of the paper's tables next to ours, with a verdict: Welch's interval and an
    equivalence test at config `comparison_margin` / `comparison_alpha` (docs/verdicts.md)."""
    input:
        results=expand(rules.aggregate.output.results, experiment=list(config["experiments"])),
        reference=[REFERENCE] if REFERENCE else [],
        other=OTHER_REFERENCES,
    output:
        md=report(
            f"{ARTIFACTS}/comparison.md",
            caption="../report/comparison.rst",
            category="Comparison with the paper",
            labels={"file": "comparison.md"},
        ),
        tex=f"{ARTIFACTS}/comparison.tex",
        csv=report(
            f"{ARTIFACTS}/comparison.csv",
            caption="../report/comparison.rst",
            category="Comparison with the paper",
            labels={"file": "comparison.csv"},
        ),
        other=[f"{ARTIFACTS}/comparison_other.csv"] if OTHER_REFERENCES else [],
    log:
        f"{LOGS}/report/compare.log",
    localrule: True
    params:
        other=lambda wildcards, input, output: ["--other", *input.other, "--other-csv", output.other[0]] if input.other else [],
        margin=format_number(config["comparison_margin"]),
        alpha=format_number(config["comparison_alpha"]),
    shell:
        "fedgmh compare --results {input.results:q} --reference {input.reference:q} --out {output.md:q}"
        " --tex {output.tex:q} --csv {output.csv:q} --margin {params.margin:q} --alpha {params.alpha:q} {params.other:q} > {log:q} 2>&1"


rule claims:
    """The paper's claims (config `paper_claims`), each with a verdict on this config's runs and the
    numbers behind it; claims on experiments the config lacks are "not run" (docs/claims.md). Like
    the comparison, always on the best accuracy (pooled, and again on the mean over clients), what
    the paper's claims are about, whatever `table_accuracy` is; section 2.3's on costs.csv."""
    input:
        claims=[CLAIMS] if CLAIMS else [],
        results=expand(rules.aggregate.output.results, experiment=PLAN.claim_experiments),
        curves=expand(rules.aggregate.output.curves, experiment=PLAN.claim_experiments),
        costs=f"{ARTIFACTS}/costs.csv",
        official_results=expand(rules.aggregate_official.output.results, experiment=OFFICIAL),
        official_curves=expand(rules.aggregate_official.output.curves, experiment=OFFICIAL),
    output:
        md=report(
            f"{ARTIFACTS}/claims.md",
            caption="../report/claims.rst",
            category="The paper's claims",
            labels={"file": "claims.md"},
        ),
        csv=report(
            f"{ARTIFACTS}/claims.csv",
            caption="../report/claims.rst",
            category="The paper's claims",
            labels={"file": "claims.csv"},
        ),
        official_csv=(
            report(
                f"{ARTIFACTS}/claims_pflib.csv",
                caption="../report/claims.rst",
                category="The paper's claims",
                labels={"file": "claims_pflib.csv"},
            )
            if OFFICIAL
            else []
        ),
    log:
        f"{LOGS}/report/claims.log",
    localrule: True
    params:
        title=f"The paper's claims on the runs of config {NAME}",
        official=lambda wildcards, input, output: (
            ["--official-results", *input.official_results, "--official-curves", *input.official_curves]
            + ["--official-csv", output.official_csv]
            if OFFICIAL
            else []
        ),
    shell:
        "fedgmh claims --claims {input.claims:q} --results {input.results:q} --curves {input.curves:q} {params.official:q}"
        " --costs {input.costs:q} --title {params.title:q} --out {output.md:q} --csv {output.csv:q} > {log:q} 2>&1"


rule costs:
    """Section 2.3: storage and communication from the actual model (mnist, cifar10, cifar100),
    next to the bytes measured in the runs of experiment `costs_runs` (Table 2's: every algorithm
    counts what it sends)."""
    input:
        records=[f"{d}/run.json" for d in PLAN.experiment_run_dirs(COSTS_RUNS)] if COSTS_RUNS else [],
    output:
        csv=report(
            f"{ARTIFACTS}/costs.csv",
            caption="../report/costs.rst",
            category="Tables",
            subcategory="costs",
            labels={"table": "costs", "format": "CSV"},
        ),
        tex=report(
            f"{ARTIFACTS}/costs.tex",
            caption="../report/costs.rst",
            category="Tables",
            subcategory="costs",
            labels={"table": "costs", "format": "LaTeX"},
        ),
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
        stats=lambda wildcards: sorted(
            {f"{RESULTS}/partitions/{run.partition}.stats.csv" for run in PLAN.runs if run.experiment == CONTROLS}
        ),
    output:
        md=report(
            f"{ARTIFACTS}/controls_summary.md",
            caption="../report/controls.rst",
            category="Tables",
            subcategory="controls",
            labels={"table": "controls summary", "format": "Markdown"},
        ),
        csv=f"{ARTIFACTS}/controls_summary.csv",
    log:
        f"{LOGS}/report/controls_summary.log",
    localrule: True
    params:
        title=lambda wildcards: config["experiments"][CONTROLS].get("title", CONTROLS),
    shell:
        "fedgmh controls --results {input.results:q} --stats {input.stats:q} --out {output.md:q} --csv {output.csv:q}"
        " --title={params.title:q} > {log:q} 2>&1"


rule all_tables:
    """The LaTeX tables (and CSVs) of every configured experiment, the rounds-to-target and
    uploads-to-target tables (config `rounds_to_target`, `uploads_to_target`), the comparison with
    the paper (config `reference_tables`, `other_references`) and the paper's claims (`paper_claims`)."""
    input:
        expand(rules.table.output, experiment=list(config["experiments"])),
        rules.rounds_to_target.output if ROUNDS_TO_TARGET else [],
        rules.uploads_to_target.output if UPLOADS_TO_TARGET else [],
        rules.compare.output if REFERENCE else [],
        rules.claims.output if CLAIMS else [],
        rules.costs.output,
        rules.controls_summary.output if CONTROLS else [],
        PLAN.stored_markers(),


rule all_figures:
    """The accuracy-per-round figures listed under `figures` in the config, the per-client
    accuracy of experiment `clients_figure` and the layer-weight heat-maps (config `layer_weights`)."""
    input:
        expand(rules.curves.output, figure=list(config["figures"])),
        expand(rules.dots.output, experiment=DOT_PLOTS),
        rules.client_accuracy.output if CLIENTS_FIGURE else [],
        rules.layer_weights.output if LAYER_WEIGHTS else [],


rule report_pdf:
    """Every table (the paper's value beside ours) and figure in one LaTeX document, report.tex,
    compiled to report.pdf with latexmk (Debian: latexmk texlive-latex-base texlive-latex-recommended
    texlive-latex-extra). Not part of `all`: the rest of the workflow needs no TeX."""
    input:
        results=expand(rules.aggregate.output.results, experiment=list(config["experiments"])),
        reference=[REFERENCE] if REFERENCE else [],
        claims=[rules.claims.output.csv] if CLAIMS else [],
        tables=[
            *([rules.rounds_to_target.output.tex] if ROUNDS_TO_TARGET else []),
            *([rules.uploads_to_target.output.tex] if UPLOADS_TO_TARGET else []),
            rules.costs.output.tex,
            *([rules.compare.output.tex] if REFERENCE else []),
        ],
        figures=[
            *expand(rules.curves.output.pdf, figure=list(config["figures"])),
            *expand(rules.dots.output.pdf, experiment=DOT_PLOTS),
            *([rules.client_accuracy.output.pdf] if CLIENTS_FIGURE else []),
            *([rules.layer_weights.output.pdf] if LAYER_WEIGHTS else []),
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
        captions=json.dumps(
            {
                **{
                    name: f"{fig.get('title') or config['experiments'][fig['experiment']].get('title', fig['experiment'])}: test "
                    "accuracy per round, mean over seeds; right: the last rounds; "
                    + (
                        "shaded: ±1 std over seeds of FedGMH and the best other method."
                        if len(config["experiments"][fig["experiment"]].get("seeds", config["seeds"])) > 1
                        else "one seed per method: no spread drawn."
                    )
                    for name, fig in config["figures"].items()
                },
                **{
                    f"{name}_seeds": f"{config['experiments'][name].get('title', name)}: each seed of ours next to the paper's "
                    "mean ± std; a table sweeping one parameter as one line per method over it (the figure's title says what is "
                    "drawn and which spread)."
                    for name in DOT_PLOTS
                },
                "client_accuracy": "Per-client test accuracy per method and setting; settings whose runs predate per-client "
                "results are named, not drawn.",
                "layer_weights": "Per-layer aggregation weights at the last round: row = the client whose model is built, column "
                "= the peer whose parameters it weighs; the diagonal outlined.",
            }
        ),
        reference=lambda wildcards, input: ["--reference", input.reference[0]] if input.reference else [],
        claims=lambda wildcards, input: ["--claims", input.claims[0]] if input.claims else [],
        accuracy=config["table_accuracy"],
    shell:
        "fedgmh document --out {output.tex:q} --title={params.title:q} --results {input.results:q} --titles {params.titles:q}"
        " {params.reference:q} {params.claims:q} --accuracy {params.accuracy:q} --input {input.tables:q} --figure {input.figures:q}"
        " --captions {params.captions:q}"
        " --pdf {output.pdf:q} --log {log.latex:q} > {log.main:q} 2>&1"
