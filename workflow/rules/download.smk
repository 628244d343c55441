# Datasets: `fedgmh download` prepares <data_root>/<dataset>.npz (torchvision, the local mirror
# given by config `mirror`, or the embedded `digits` set, which needs no network). A local rule:
# on a cluster it runs where snakemake runs (compute nodes are often offline).


rule download:
    output:
        f"{DATA}/{{dataset}}.npz",
    log:
        f"{LOGS}/download/{{dataset}}.log",
    localrule: True
    params:
        root=lambda wildcards, output: os.path.dirname(output[0]),
        mirror=lambda wildcards: ["--mirror", config["mirror"]] if config["mirror"] else [],
    shell:
        "fedgmh download {wildcards.dataset:q} --root {params.root:q} {params.mirror:q} > {log:q} 2>&1"
