"""The Snakemake workflow: config validation, the paper's plan (dry run), and the smoke run end to end.

Every snakemake call runs in a temporary working directory (`--directory`), so nothing is written
into the repository. The end-to-end test runs the real `fedgmh` CLI on the embedded `digits` set.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
SNAKEFILE = REPO / "Snakefile"
PAPER = REPO / "config" / "config.yaml"
SMOKE = REPO / "config" / "smoke.yaml"


def snakemake(workdir: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    # the `fedgmh` console script of this interpreter's environment must be on PATH for the rules
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(SNAKEFILE), "--directory", str(workdir), *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout, cwd=workdir)


def job_counts(output: str) -> dict[str, int]:
    """The 'Job stats' table of a snakemake (dry) run."""
    section = output.split("Job stats:", 1)[1]
    counts = {}
    for line in section.splitlines():
        match = re.match(r"^(\w+)\s+(\d+)$", line.strip())
        if match:
            counts[match.group(1)] = int(match.group(2))
        elif counts and not line.strip():
            break
    return counts


@pytest.mark.parametrize(
    ("override", "key", "words"),
    [
        (["clients=abc"], "clients", "is not of type 'integer'"),
        (["device=gpu"], "device", "does not match"),
        (["bogus_key=1"], "(top level)", "'bogus_key' was unexpected"),
    ],
)
def test_schema_rejects_bad_config_with_readable_message(tmp_path: Path, override: list[str], key: str, words: str) -> None:
    result = snakemake(tmp_path, "-n", "all_tables", "--cores", "1", "--configfile", str(SMOKE), "--config", *override, timeout=120)
    assert result.returncode != 0
    out = result.stdout + result.stderr
    assert "invalid configuration" in out
    assert f"{key}: " in out and words in out, out[-2000:]


def test_bad_nested_value_and_figure_reference(tmp_path: Path) -> None:
    config = yaml.safe_load(SMOKE.read_text())
    config["experiments"]["table2"]["settings"][0]["alpha"] = -1
    config["experiments"]["table2"]["algorithms"].append("fedsomething")
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(config))
    result = snakemake(tmp_path, "-n", "all_tables", "--cores", "1", "--configfile", str(bad), timeout=120)
    out = result.stdout + result.stderr
    assert result.returncode != 0
    assert "experiments.table2.settings[0].alpha: -1 is less than or equal to the minimum of 0" in out
    index = len(config["experiments"]["table2"]["algorithms"]) - 1
    assert f"experiments.table2.algorithms[{index}]: 'fedsomething' is not one of" in out

    config = yaml.safe_load(SMOKE.read_text())
    config["figures"]["curves_table2"]["setting"] = "digits_c9_a0.5"
    bad.write_text(yaml.safe_dump(config))
    result = snakemake(tmp_path, "-n", "all_tables", "--cores", "1", "--configfile", str(bad), timeout=120)
    assert result.returncode != 0
    assert "figures.curves_table2.setting 'digits_c9_a0.5' is not a setting of table2" in result.stdout + result.stderr


def test_paper_config_dry_run_plans_the_paper(tmp_path: Path) -> None:
    result = snakemake(tmp_path, "-n", "all_tables", "--cores", "2", "--configfile", str(PAPER), timeout=180)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    counts = job_counts(result.stdout + result.stderr)
    # Table 2: 12 algorithms x 6 settings x 5 seeds = 360;
    # Table 5: 4 algorithms x 3 settings x 5 seeds = 60, of which FedGMH's 15 are Table 2's runs -> 45.
    assert counts["train"] == 12 * 6 * 5 + (4 - 1) * 3 * 5 == 405
    assert counts["download"] == 3 and counts["partition"] == 6
    assert counts["aggregate"] == 2 and counts["table"] == 2
    assert not list(tmp_path.glob("results/**/*.csv"))  # a dry run writes nothing

    result = snakemake(tmp_path, "-n", "-p", "all", "--cores", "2", "--configfile", str(PAPER), timeout=180)
    assert result.returncode == 0
    out = result.stdout + result.stderr
    assert job_counts(out)["curves"] == 2
    # the command line of a FedGMH run of Table 5 on CIFAR-100, with the paper's hyper-parameters
    command = next(line for line in out.splitlines() if "--algorithm gmh_a" in line and "cifar100_c5_a0.5.npz" in line)
    for part in ("--rounds 300", "--join-ratio 0.2", "--local-epochs 2", "--batch-size 100", "--lr 0.01",
                 "--set beta=0.5", "--set eta_h=1.0", "--threads 2", "results/paper/runs/table5/cifar100_c5_a0.5/gmh_a/seed"):
        assert part in command, command
    # FedGMH's Table 5 cells come from the Table 2 runs (trained once)
    assert "results/paper/runs/table5/cifar100_c5_a0.5/fedgmh" not in out
    assert "results/paper/runs/table2/cifar100_c5_a0.5/fedgmh/seed4" in out


def test_gpu_resource_only_for_cuda(tmp_path: Path) -> None:
    result = snakemake(tmp_path, "-n", "all_runs", "--cores", "2", "--configfile", str(SMOKE), "--config", "device=cuda",
                       "--resources", "gpu=1", timeout=120)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert re.search(r"resources: .*gpu=1", result.stdout + result.stderr)
    result = snakemake(tmp_path, "-n", "all_runs", "--cores", "2", "--configfile", str(SMOKE), "--config", "device=cpu", timeout=120)
    assert result.returncode == 0
    assert "gpu=" not in result.stdout + result.stderr


def test_smoke_workflow_end_to_end(tmp_path: Path) -> None:
    """`snakemake all` with the smoke config and the real CLI: tables, CSVs, figures, heat-maps."""
    result = snakemake(tmp_path, "all", "--cores", "2", "--configfile", str(SMOKE), timeout=420)
    assert result.returncode == 0, (result.stdout + result.stderr)[-5000:]
    art = tmp_path / "paper_artifacts" / "smoke"
    config = yaml.safe_load(SMOKE.read_text())
    from fedgmh.algorithms import REGISTRY

    names = {name: cls.display_name for name, cls in REGISTRY.items()}
    for experiment, spec in config["experiments"].items():
        tex = (art / f"{experiment}.tex").read_text()
        assert r"\toprule" in tex and r"\bottomrule" in tex and r"\textbf" in tex
        table = pd.read_csv(art / f"{experiment}.csv")
        expected = [names[a] for a in spec["algorithms"]]
        assert sorted(table["Method"]) == sorted(expected)  # one row per algorithm
        assert len(table.columns) == 1 + len(spec["settings"])
        for method in expected:
            assert sum(line.startswith(method + " &") for line in tex.splitlines()) == 1
        cells = pd.read_csv(art / f"{experiment}.cells.csv")
        assert (cells["n_seeds"] == len(config["seeds"])).all()
        assert cells["mean"].between(0, 100).all()
        assert f"{len(config['seeds'])} seeds" in tex and f"{config['clients']} clients" in tex
    for figure in config["figures"]:
        assert (art / f"{figure}.pdf").read_bytes().startswith(b"%PDF")
        assert (art / f"{figure}.png").read_bytes().startswith(b"\x89PNG")
    settings = {(s["dataset"], s["classes_per_client"], s["alpha"]) for e in config["experiments"].values() for s in e["settings"]}
    assert len(list((art / "partitions").glob("*.pdf"))) == len(settings)
    results = pd.read_csv(tmp_path / "results" / "smoke" / "aggregate" / "table5.results.csv")
    assert len(results) == 4 * len(config["seeds"])
    # Table 5's FedGMH runs are Table 2's
    assert results.loc[results["algorithm"] == "fedgmh", "run_dir"].str.contains("/table2/").all()
    assert (results["rounds"] == config["rounds"]).all()
    logs = list((tmp_path / "logs" / "smoke" / "train").rglob("*.log"))
    table2, table5 = config["experiments"]["table2"], config["experiments"]["table5"]
    # one log per training run; Table 5's FedGMH runs are Table 2's
    assert len(logs) == len(config["seeds"]) * (len(table2["algorithms"]) * len(table2["settings"]) + 3 * len(table5["settings"]))

    # nothing to do the second time
    again = snakemake(tmp_path, "all", "--cores", "2", "--configfile", str(SMOKE), "-n", timeout=120)
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr
