# One federated training run per (experiment, setting, algorithm, seed): `fedgmh train` with the
# arguments the plan gives (fedgmh.plan; runs shared by several experiments are trained once). Its
# record, run.json, says which config, experiment, setting and variant it belongs to.
#
# Editing the config retrains: `params.run` is the run's spec (Plan's Run.spec, fedgmh.runspec: every
# setting that decides its numbers), a function of the wildcards only, so Snakemake's params trigger
# sees it (it ignores params derived from input, such as `arguments`). The job then replaces the folder's
# run (`--overwrite`: its tables and a snapshot of other settings go; a snapshot of these settings
# is resumed) unless a store holds this run's record, which is reused.
#
# The same job then puts the record (trained or reused) into the store next to the artifacts it
# feeds (`--put-record`), so paper_artifacts/<name>/ is self-contained when committed and a fresh
# clone reuses it instead of training (docs/store.md): one job per run, no copy job. A record of
# other settings in its place (the config was edited since) stays, and this one goes beside it; the
# store never rewrites a record's results. The marker file `stored` tells Snakemake it is in place.


rule train:
    input:
        data=lambda wildcards: expand(rules.download.output[0], dataset=train_job(wildcards).dataset),
        partition=partition_of,
    output:
        metrics=f"{RESULTS}/runs/{{experiment}}/{{setting}}/{{algorithm}}/seed{{seed}}/metrics.csv",
        record=f"{RESULTS}/runs/{{experiment}}/{{setting}}/{{algorithm}}/seed{{seed}}/run.json",
        stored=touch(f"{RESULTS}/stored/{{experiment}}/{{setting}}/{{algorithm}}/seed{{seed}}.done"),
    log:
        f"{LOGS}/train/{{experiment}}/{{setting}}/{{algorithm}}/seed{{seed}}.log",
    priority: train_priority
    threads: config["threads_per_job"]
    resources:
        **PLAN.gpu_resources,
        mem_mb=TRAIN_MEM_MB,
        runtime=lambda wildcards: PLAN.train_runtime(train_job(wildcards)),
    params:
        run=lambda wildcards: train_job(wildcards).spec.text,
        arguments=lambda wildcards, input, threads: PLAN.train_arguments(train_job(wildcards), input.partition, threads),
        store_folder=lambda wildcards: PLAN.record_destination(train_job(wildcards)),
    shell:
        "fedgmh train {params.arguments:q} --put-record {params.store_folder:q} > {log:q} 2>&1"


# config runs_per_job > 1: the runs of one setting that can share a batched step (Plan.train_batches)
# are trained by one job each batch, `fedgmh train-group` on a runs file of their `fedgmh train`
# arguments (as rule train's, each with its own --put-record). One rule per batch, made in this loop:
# its outputs are every run's files of rule train, so the rest of the workflow sees no difference, and
# the ruleorder gives them to it, never to rule train. Its params.run holds every run's spec, so editing
# one run retrains the batch: Snakemake removes the batch's outputs first, so its unchanged runs come
# back from the store (config `stores`: train-group reuses a record as `fedgmh train --store` does).
# Docs: docs/workflow.md, "Several runs per GPU step".


for _index, _batch in enumerate(PLAN.train_batches):
    _first = _batch[0]

    rule:
        name:
            f"train_batch_{_index}"
        input:
            data=expand(rules.download.output[0], dataset=_first.dataset)[0],
            partition=expand(rules.partition.output.partition, partition=_first.partition)[0],
        output:
            metrics=[f"{run.run_dir}/metrics.csv" for run in _batch],
            record=[f"{run.run_dir}/run.json" for run in _batch],
            stored=touch([PLAN.stored_marker(run.run_dir) for run in _batch]),
        log:
            train=PLAN.batch_files(_index, _batch)[0],
            runs=PLAN.batch_files(_index, _batch)[1],
        priority: batch_priority(_batch)
        threads: config["threads_per_job"]
        resources:
            **PLAN.gpu_resources,
            mem_mb=TRAIN_MEM_MB * len(_batch),
            runtime=PLAN.batch_runtime(_batch),
        params:
            run=[run.spec.text for run in _batch],
            lines=batch_lines(_batch),
        shell:
            "printf '%s\\n' {params.lines:q} > {log.runs:q} && fedgmh train-group {log.runs:q} > {log.train:q} 2>&1"

    workflow.ruleorder(f"train_batch_{_index}", "train")


rule all_runs:
    """Every training run of the config (no tables)."""
    input:
        [f"{run_dir}/run.json" for run_dir in PLAN.train_jobs],
