# ExDir(C, alpha) partitions over config `clients` clients, seeded with `partition_seed`; one per
# (dataset, C, alpha), shared by every experiment and algorithm that uses it. Seconds each: a local
# rule (on a cluster it runs where snakemake runs).


rule partition:
    input:
        data=rules.download.output[0],
    output:
        partition=f"{RESULTS}/partitions/{{dataset}}_c{{C}}_a{{alpha}}.npz",
        stats=f"{RESULTS}/partitions/{{dataset}}_c{{C}}_a{{alpha}}.stats.csv",
        heatmap=f"{ARTIFACTS}/partitions/{{dataset}}_c{{C}}_a{{alpha}}.pdf",
        heatmap_png=report(f"{ARTIFACTS}/partitions/{{dataset}}_c{{C}}_a{{alpha}}.png", caption="../report/partition.rst",
                           category="Partitions", labels={"partition": "{dataset} ExDir({C}, {alpha})"}),
    log:
        f"{LOGS}/partition/{{dataset}}_c{{C}}_a{{alpha}}.log",
    localrule: True
    params:
        root=lambda wildcards, input: os.path.dirname(input.data),
        clients=config["clients"],
        seed=config["partition_seed"],
        train_ratio=config["train_ratio"],
    shell:
        "fedgmh partition --dataset {wildcards.dataset:q} --root {params.root:q} --clients {params.clients:q}"
        " --classes-per-client {wildcards.C:q} --alpha {wildcards.alpha:q} --seed {params.seed:q}"
        " --train-ratio {params.train_ratio:q} --out {output.partition:q} --stats {output.stats:q}"
        " --heatmap {output.heatmap:q} --heatmap {output.heatmap_png:q} > {log:q} 2>&1"


rule all_partitions:
    """Every partition of the config, with its statistics and heat-map."""
    input:
        [
            expand(rules.partition.output, dataset=run.dataset, C=run.classes_per_client, alpha=format_number(run.alpha))
            for run in PLAN.partitions.values()
        ],
