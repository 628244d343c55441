# fedgmh-repro: reproduce the tables and figures of FedGMH (Sun & Ni, 2026).
#
#   snakemake all_tables --cores 2 --configfile config/smoke.yaml      # CI-sized, minutes
#   snakemake all --cores 16 --resources gpu=2                          # the paper (config/config.yaml)
#   snakemake --report report.html --configfile ...                    # afterwards: self-contained HTML report
#
# The target must come BEFORE --resources: `snakemake --cores 8 --resources gpu=2 all_tables` is
# read as a resource named "all_tables". Keys of the config: config/README.md.

from snakemake.utils import min_version, validate
from snakemake.exceptions import WorkflowError

min_version("8.0")


# The default config applies only when no --configfile is given: Snakemake would otherwise MERGE
# the two recursively (e.g. the paper's table3 and audit variants leaking into config/mini.yaml).
if not workflow.overwrite_configfiles:

    configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


_SCHEMA = "workflow/schemas/config.schema.yaml"
try:
    validate(config, schema=_SCHEMA)
except WorkflowError:
    # jsonschema's own text dumps the schema; say instead, one line each, which key is wrong and why
    import jsonschema, yaml

    _validator = jsonschema.Draft202012Validator(
        yaml.safe_load(open(workflow.current_basedir.join(_SCHEMA).get_path_or_uri(secret_free=True)))
    )
    _problems = []
    for _error in sorted(_validator.iter_errors(config), key=lambda e: list(map(str, e.absolute_path))):
        while _error.validator in ("anyOf", "oneOf") and _error.context:  # e.g. a variant: options or null
            _error = max(_error.context, key=lambda e: len(e.absolute_path))  # the alternative that got furthest
        _where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in _error.absolute_path).lstrip(".")
        _message = _error.message
        if _error.validator == "pattern" and "x-message" in _error.schema:  # the schema's own advice for this key
            _message = f"{_error.instance!r} is not allowed: {_error.schema['x-message']}"
        _problems.append(f"  {_where or '(top level)'}: {_message}")
    raise WorkflowError("invalid configuration (see config/README.md for every key):\n" + "\n".join(_problems)) from None


include: "workflow/rules/common.smk"
include: "workflow/rules/download.smk"
include: "workflow/rules/partition.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/report.smk"


rule all:
    """Tables (with rounds-to-target and the comparison with the paper), figures and partition heat-maps."""
    input:
        rules.all_tables.input,
        rules.all_figures.input,
        rules.all_partitions.input,
    default_target: True
