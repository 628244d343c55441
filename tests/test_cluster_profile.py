"""The SLURM profile (workflow/profiles/slurm): the paper's workflow plans under it (dry run).

Needs the executor plugin (`pip install -e ".[cluster]"`); skipped, with the reason, without it. A
dry run submits nothing, so no SLURM installation is needed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
PROFILE = REPO / "workflow" / "profiles" / "slurm"


def test_profile_keeps_site_keys_out_of_the_rules() -> None:
    profile = yaml.safe_load((PROFILE / "config.yaml").read_text())
    assert profile["executor"] == "slurm" and profile["jobs"] >= 1
    assert {"slurm_partition", "slurm_account", "mem_mb", "runtime"} <= set(profile["default-resources"])
    assert {"gpu", "mem_mb", "runtime", "cpus_per_task", "slurm_partition"} <= set(profile["set-resources"]["train"])
    for rules in (REPO / "workflow" / "rules").glob("*.smk"):
        assert "slurm_" not in rules.read_text(), f"{rules.name}: cluster settings belong in the profile"


def test_only_training_goes_to_the_cluster() -> None:
    """Every rule that runs a command, except `train`, is a local rule: downloads (compute nodes are
    often offline), partitions and reports run where snakemake runs."""
    text = "\n".join(path.read_text() for path in sorted((REPO / "workflow" / "rules").glob("*.smk")))
    rules = dict(re.findall(r"^rule (\w+):\n(.*?)(?=^rule |\Z)", text, re.MULTILINE | re.DOTALL))
    commands = {name for name, body in rules.items() if re.search(r"^    (shell|run|script):", body, re.MULTILINE)}
    local = {name for name, body in rules.items() if re.search(r"^    localrule: True$", body, re.MULTILINE)}
    assert {"download", "partition", "train", "aggregate", "table", "report_pdf"} <= commands
    assert commands - local == {"train"} and local <= commands


def test_paper_dry_run_with_the_slurm_profile(tmp_path: Path) -> None:
    pytest.importorskip(
        "snakemake_executor_plugin_slurm",
        reason="snakemake-executor-plugin-slurm is not installed (pip install -e '.[cluster]')",
    )
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    command = [
        sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path),
        "--profile", str(PROFILE), "-n", "-p", "all_tables",
        "--configfile", str(REPO / "config" / "config.yaml"), "--config", "device=cuda",
    ]
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    # the cluster profile, and the workflow profile (profiles/default, i.e. workflow/profiles/default) with it
    assert f"Using profiles {PROFILE} and workflow specific profile {REPO / 'profiles' / 'default'}" in out

    stats = out.split("Job stats:", 1)[1]
    counts = {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", stats, re.MULTILINE)}
    assert counts["train"] == 1819 and counts["download"] == 4 and counts["partition"] == 9

    # each rule's block: "rule NAME:" ... "resources: ..." ; training jobs ask SLURM for one GPU each
    blocks = re.findall(r"^rule (\w+):\n(.*?)^Shell command: (.*?)$", out, re.MULTILINE | re.DOTALL)
    train = [(body, shell) for name, body, shell in blocks if name == "train"]
    assert len(train) == counts["train"]
    for body, shell in train:
        resources = re.search(r"resources: (.*)", body).group(1)
        for part in ("gpu=1", "slurm_partition=<gpu-partition>", "slurm_account=<account>", "cpus_per_task=2", "mem_mb=16000", "runtime=360"):
            assert part in resources, resources
        assert "--device cuda:auto" in shell  # one visible GPU per SLURM job: used without locking
    download = next(body for name, body, _ in blocks if name == "download")
    assert "gpu=" not in download and "slurm_partition=<cpu-partition>" in download
    assert not list(tmp_path.glob("results/**/*"))  # a dry run writes nothing
