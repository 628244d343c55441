# The paper's tables so far: the full-protocol records committed under paper_artifacts/ (of the paper
# config and config/table2_mnist.yaml) compared with the paper, with its claims, Figures 3 and 4 and the
# rounds to target, under both readings, without training anything (fedgmh.so_far says which records
# count). Whatever the config, `snakemake so_far --cores 1` writes them into config `so_far_out`.
#
# The records are found when the workflow is parsed; their list is a param, so a record committed
# or removed reruns the rule even when its files are older than the outputs.

from fedgmh.so_far import CLAIMS as SO_FAR_CLAIMS
from fedgmh.so_far import PAPER_CONFIG as SO_FAR_CONFIG
from fedgmh.so_far import REFERENCE as SO_FAR_REFERENCE
from fedgmh.so_far import SoFar

SO_FAR = SoFar.discover()


rule so_far:
    """The paper's tables, figures and claims on the full-protocol records committed so far (docs/results.md)."""
    input:
        records=[f"{folder}/run.json" for folder in SO_FAR.every_record],
        metrics=[f"{folder}/metrics.csv" for folder in SO_FAR.every_record],
        reference=SO_FAR_REFERENCE,
        claims=SO_FAR_CLAIMS,
        config=SO_FAR_CONFIG,
    output:
        [f"{config['so_far_out']}/{name}" for name in SO_FAR.outputs()],
    log:
        f"{LOGS}/report/so_far.log",
    localrule: True
    params:
        records=SO_FAR.every_record,
    run:
        SO_FAR.write(config["so_far_out"], log=log[0])
