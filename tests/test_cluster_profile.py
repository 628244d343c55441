"""The SLURM profile (workflow/profiles/slurm): the paper's workflow plans under it (dry run).

Needs the executor plugin (`pip install -e ".[cluster]"`); skipped, with the reason, without it. A
dry run submits nothing, so no SLURM installation is needed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from conftest import job_counts, snakemake

REPO = Path(__file__).resolve().parents[1]
PROFILE = REPO / "workflow" / "profiles" / "slurm"


def test_profile_keeps_site_keys_out_of_the_rules() -> None:
    """The profile's default-resources hold the site's two placeholders and nothing else, so that
    `--default-resources slurm_partition=...` fills them losing nothing; no set-resources (what a training
    job asks for comes from the config, GPU or not); squeue answers the job states (docs/running.md, "SLURM")."""
    profile = yaml.safe_load((PROFILE / "config.yaml").read_text())
    assert profile["executor"] == "slurm" and profile["jobs"] >= 1
    assert profile["default-resources"] == {"slurm_partition": "<partition>", "slurm_account": "<account>"}
    assert "set-resources" not in profile and "resources" not in profile  # no `gpu: 1` for every job
    assert profile["slurm-status-command"] == "squeue"
    for rules in (REPO / "workflow" / "rules").glob("*.smk"):
        assert "slurm_" not in rules.read_text(), f"{rules.name}: cluster settings belong in the profile"


def test_only_training_goes_to_the_cluster() -> None:
    """Every rule that runs a command, except `train`, is a local rule: downloads (compute nodes are
    often offline), partitions and reports run where snakemake runs."""
    from fedgmh.report.artifacts import artifacts

    text = "\n".join(path.read_text() for path in sorted((REPO / "workflow" / "rules").glob("*.smk")))
    rules = dict(re.findall(r"^rule (\w+):\n(.*?)(?=^rule |^for |\Z)", text, re.MULTILINE | re.DOTALL))
    # the report artifacts' rules, made in one loop of report.smk (its body one level deeper)
    loop = re.search(r"^for _artifact in artifacts\(\).*?^    rule:\n(.*?)(?=^rule |\Z)", text, re.MULTILINE | re.DOTALL)[1]
    rules |= dict.fromkeys(artifacts(), re.sub(r"^    ", "", loop, flags=re.MULTILINE))
    commands = {name for name, body in rules.items() if re.search(r"^    (shell|run|script):", body, re.MULTILINE)}
    local = {name for name, body in rules.items() if re.search(r"^    localrule: True$", body, re.MULTILINE)}
    assert {"download", "partition", "train", "aggregate", "table", "report_pdf"} <= commands
    assert commands - local == {"train"} and local <= commands


def dry_run(tmp_path: Path, *args: str) -> str:
    pytest.importorskip(
        "snakemake_executor_plugin_slurm",
        reason="snakemake-executor-plugin-slurm is not installed (pip install -e '.[cluster]')",
    )
    result = snakemake(tmp_path, "-n", "-p", *args)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    return out


def train_blocks(out: str) -> list[tuple[str, str]]:
    """(resources, shell command) of every training job of a dry run's output."""
    blocks = re.findall(r"^rule (\w+):\n(.*?)^Shell command: (.*?)$", out, re.MULTILINE | re.DOTALL)
    return [(re.search(r"resources: (.*)", body).group(1), shell) for name, body, shell in blocks if name == "train"]


def test_paper_dry_run_with_the_slurm_profile(tmp_path: Path) -> None:
    out = dry_run(tmp_path, "all_tables", "--profile", str(PROFILE), "--configfile", str(REPO / "config" / "config.yaml"),
                  "--config", "device=cuda")
    # the cluster profile, and the workflow profile (profiles/default, i.e. workflow/profiles/default) with it
    assert f"Using profiles {PROFILE} and workflow specific profile {REPO / 'profiles' / 'default'}" in out

    counts = job_counts(out)
    assert counts["train"] == 1819 and counts["download"] == 4 and counts["partition"] == 9

    # device=cuda: every training job asks SLURM for one GPU (sbatch --gpus=1), with at most 6 h
    train = train_blocks(out)
    assert len(train) == counts["train"]
    for resources, shell in train:
        for part in ("gpu=1", "slurm_partition=<partition>", "slurm_account=<account>", "mem_mb=4000"):
            assert part in resources, resources
        assert 10 <= int(re.search(r"runtime=(\d+)", resources).group(1)) <= 360, resources
        assert "--device cuda:auto" in shell  # one visible GPU per SLURM job: used without locking
    assert max(int(re.search(r"runtime=(\d+)", r).group(1)) for r, _ in train) == 360
    assert not list(tmp_path.glob("results/**/*"))  # a dry run writes nothing


def test_a_cpu_run_asks_no_gpu_and_the_command_line_fills_the_placeholders(tmp_path: Path) -> None:
    """device=cpu: no GPU is asked for (a GPU-less cluster takes the jobs as they are); `--default-resources`
    on the command line (after the target) replaces the placeholders and nothing else; `--set-resources`
    changes one key of a training job, the others stay the rule's."""
    out = dry_run(tmp_path, "all_runs", "--profile", str(PROFILE), "--default-resources", "slurm_partition=debug",
                  "--set-resources", "train:runtime=20", "--configfile", str(REPO / "config" / "smoke.yaml"),
                  "--config", "device=cpu")
    train = train_blocks(out)
    assert len(train) == 62
    for resources, shell in train:
        assert "gpu" not in resources and "<partition>" not in resources and "slurm_account" not in resources, resources
        assert "slurm_partition=debug" in resources and "mem_mb=4000" in resources and "runtime=20" in resources, resources
        assert "--device cpu --threads 1" in shell
