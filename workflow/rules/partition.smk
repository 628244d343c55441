# ExDir(C, alpha) partitions, seeded with `partition_seed`, over the setting's `clients` (default: the
# config's) with its class `assignment` (random: ExDir's draw; chain); one per partition id
# <dataset>_c<C>_a<alpha>[_n<N>][_chain] (fedgmh.plan: the parameters come from the plan, not from the
# file name), shared by every experiment and algorithm that uses it. Seconds each: a local rule (on a
# cluster it runs where snakemake runs).


rule partition:
    input:
        data=lambda wildcards: expand(rules.download.output[0], dataset=partition_job(wildcards).dataset)[0],
    output:
        partition=f"{RESULTS}/partitions/{{partition}}.npz",
        stats=f"{RESULTS}/partitions/{{partition}}.stats.csv",
        heatmap=f"{ARTIFACTS}/partitions/{{partition}}.pdf",
        heatmap_png=report(
            f"{ARTIFACTS}/partitions/{{partition}}.png",
            caption="../report/partition.rst",
            category="Partitions",
            labels={"partition": "{partition}"},
        ),
    log:
        f"{LOGS}/partition/{{partition}}.log",
    localrule: True
    params:
        root=lambda wildcards, input: os.path.dirname(input.data),
        dataset=lambda wildcards: partition_job(wildcards).dataset,
        parameters=lambda wildcards: PLAN.partition_arguments(wildcards.partition),
        seed=config["partition_seed"],
        train_ratio=config["train_ratio"],
    shell:
        "fedgmh partition --dataset {params.dataset:q} --root {params.root:q} {params.parameters:q} --seed {params.seed:q}"
        " --train-ratio {params.train_ratio:q} --out {output.partition:q} --stats {output.stats:q}"
        " --heatmap {output.heatmap:q} --heatmap {output.heatmap_png:q} > {log:q} 2>&1"


rule all_partitions:
    """Every partition of the config, with its statistics and heat-map."""
    input:
        [expand(rules.partition.output, partition=partition) for partition in PLAN.partitions],
