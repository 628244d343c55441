# fedgmh-repro: reproduce the tables and figures of FedGMH (Sun & Ni, 2026).
#
#   snakemake all_tables --configfile config/smoke.yaml                 # CI-sized, minutes
#   snakemake all --resources gpu=2                                     # the paper (config/config.yaml)
#   snakemake all --configfile config/smoke.yaml --report results/smoke/report.html   # afterwards: self-contained HTML report
#
# The workflow profile profiles/default (= workflow/profiles/default) gives the flags every call
# needs (--cores); give more on the command line. On a GPU machine the training jobs at once default to
# the GPUs x jobs_per_gpu (workflow/rules/common.smk); `--resources gpu=N` must come AFTER the target:
# `snakemake --cores 8 --resources gpu=2 all_tables` is read as a resource named "all_tables".
# Keys of the config: config/README.md; the config is checked in workflow/rules/common.smk.

from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version

min_version("9.17")  # the train rule's priority is a function


# A subfolder of the repository (docs/, with -s ../Snakefile) would find no config and write its results there.
_workdir, _root = Path.cwd().resolve(), Path(workflow.basedir).resolve()
if _root in _workdir.parents and not (_workdir / "config").is_dir():
    raise WorkflowError(f"snakemake runs in {_workdir}, a subfolder of the repository: run from the repository root ({_root})")


# The default config applies only when no --configfile is given: Snakemake would otherwise MERGE
# the two recursively (e.g. the paper's table3 and audit variants leaking into config/mini.yaml).
if not workflow.overwrite_configfiles:

    configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/download.smk"
include: "workflow/rules/partition.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/so_far.smk"


rule all:
    """Tables (with rounds-to-target and the comparison with the paper), figures and partition heat-maps."""
    default_target: True
    input:
        rules.all_tables.input,
        rules.all_figures.input,
        rules.all_partitions.input,
