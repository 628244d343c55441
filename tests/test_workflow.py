"""The Snakemake workflow: config validation, the paper's plan (dry run), and the smoke run end to end.

Every snakemake call runs in a temporary working directory (`--directory`), so nothing is written
into the repository. The end-to-end test runs the real `fedgmh` CLI on the embedded `digits` set.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import SMOKE, SNAKEFILE, artifact_jobs, job_counts, snakemake

REPO = Path(__file__).resolve().parents[1]
PAPER = REPO / "config" / "config.yaml"
TABLE2_FULL = REPO / "config" / "table2_full.yaml"


@pytest.mark.parametrize(
    ("override", "key", "words"),
    [
        (["clients=abc"], "clients", "is not of type 'integer'"),
        (["device=gpu"], "device", "does not match"),
        (["bogus_key=1"], "bogus_key", "unknown key"),
        (["local_epoch=1", "seeds=0,1"], "local_epoch", "unknown key (did you mean 'local_epochs'?)"),
        (["seeds=0,1"], "seeds", "(a list is written in brackets: seeds=[0,1])"),
    ],
)
def test_schema_rejects_bad_config_with_readable_message(tmp_path: Path, override: list[str], key: str, words: str) -> None:
    result = snakemake(tmp_path, "-n", "all_tables", "--cores", "1", "--configfile", str(SMOKE), "--config", *override, timeout=120)
    assert result.returncode != 0
    out = result.stdout + result.stderr
    assert "invalid configuration" in out
    assert f"{key}: " in out and words in out, out[-2000:]


def test_a_wrong_typed_key_of_a_config_file_is_one_line(tmp_path: Path) -> None:
    """The schema's check says a problem once, on the key's own line (no validator dump besides it)."""
    config = yaml.safe_load(SMOKE.read_text()) | {"rounds": "many"}
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(config))
    result = snakemake(tmp_path, "-n", "all_tables", "--cores", "1", "--configfile", str(bad), timeout=120)
    out = result.stdout + result.stderr
    assert result.returncode != 0
    lines = [line for line in out.splitlines() if "many" in line]
    assert lines == ["  rounds: 'many' is not of type 'integer'"], out[-2000:]


def test_a_list_in_brackets_on_the_command_line_is_read_as_numbers(tmp_path: Path) -> None:
    result = snakemake(tmp_path, "-n", "all_tables", "--cores", "1", "--configfile", str(SMOKE), "--config", "seeds=[0,1]", timeout=120)
    assert result.returncode == 0, (result.stdout + result.stderr)[-2000:]


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
    config["figures"]["figure3"]["setting"] = "digits_c9_a0.5"
    bad.write_text(yaml.safe_dump(config))
    result = snakemake(tmp_path, "-n", "all_tables", "--cores", "1", "--configfile", str(bad), timeout=120)
    assert result.returncode != 0
    assert "figures.figure3.setting 'digits_c9_a0.5' is not a setting of table2" in result.stdout + result.stderr

    config = yaml.safe_load(SMOKE.read_text())
    config["rounds_to_target"] = {"figure": "figure9", "targets": [50]}
    config["experiments"]["audit"]["variants"]["bad/name"] = {"mix": "noncritical"}
    bad.write_text(yaml.safe_dump(config))
    result = snakemake(tmp_path, "-n", "all_tables", "--cores", "1", "--configfile", str(bad), timeout=120)
    assert result.returncode != 0
    assert "experiments.audit.variants: 'bad/name' is not allowed: use letters" in result.stdout + result.stderr
    del config["experiments"]["audit"]["variants"]["bad/name"]
    bad.write_text(yaml.safe_dump(config))
    result = snakemake(tmp_path, "-n", "all_tables", "--cores", "1", "--configfile", str(bad), timeout=120)
    assert result.returncode != 0
    assert "rounds_to_target.figure 'figure9' is not a figure" in result.stdout + result.stderr


def test_paper_config_dry_run_plans_the_paper(tmp_path: Path) -> None:
    result = snakemake(tmp_path, "-n", "all_tables", "--cores", "2", "--configfile", str(PAPER), timeout=180)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    counts = job_counts(result.stdout + result.stderr)
    # Identical runs are trained once (in the first experiment that asks for them):
    # Table 2: 12 algorithms x 6 settings x 5 seeds                          = 360
    # Table 3: 12 x 4 local epochs x 5; Table 4: 12 x 4 join ratios x 5      = 240 + 240
    # Table 5: 4 ablations x 3 settings x 5, FedGMH's are Table 2's          = 45
    # Table 6: 10 betas x 5, beta 0.5 is Table 2's; Table 7: 5 eta_h, 1.0 too = 45 + 20
    # audit: 10 variants x 3 settings x 5, the paper variant is Table 2's    = 135
    # audit_beta: 3 betas x {paper, official} x 5: paper = Tables 6/2, official 0.5 = audit's = 10
    # table2_pflib: 12 x 6 x 5 official (paper = Table 2's), FedGMH's official at alpha 0.5 = audit's = 345
    # controls: Local 6 x 5, and FedAvg, Local, FedPer, FedGMH with eval_prior=mask 4 x 6 x 5 = 150
    # fedprox_mu: mu=0.01 on MNIST ExDir(2, 0.5) x 5 (mu=0 = Table 2's FedProx)  = 5
    # table2_more: the other documents' 6 methods x 4 offline settings x 5 (the twelve = Table 2's) = 120
    # chain: pFedLA and HeurpFedLA x 2 hypernetwork lrs x 1 seed           = 4
    # table5_pflib: 4 methods x 3 settings x 5 official, every round evaluated (so not table2_pflib's FedGMH) = 60
    # cepfl_protocol: 4 methods x 2 settings (CIFAR-10, CIFAR-100; 20 clients) x 5 = 40
    assert counts["train"] == 360 + 240 + 240 + 45 + 45 + 20 + 135 + 10 + 345 + 60 + 150 + 5 + 120 + 4 + 40 == 1819
    assert counts["download"] == 4 and counts["partition"] == 9  # FashionMNIST; the chain and the two 20-client partitions
    assert counts["aggregate"] == 15 and counts["table"] == 15  # one per experiment
    assert counts["rounds_to_target"] == 1 and counts["compare"] == 1
    assert counts["uploads_to_target"] == 1  # (the layer-weight heat-maps are a figure: all_figures)
    assert not list(tmp_path.glob("results/**/*.csv"))  # a dry run writes nothing

    result = snakemake(tmp_path, "-n", "-p", "all", "--cores", "2", "--configfile", str(PAPER), timeout=180)
    assert result.returncode == 0
    out = result.stdout + result.stderr
    assert job_counts(out)["curves"] == 3 and job_counts(out)["layer_weights"] == 1  # Figures 3, 4 and CE-pFL's Fig. 7
    # the command line of a FedGMH run of Table 5 on CIFAR-100, with the paper's hyper-parameters
    command = next(line for line in out.splitlines() if "--algorithm gmh_a" in line and "cifar100_c5_a0.5.npz" in line
                   and "runs/table5/" in line)
    for part in ("--rounds 300", "--join-ratio 0.2", "--local-epochs 2", "--batch-size 100", "--lr 0.01",
                 "--set beta=0.5", "--set eta_h=1.0", "--threads 1", "results/paper/runs/table5/cifar100_c5_a0.5/gmh_a/seed",
                 "--config-name paper --experiment table5 --setting cifar100_c5_a0.5 --put-record "
                 "paper_artifacts/paper/runs/table5/cifar100_c5_a0.5/gmh_a/seed"):
        assert part in command, command
    # FedGMH's Table 5 cells come from the Table 2 runs (trained once)
    assert "results/paper/runs/table5/cifar100_c5_a0.5/fedgmh" not in out
    assert "results/paper/runs/table2/cifar100_c5_a0.5/fedgmh/seed4" in out
    # sweeps: Table 3's local epochs, Table 4's join ratio, Table 6's beta, Table 7's eta_h
    train = [line for line in out.splitlines() if line.startswith("fedgmh train") or "fedgmh train" in line]
    assert any("--local-epochs 10" in c and "runs/table3/cifar10_c2_a0.5_e10/fedcp/seed0" in c for c in train)
    assert any("--join-ratio 1 " in c and "runs/table4/cifar100_c5_a0.5_j1/fedamp/seed2" in c for c in train)
    assert any("--set beta=0.1" in c and "runs/table6/cifar100_c5_a0.5_beta0.1/fedgmh/seed0" in c for c in train)
    assert any("--set eta_h=0.01" in c and "runs/table7/cifar100_c5_a0.5_eta_h0.01/fedgmh/seed0" in c for c in train)
    # the audit: one official option per variant, and the official preset
    assert any("--set mix=noncritical --set preset=paper" in c and "runs/audit/mnist_c2_a0.5@mix=noncritical/fedgmh/seed0" in c for c in train)
    # the audit's official FedGMH runs are table2_pflib's (same run, trained once, in the first experiment)
    assert any("--set preset=official" in c and "runs/table2_pflib/cifar10_c2_a0.5@official/fedgmh/seed1" in c for c in train)
    assert not any("runs/audit/cifar10_c2_a0.5@official/fedgmh/" in c for c in train)
    # Table 5 under PFLlib's reading: preset=official with every round evaluated (Figure 4's
    # rounds to target), so FedGMH's are not table2_pflib's (the official code's last 20 rounds only)
    assert any("--algorithm gmh_oa" in c and "--set eval_last=0 --set preset=official" in c
               and "runs/table5_pflib/cifar100_c5_a0.5@official/gmh_oa/seed2" in c for c in train)
    assert any("--algorithm fedgmh" in c and "--set eval_last=0" in c
               and "runs/table5_pflib/cifar100_c5_a0.5@official/fedgmh/seed2" in c for c in train)
    assert any("--set beta=1.0" in c and "--set preset=official" in c and "runs/audit_beta/cifar100_c5_a0.5_beta1@official" in c
               for c in train)
    assert "runs/audit/mnist_c2_a0.5@paper" not in out  # the paper variant is Table 2's FedGMH
    command = next(line for line in out.splitlines() if "fedgmh aggregate --experiment audit " in line)
    assert "--variant paper paper paper paper paper mix=noncritical" in command
    jobs = dict(artifact_jobs(out))
    assert jobs["rounds_to_target"]["params"]["targets"] == [70, 75] and jobs["rounds_to_target"]["params"]["paper"]["fedgmh"] == [68, 185]
    assert jobs["compare"]["input"]["reference"] == [str(REPO / "reference" / "fedgmh_paper_tables.csv")]  # found next to the Snakefile


def test_table2_full_plans_the_paper_runs_of_table2s_offline_columns(tmp_path: Path) -> None:
    """config/table2_full.yaml: 4 settings x 12 methods x 5 seeds on GPU slots, and each run is the
    paper config's run of that cell (same protocol and options, same name: same folders and run keys)."""
    full, paper = yaml.safe_load(TABLE2_FULL.read_text()), yaml.safe_load(PAPER.read_text())
    shared = ("name", "clients", "train_ratio", "partition_seed", "rounds", "join_ratio", "local_epochs", "batch_size", "lr",
              "seeds", "train_options", "reference_tables")
    assert {k: full[k] for k in shared} == {k: paper[k] for k in shared}
    assert full["algorithm_options"] == {"fedgmh": paper["algorithm_options"]["fedgmh"]}
    assert full["experiments"]["table2"]["algorithms"] == paper["experiments"]["table2"]["algorithms"]
    assert full["experiments"]["table2"]["settings"] == [s for s in paper["experiments"]["table2"]["settings"] if s["dataset"] != "cifar10"]

    result = snakemake(tmp_path, "-n", "-p", "all_tables", "--cores", "16", "--configfile", str(TABLE2_FULL), "--resources", "gpu=8",
                       timeout=180)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    counts = job_counts(out)
    assert counts["train"] == 4 * 12 * 5 == 240 and "run_record" not in counts  # each train job files its own record
    assert counts["download"] == 2 and counts["partition"] == 4 and counts["table"] == 1 and counts["compare"] == 1
    train = [line for line in out.splitlines() if "fedgmh train" in line]
    assert len(train) == 240 and all("--device cuda:auto --jobs-per-gpu 8 --threads 1" in c for c in train)
    assert set(re.findall(r"resources: .*?\b(gpu=\d+)", out)) == {"gpu=1"}
    assert any("--algorithm fedcp --rounds 300" in c and "--out results/paper/runs/table2/cifar100_c5_a5/fedcp/seed4" in c for c in train)
    # where the records are put, by the train job itself
    assert any("--put-record paper_artifacts/paper/runs/table2/mnist_c2_a0.5/fedgmh/seed0 >" in c for c in train)


def test_the_dag_is_built_without_torch_and_without_flags(tmp_path: Path) -> None:
    """`snakemake all_tables` plans with no flag (the workflow profile gives --cores) and without
    importing torch: here a `torch` that fails when imported comes first on the path. Device auto
    too: whether a GPU is there is told without torch. The working directory is a copy of .test, the
    workflow catalog's test layout: its config/config.yaml is the smoke config, found with no --configfile."""
    import shutil

    fake = tmp_path / "fake" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('torch was imported while the DAG was built')\n")
    env_path = os.pathsep.join([str(fake.parent), os.environ.get("PYTHONPATH", "")])
    workdir = tmp_path / ".test"
    shutil.copytree(REPO / ".test", workdir)  # the link to config/smoke.yaml copied as the file
    assert (workdir / "config" / "config.yaml").read_text() == SMOKE.read_text()
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "--snakefile", str(SNAKEFILE), "--directory", str(workdir), "-n", "all_tables",
         "--config", "device=auto"],
        capture_output=True, text=True, timeout=300, cwd=workdir,
        env=dict(os.environ, PYTHONPATH=env_path, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"),
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    assert "workflow specific profile" in out and job_counts(out)["train"] == 62
    # BENCHMARKS.md's smoke run counts these jobs
    stated = re.search(r"from a clean state \((\d+) jobs, (\d+) training runs\)", " ".join((REPO / "BENCHMARKS.md").read_text().split()))
    assert stated and [int(n) for n in stated.groups()] == [job_counts(out)["total"], job_counts(out)["train"]]


def test_a_failed_job_shows_its_one_line_reason(tmp_path: Path) -> None:
    """The workflow profile's show-failed-logs: a job that fails prints its log, so the command's one-line
    error is in Snakemake's own output, not only in the log file (here a dataset file that is not one)."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "digits.npz").write_bytes(b"not a dataset")
    result = snakemake(tmp_path, "results/smoke/partitions/digits_c2_a0.5.npz", "--cores", "1", "--configfile", str(SMOKE),
                       timeout=600)
    out = result.stdout + result.stderr
    assert result.returncode != 0
    log = (tmp_path / "logs" / "smoke" / "partition" / "digits_c2_a0.5.log").read_text().strip().splitlines()
    assert len(log) == 1 and log[0].startswith("fedgmh partition: error: "), log
    assert log[0] in out, out[-3000:]


def test_the_smoke_run_leaves_a_clone_clean() -> None:
    """Every folder the smoke run writes (README: the smoke command, then its HTML report under
    results/smoke/) is ignored by git and holds no tracked file, so `git status` stays clean."""
    from conftest import load_config as load

    from fedgmh.plan import Plan

    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    smoke = Plan(load("smoke.yaml"), basedir=REPO)
    folders = [smoke.results, smoke.logs, smoke.artifacts, smoke.data, ".snakemake"]
    folders += [f".test/{folder}" for folder in folders]  # snakemake --directory .test (the catalog's test layout)
    for folder in folders:
        probe = subprocess.run(["git", "check-ignore", "-q", f"{folder}/report.html"], cwd=REPO)
        assert probe.returncode == 0, f"{folder}/ is not ignored by git"
    tracked = subprocess.run(["git", "ls-files", "--", *folders], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert tracked == "", tracked
    assert subprocess.run(["git", "check-ignore", "-q", ".test/config/config.yaml"], cwd=REPO).returncode == 1


def test_the_mini_run_leaves_a_clone_clean(tmp_path: Path) -> None:
    """The README's mini run writes its records and work files to ignored folders and rewrites the committed
    paper_artifacts/mini/ byte for byte: here its per-client figure (dots jittered from a fixed seed), drawn as
    the workflow draws it from the committed records, is the committed one."""
    from conftest import load_config as load

    from fedgmh import report
    from fedgmh.plan import Plan
    from fedgmh.report.clients import plot_client_accuracy

    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    config = load("mini.yaml")
    mini = Plan(config, basedir=REPO)
    for folder in (mini.results, mini.logs, mini.data, ".snakemake"):
        assert subprocess.run(["git", "check-ignore", "-q", f"{folder}/probe"], cwd=REPO).returncode == 0, f"{folder}/ is tracked"
    experiment = config.get("clients_figure", "table2")
    records = [str(REPO / mini.artifacts / "runs" / Path(run_dir).relative_to(Path(mini.results) / "runs"))
               for run_dir in mini.experiment_run_dirs(experiment)]
    results, _ = report.aggregate_runs(records, experiment=experiment)
    title = f"Per-client test accuracy: {config['experiments'][experiment].get('title', experiment)}"
    drawn = {suffix: tmp_path / f"client_accuracy.{suffix}" for suffix in ("pdf", "png", "csv")}
    plot_client_accuracy(results, drawn["pdf"], drawn["png"], csv=drawn["csv"], round_="best", title=title)
    for suffix, path in drawn.items():
        assert path.read_bytes() == (REPO / mini.artifacts / f"client_accuracy.{suffix}").read_bytes(), suffix


def test_warm_train_runs_the_training_jobs_on_one_server_that_ends_with_snakemake(tmp_path: Path) -> None:
    """config warm_train (on in the smoke config): the training job runs on the warm server the workflow
    started, writes its own log as before, and the server and its socket are gone when Snakemake ends."""
    assert yaml.safe_load(SMOKE.read_text())["warm_train"] is True
    run = "table2/digits_c2_a0.5/fedavg/seed0"
    result = snakemake(tmp_path, f"results/smoke/stored/{run}.done", "--cores", "1", "--configfile", str(SMOKE), timeout=600)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    served = (tmp_path / "logs" / "smoke" / "warm-server.log").read_text().splitlines()
    listening = re.match(r"fedgmh serve: listening on (\S+) \(pid (\d+)\)", served[0])
    child = next(line.split(":")[0] for line in served if f"--out results/smoke/runs/{run} " in line)
    assert f"{child}: exit status 0" in served
    assert "fedavg: best test accuracy" in (tmp_path / "logs" / "smoke" / "train" / f"{run}.log").read_text()
    assert not os.path.exists(os.path.dirname(listening.group(1)))
    with pytest.raises(ProcessLookupError):
        os.kill(int(listening.group(2)), 0)


def test_the_warm_server_leaves_no_folder_when_snakemake_is_killed(tmp_path: Path) -> None:
    """Snakemake and its jobs killed outright (no hook runs): the server sees its parent gone, stops
    its runs and removes its socket and its folder."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(SNAKEFILE), "--directory", str(tmp_path), "all_runs",
               "--cores", "1", "--configfile", str(SMOKE)]
    run = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True)
    log = tmp_path / "logs" / "smoke" / "warm-server.log"
    try:
        deadline = time.monotonic() + 300
        while not (log.exists() and "listening" in log.read_text()):
            assert run.poll() is None and time.monotonic() < deadline, "no warm server started"
            time.sleep(0.2)
    finally:
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()
    listening = re.match(r"fedgmh serve: listening on (\S+) \(pid (\d+)\)", log.read_text())
    deadline = time.monotonic() + 60
    while os.path.exists(os.path.dirname(listening.group(1))) or _running(int(listening.group(2))):
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.2)


def _running(pid: int) -> bool:
    """Whether process `pid` exists and has not exited (an orphan's zombie may wait for a reaper)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_gpu_resource_only_for_cuda(tmp_path: Path) -> None:
    result = snakemake(tmp_path, "-n", "all_runs", "--cores", "2", "--configfile", str(SMOKE), "--config", "device=cuda",
                       "--resources", "gpu=1", timeout=120)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert re.search(r"resources: .*gpu=1", result.stdout + result.stderr)
    result = snakemake(tmp_path, "-n", "all_runs", "--cores", "2", "--configfile", str(SMOKE), "--config", "device=cpu", timeout=120)
    assert result.returncode == 0
    assert "gpu=" not in result.stdout + result.stderr


def test_the_comparison_takes_the_configs_margin_and_alpha(tmp_path: Path) -> None:
    """Config comparison_margin / comparison_alpha reach `fedgmh compare`; an alpha the verdicts
    cannot use is refused by the dry run, naming the key."""
    result = snakemake(tmp_path, "-n", "-p", "all_tables", "--cores", "1", "--configfile", str(SMOKE), "--config",
                       "comparison_margin=0.25", "comparison_alpha=0.1", timeout=120)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    assert dict(artifact_jobs(out))["compare"]["params"] == {"margin": 0.25, "alpha": 0.1}
    result = snakemake(tmp_path, "-n", "all_tables", "--cores", "1", "--configfile", str(SMOKE), "--config", "comparison_alpha=0.5",
                       timeout=120)
    assert result.returncode != 0
    assert "comparison_alpha: 0.5 is greater than or equal to the maximum of 0.5" in result.stdout + result.stderr


def test_smoke_workflow_end_to_end(tmp_path: Path) -> None:
    """`snakemake all` with the smoke config and the real CLI: every table, figure and report, then the HTML report."""
    result = snakemake(tmp_path, "all", "--cores", "2", "--configfile", str(SMOKE), timeout=2700)
    assert result.returncode == 0, (result.stdout + result.stderr)[-5000:]
    art = tmp_path / "paper_artifacts" / "smoke"
    config = yaml.safe_load(SMOKE.read_text())
    from fedgmh.cards import all_cards

    names = {name: found.display_name for name, found in all_cards().items()}
    assert {"table2", "table3", "table4", "table5", "table6", "table7", "audit", "audit_beta"} <= set(config["experiments"])
    for experiment, spec in config["experiments"].items():
        tex = (art / f"{experiment}.tex").read_text()
        assert r"\toprule" in tex and r"\bottomrule" in tex and r"\textbf" in tex
        table = pd.read_csv(art / f"{experiment}.csv")
        seeds = spec.get("seeds", config["seeds"])
        if "variants" in spec and len(spec["algorithms"]) == 1:  # rows = variants, in config order
            assert list(table["Variant"]) == list(spec["variants"])
            rows = [v.replace("_", r"\_") for v in spec["variants"]]
        elif "variants" in spec:  # rows = "Method (variant)", each method's variants together
            rows = [f"{names[a]} ({v})" for a in spec["algorithms"] for v in spec["variants"]]
            assert sorted(table["Variant"]) == sorted(rows)
            rows = [r.replace("_", r"\_") for r in rows]
        else:  # rows = algorithms
            rows = [names[a] for a in spec["algorithms"]]
            assert sorted(table["Method"]) == sorted(rows)
            rows = [r.replace("&", r"\&") for r in rows]  # LaTeX: CE-pFL (Huang \& Chen 2025)
        assert len(table.columns) == 1 + len(spec["settings"])  # one column per setting
        for row in rows:
            assert sum(line.startswith(row + " &") for line in tex.splitlines()) == 1, (row, tex)
        cells = pd.read_csv(art / f"{experiment}.cells.csv")
        assert len(cells) == len(rows) * len(spec["settings"])
        assert (cells["n_seeds"] == len(seeds)).all()
        assert cells["mean"].between(0, 100).all()
        assert f"{len(seeds)} seed{'s' if len(seeds) > 1 else ''}" in tex
        assert all(f"{setting.get('clients', config['clients'])} clients" in tex for setting in spec["settings"])
    assert "E=2" in (art / "table3.tex").read_text() and r"$\beta$=0.1" in (art / "table6.tex").read_text()
    for figure in ("figure3", "figure4", "client_accuracy"):
        assert (art / f"{figure}.pdf").read_bytes().startswith(b"%PDF")
        assert (art / f"{figure}.png").read_bytes().startswith(b"\x89PNG")
    clients = pd.read_csv(art / "client_accuracy.csv")  # every Table 2 run's clients.csv
    assert len(clients) == len(config["experiments"]["table2"]["algorithms"]) * len(config["seeds"]) * config["clients"]
    settings = {(s["dataset"], s["classes_per_client"], s["alpha"]) for e in config["experiments"].values() for s in e["settings"]}
    assert len(list((art / "partitions").glob("*.pdf"))) == len(settings)
    # rounds to target: one row per method of Figure 3, the smoke config's targets
    rounds = pd.read_csv(art / "rounds_to_target.csv")
    assert len(rounds) == len(config["experiments"]["table2"]["algorithms"])
    targets = [f"{t:g}%" for t in config["rounds_to_target"]["targets"]]
    assert [c for c in rounds.columns if c.endswith("mean curve")] == [f"{t} mean curve" for t in targets]
    assert r"\toprule" in (art / "rounds_to_target.tex").read_text()
    # section 2.3 costs: the paper's model figures, and measured bytes for every Table 2 run
    costs = pd.read_csv(art / "costs.csv")
    cifar10 = costs[(costs["kind"] == "model") & (costs["dataset"] == "cifar10")]
    assert cifar10.set_index("quantity").loc["model", "analytic"] == pytest.approx(3431.79, abs=0.01)
    measured = costs[costs["measured"].notna() & (costs["kind"] != "model")]
    assert set(measured["algorithm"]) == set(config["experiments"]["table2"]["algorithms"])
    assert r"\toprule" in (art / "costs.tex").read_text()
    # the comparison: digits is not in the paper, so every one of its 195 cells is 'not run'
    comparison = pd.read_csv(art / "comparison.csv")
    assert len(comparison) == 195 and (comparison["status"] == "not run").all()
    md = (art / "comparison.md").read_text()
    assert "| **all** | 195 | 0 | 0 | 0 | 0 | 0 | 0 | 195 |" in md and "| table3 | 48 | 0 | 0 | 0 | 0 | 0 | 0 | 48 |" in md
    assert r"\begin{longtable}" in (art / "comparison.tex").read_text()
    # the paper's claims: every one but section 2.3's costs (computed from the models: costs.csv) is about
    # MNIST / CIFAR cells, none of which the smoke config runs
    claims = pd.read_csv(art / "claims.csv")
    assert len(claims) == len(yaml.safe_load((REPO / "reference" / "fedgmh_paper_claims.yaml").read_text())["claims"])
    costs = claims["test"] == "cost"
    assert (claims.loc[~costs, "verdict"] == "not run").all() and set(claims.loc[costs, "verdict"]) == {"holds", "does not hold"}
    assert f"(of {len(claims)}); of the {costs.sum()} decided" in (art / "claims.md").read_text()

    results = pd.read_csv(tmp_path / "results" / "smoke" / "aggregate" / "table5.results.csv")
    assert len(results) == 4 * len(config["seeds"])
    # Table 5's FedGMH runs are Table 2's
    assert results.loc[results["algorithm"] == "fedgmh", "run_dir"].str.contains("/table2/").all()
    assert (results["rounds"] == config["rounds"]).all()
    audit = pd.read_csv(tmp_path / "results" / "smoke" / "aggregate" / "audit.results.csv")
    assert list(audit["variant"]) == list(config["experiments"]["audit"]["variants"])
    assert audit.loc[audit["variant"] == "paper", "run_dir"].str.contains("/table2/").all()
    # one log per training run: Table 2 (12 x 2 seeds) + Table 5 (3 ablations x 2 seeds) + one seed of:
    # Table 3 and 4 (2 methods x 1 new value), Table 6 and 7 (1 new value), audit (5 new variants),
    # audit_beta (official beta 0.1; the others are Table 6's, Table 2's and the audit's runs),
    # table2_pflib (3 official baselines; FedGMH's official run is the audit's) and controls (Local,
    # and the 4 methods with eval_prior=mask; the plain FedAvg, FedPer and FedGMH are Table 2's)
    logs = list((tmp_path / "logs" / "smoke" / "train").rglob("*.log"))
    # table2_more (the other documents' 6 methods; the twelve are Table 2's), chain (pFedLA and
    # HeurpFedLA) and cepfl_protocol (FedAvg, FedRep, FedBABU, CE-pFL on 20 clients)
    assert len(logs) == 24 + 6 + 2 + 2 + 1 + 1 + 5 + 1 + 3 + 5 + 6 + 2 + 4 == 62
    # every run's record travels with the artifacts, identical to the run's own files
    records = sorted((art / "runs").rglob("run.json"))
    assert len(records) == 62
    assert sorted({p.name for p in (art / "runs").rglob("*") if p.is_file()}) == [
        "adaptation.csv", "clients.csv", "cluster_rounds.csv", "layer_weights.csv", "metrics.csv", "participations.csv",
        "run.json"]
    # the algorithms' own tables (extra_records) travel with their records, and only theirs
    assert {p.parent.parent.name for p in (art / "runs").rglob("adaptation.csv")} == {"fedbabu", "perfedavg"}
    assert {p.parent.parent.name for p in (art / "runs").rglob("layer_weights.csv")} == {"pfedla", "heurpfedla"}
    for table in ("participations.csv", "cluster_rounds.csv"):
        assert {p.parent.parent.name for p in (art / "runs").rglob(table)} == {"cepfl"}
    # issue 12's artifacts: CE-pFL's Table 1 form from every run's clients_up, pFedLA's heat-maps
    uploads = pd.read_csv(art / "uploads_to_target.csv")
    assert set(uploads["Method"]) == {names[a] for a in config["experiments"]["cepfl_protocol"]["algorithms"]}
    assert (art / "layer_weights.png").read_bytes().startswith(b"\x89PNG")
    weights = pd.read_csv(art / "layer_weights.csv")
    assert set(weights["algorithm"]) == {"pfedla", "heurpfedla"} and weights["client"].nunique() == config["clients"]
    for record in records:
        experiment, setting = record.parent.relative_to(art / "runs").parts[:2]
        labels = {"config_name": "smoke", "experiment": experiment, "setting": setting}
        labels.update({"variant": setting.split("@")[1]} if "@" in setting else {})
        assert json.loads(record.read_text())["workflow"] == labels
    for record in records[:3]:
        run_dir = tmp_path / "results" / "smoke" / record.parent.relative_to(art)
        for name in ("run.json", "metrics.csv", "clients.csv"):
            assert (record.parent / name).read_bytes() == (run_dir / name).read_bytes()
    assert (art / "partitions" / "digits_c2_a0.5.png").read_bytes().startswith(b"\x89PNG")

    # nothing to do the second time
    again = snakemake(tmp_path, "all", "--cores", "2", "--configfile", str(SMOKE), "-n", timeout=120)
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr

    # the self-contained HTML report of what was made
    report = snakemake(tmp_path, "all", "--configfile", str(SMOKE), "--report", "report.html", timeout=300)
    assert report.returncode == 0, (report.stdout + report.stderr)[-3000:]
    html = (tmp_path / "report.html").read_text(errors="replace")
    assert len(html) > 100_000
    for name in ("figure3.png", "figure4.png", "table2.csv", "table7.tex", "audit.csv", "rounds_to_target.csv", "comparison.md",
                 "digits_c2_a0.5.png"):
        assert name in html, name


def test_rerun_after_a_crash_recomputes_only_what_is_missing(tmp_path: Path) -> None:
    """Kill snakemake (and its jobs) with SIGKILL mid-way through training; `--unlock`, then the
    same command again: finished runs are kept untouched, unfinished ones are trained."""
    import signal
    import time

    config = yaml.safe_load(SMOKE.read_text())  # Table 2 of the smoke config, one seed: 12 runs
    config["experiments"] = {"table2": {**config["experiments"]["table2"], "seeds": [0]}}
    config["figures"] = {"figure3": config["figures"]["figure3"]}
    config.update(uploads_to_target=None, layer_weights=None)  # of experiments left out
    (tmp_path / "crash.yaml").write_text(yaml.safe_dump(config))
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    target = ["all_runs", "--cores", "2", "--configfile", str(tmp_path / "crash.yaml")]
    log = tmp_path / "crashing.log"
    with open(log, "w") as output:
        crashing = subprocess.Popen(
            [sys.executable, "-m", "snakemake", "--snakefile", str(SNAKEFILE), "--directory", str(tmp_path), *target],
            cwd=tmp_path, env=env, start_new_session=True, stdout=output, stderr=subprocess.STDOUT,
        )
        finished_line = re.compile(r"^Finished jobid: (\d+) \(Rule: train\)$", re.MULTILINE)
        deadline = time.monotonic() + 600
        while len(finished_line.findall(log.read_text())) < 3 and time.monotonic() < deadline and crashing.poll() is None:
            time.sleep(0.1)
        os.killpg(crashing.pid, signal.SIGKILL)
        crashing.wait()
    # the runs snakemake finished (it says so in its log); a job killed after its run.json was
    # written but before it ended is unfinished to snakemake, and trained again
    text = log.read_text()
    out_dirs = dict((jobid, run_dir) for run_dir, jobid in re.findall(
        r"^(?:local)?rule train:\n    input: .*\n    output: (\S+)/metrics\.csv, .*\n(?:    .*\n)*?    jobid: (\d+)$", text, re.MULTILINE))
    records = [tmp_path / out_dirs[jobid] / "run.json" for jobid in finished_line.findall(text)]
    finished = {p: p.stat().st_mtime_ns for p in records}  # nothing is ever half-written: run.json is written last
    assert 3 <= len(finished) < 12, len(finished)
    assert all((p.parent / "metrics.csv").stat().st_size > 0 for p in finished)
    runs = tmp_path / "results" / "smoke" / "runs"

    assert snakemake(tmp_path, "--unlock", *target[3:], timeout=120).returncode == 0
    again = snakemake(tmp_path, *target, "--rerun-incomplete", timeout=1500)
    assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
    assert job_counts(again.stdout + again.stderr).get("train") == 12 - len(finished)
    assert {p: p.stat().st_mtime_ns for p in finished} == finished
    assert len(list(runs.rglob("run.json"))) == 12
    # no temporaries left anywhere (a killed job's are removed when it runs again)
    assert not [p for p in runs.rglob("*") if p.is_file() and (p.name.startswith(".") or p.name.endswith(".tmp"))]


def test_snakemake_from_a_subfolder_says_to_run_from_the_repository_root() -> None:
    """`snakemake -s ../Snakefile` in docs/ stops before planning, naming the root, instead of writing results there."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    result = subprocess.run([sys.executable, "-m", "snakemake", "-s", "../Snakefile", "-n", "all_tables", "--configfile",
                             "../config/smoke.yaml"], cwd=REPO / "docs", capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode != 0
    assert f"a subfolder of the repository: run from the repository root ({REPO})" in result.stdout + result.stderr
    assert not (REPO / "docs" / "results").exists() and not (REPO / "docs" / ".snakemake").exists()


def test_a_gpu_run_without_resources_gets_the_gpu_slots_as_its_limit(tmp_path: Path) -> None:
    """`snakemake all_tables --cores 8` on a GPU machine (here device cuda, which names a GPU): the training jobs at
    once are the GPUs x jobs_per_gpu without `--resources gpu=N`; with it, N is the user's."""
    default = snakemake(tmp_path, "-n", "all_runs", "--cores", "8", "--configfile", str(SMOKE), "--config", "device=cuda",
                        "jobs_per_gpu=3", timeout=120)
    out = default.stdout + default.stderr
    assert default.returncode == 0, out[-2000:]
    assert "training jobs at once: 3 (GPUs x jobs_per_gpu" in out  # no GPU shows here: device cuda counts one
    given = snakemake(tmp_path, "-n", "all_runs", "--cores", "8", "--resources", "gpu=5", "--configfile", str(SMOKE),
                      "--config", "device=cuda", "jobs_per_gpu=3", timeout=120)
    assert given.returncode == 0 and "training jobs at once" not in given.stdout + given.stderr
