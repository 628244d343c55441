# One federated training run per (experiment, setting, algorithm, seed); see common.smk for how
# runs shared by several experiments are trained once.


rule train:
    input:
        data=lambda wildcards: expand(rules.download.output[0], dataset=train_job(wildcards)["dataset"]),
        partition=partition_of,
    output:
        metrics=f"{RESULTS}/runs/{{experiment}}/{{setting}}/{{algorithm}}/seed{{seed}}/metrics.csv",
        record=f"{RESULTS}/runs/{{experiment}}/{{setting}}/{{algorithm}}/seed{{seed}}/run.json",
        info=f"{RESULTS}/runs/{{experiment}}/{{setting}}/{{algorithm}}/seed{{seed}}/run_info.json",
    log:
        f"{LOGS}/train/{{experiment}}/{{setting}}/{{algorithm}}/seed{{seed}}.log",
    threads: config["threads_per_job"]
    resources:
        **TRAIN_RESOURCES,
    params:
        run_dir=lambda wildcards, output: os.path.dirname(output.metrics),
        root=lambda wildcards, input: os.path.dirname(input.data[0]),
        dataset=lambda wildcards: train_job(wildcards)["dataset"],
        rounds=lambda wildcards: train_job(wildcards)["rounds"],
        join_ratio=lambda wildcards: format_number(train_job(wildcards)["join_ratio"]),
        local_epochs=lambda wildcards: train_job(wildcards)["local_epochs"],
        batch_size=config["batch_size"],
        lr=format_number(config["lr"]),
        device=TRAIN_DEVICE,
        slots=TRAIN_SLOTS,
        sets=lambda wildcards: set_arguments(train_job(wildcards)["options"]),
        info=run_info_json,
        info_tmp=lambda wildcards, output: f"{output.info}.tmp",
        stores=[word for folder in config["stores"] for word in ("--store", folder)],
    shell:
        "fedgmh train --dataset {params.dataset:q} --root {params.root:q} --partition {input.partition:q}"
        " --algorithm {wildcards.algorithm:q} --rounds {params.rounds:q} --join-ratio {params.join_ratio:q}"
        " --local-epochs {params.local_epochs:q} --batch-size {params.batch_size:q} --lr {params.lr:q}"
        " --seed {wildcards.seed:q} --device {params.device:q} {params.slots:q} --threads {threads:q} {params.sets:q} {params.stores:q}"
        " --out {params.run_dir:q} > {log:q} 2>&1"
        " && printf '%s\\n' {params.info:q} > {params.info_tmp:q} && mv {params.info_tmp:q} {output.info:q}"


rule run_record:
    """A finished run's record (metrics per round, run.json, run_info.json) put into the store next
    to the artifacts it feeds, so paper_artifacts/<name>/ is self-contained when committed and a
    fresh clone reuses it instead of training (docs/store.md). `fedgmh store put` refuses to replace
    a record of other settings; the marker file tells Snakemake the record is in place."""
    input:
        metrics=rules.train.output.metrics,
        record=rules.train.output.record,
        info=rules.train.output.info,
    output:
        touch(f"{RESULTS}/stored/{{experiment}}/{{setting}}/{{algorithm}}/seed{{seed}}.done"),
    log:
        f"{LOGS}/run_record/{{experiment}}/{{setting}}/{{algorithm}}/seed{{seed}}.log",
    localrule: True
    params:
        source=lambda wildcards, input: os.path.dirname(input.record),
        destination=lambda wildcards: f"{ARTIFACTS}/runs/{wildcards.experiment}/{wildcards.setting}/{wildcards.algorithm}/seed{wildcards.seed}",
    shell:
        "fedgmh store put {params.source:q} {params.destination:q} > {log:q} 2>&1"


rule all_runs:
    """Every training run of the config (no tables)."""
    input:
        [f"{run_dir}/run.json" for run_dir in TRAIN_JOBS],
