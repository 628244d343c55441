"""The run records committed under paper_artifacts/ are results: run.json is each run's one record,
filed where its labels say, and the workflow's training jobs find them in the store (no retraining).

The fast checks read the records only; the slow one rebuilds, from the real data of the offline
mirror, the run key of every training job of the configs whose records are committed, exactly as
`fedgmh train` builds it from the job's own arguments, and looks it up in the store.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedgmh import store

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "paper_artifacts"
RECORDS = sorted(ARTIFACTS.glob("*/runs/**/run.json"))


def test_every_committed_record_is_one_run_json_filed_by_its_labels() -> None:
    assert len(RECORDS) >= 81  # mini and table2_mnist at least
    runs, problems = store.scan([ARTIFACTS])
    assert problems == [] and len(runs) == len(RECORDS) and store.conflicts(runs) == []
    for path in RECORDS:
        config_name, _, experiment, setting = path.relative_to(ARTIFACTS).parts[:4]
        labels = {"config_name": config_name, "experiment": experiment, "setting": setting}
        labels.update({"variant": setting.split("@")[1]} if "@" in setting else {})
        assert json.loads(path.read_text())["workflow"] == labels, path
        assert {p.name for p in path.parent.iterdir()} == {"run.json", "metrics.csv", *store.optional_files(path.parent)}, path


#: the figures of paper_artifacts/paper/so_far/, compared by name only: their bytes are matplotlib's
FIGURE_SUFFIXES = (".pdf", ".png")


def test_the_committed_comparison_so_far_is_what_the_committed_records_give(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """paper_artifacts/paper/so_far/ is regenerated (`snakemake so_far`) whenever a full-protocol record is
    committed: the same files, and every table, comparison and claim the same text."""
    from fedgmh.so_far import SoFar

    monkeypatch.chdir(REPO)
    so_far = SoFar.discover()
    so_far.write(tmp_path)
    committed = ARTIFACTS / "paper" / "so_far"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(so_far.outputs()) == sorted(p.name for p in committed.iterdir())
    for name in so_far.outputs():
        if not name.endswith(FIGURE_SUFFIXES):
            assert (tmp_path / name).read_text() == (committed / name).read_text(), \
                f"{name} is out of date: run `snakemake so_far --cores 1` and commit paper_artifacts/paper/so_far/"


def test_the_comparison_so_far_takes_a_run_held_by_both_configs_once_from_paper(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    from fedgmh.so_far import SoFar

    record = ARTIFACTS / "table2_mnist" / "runs" / "table2" / "mnist_c2_a0.5" / "fedavg" / "seed0"
    for config in ("paper", "table2_mnist"):
        shutil.copytree(record, tmp_path / "paper_artifacts" / config / "runs" / record.relative_to(ARTIFACTS / "table2_mnist" / "runs"))
    shutil.copytree(REPO / "reference", tmp_path / "reference")
    monkeypatch.chdir(tmp_path)
    SoFar.discover().write("out")
    rows = (tmp_path / "out" / "table2_results.csv").read_text().splitlines()[1:]
    assert len(rows) == 1 and rows[0].endswith("paper_artifacts/paper/runs/table2/mnist_c2_a0.5/fedavg/seed0")


@pytest.mark.slow
@pytest.mark.parametrize("config_file", ["mini.yaml", "table2_mnist.yaml", "table2_full.yaml"])
def test_every_committed_record_is_found_by_its_training_job(config_file: str, shared_data: Path, tmp_path: Path) -> None:
    """Each record committed for a config is reused by one of the config's training jobs (same run
    key), so a fresh clone does not train it again; and a job whose folder holds a committed record
    finds that very record. The jobs' arguments (fedgmh.plan) are parsed by `fedgmh train`'s own
    parser, the partitions made by `fedgmh partition` from the mirror's data."""
    from conftest import load_config as load

    from fedgmh.cli import build_parser, train_config
    from fedgmh.cli import main as cli_main
    from fedgmh.data import download
    from fedgmh.plan import Plan
    from fedgmh.train_resolve import planned_identity

    config = load(config_file, data_root=str(tmp_path / "data"))
    plan = Plan(config, basedir=REPO)
    partitions = {}
    for name, run in plan.partitions.items():
        download(run.dataset, tmp_path / "data", mirror=shared_data)
        partitions[name] = tmp_path / f"{name}.npz"
        assert cli_main(["partition", "--dataset", run.dataset, "--root", str(tmp_path / "data"), *plan.partition_arguments(name),
                         "--seed", str(config["partition_seed"]), "--train-ratio", str(config["train_ratio"]),
                         "--out", str(partitions[name])]) == 0
    runs, _ = store.scan([ARTIFACTS])
    parser = build_parser()
    used, problems, untrained = set(), [], []
    for run in plan.train_jobs.values():
        args = parser.parse_args(["train", *plan.train_arguments(run, str(partitions[run.partition]), 1)])
        key = store.run_key(planned_identity(train_config(args)))
        found = {stored.folder for stored in runs if stored.key == key}
        used |= found
        untrained += [run.run_dir] if not found else []
        destination = REPO / plan.record_destination(run)
        if (destination / "run.json").is_file() and destination not in found:
            problems.append(f"{run.run_dir}: the record in {destination} is of another run key")
    # the records of the config's experiments (table2_full.yaml shares its name `paper` with config.yaml's other experiments)
    committed = {folder for folder in (stored.folder for stored in runs)
                 if any(folder.is_relative_to(ARTIFACTS / plan.name / "runs" / experiment) for experiment in config["experiments"])}
    assert problems == [] and sorted(committed - used) == []
    print(f"{config_file}: {len(plan.train_jobs)} jobs, {len(plan.train_jobs) - len(untrained)} reuse a committed record, "
          f"{len(committed)} records committed; not trained yet: {untrained}")


@pytest.mark.slow
def test_the_current_code_reproduces_a_committed_record_exactly(shared_data: Path, tmp_path: Path) -> None:
    """Retrain one committed mini record (LG-FedAvg, MNIST ExDir(2, 0.5), 8 rounds: about 2 min) with
    its workflow job's own arguments: every number must come out the same, or the code changed
    results without a RESULTS_VERSION bump (docs/store.md, "Rounding-level drift"). Like with like:
    bit for bit when the record was made on the same kind of machine (fedgmh.machine.same_machine),
    else every accuracy exactly and the losses to float rounding (docs/store.md, "Three kinds of
    difference")."""
    from conftest import load_config as load

    from fedgmh.cli import main as cli_main
    from fedgmh.data import download
    from fedgmh.difference import FLOAT_LEVEL, IDENTICAL
    from fedgmh.machine import same_machine
    from fedgmh.plan import Plan

    config = load("mini.yaml", data_root=str(tmp_path / "data"), stores=[])
    plan = Plan(config, basedir=REPO)
    run = plan.train_job("table2", "mnist_c2_a0.5", "lgfedavg", 0)
    download(run.dataset, tmp_path / "data", mirror=shared_data)
    partition = tmp_path / "p.npz"
    assert cli_main(["partition", "--dataset", run.dataset, "--root", str(tmp_path / "data"), *plan.partition_arguments(run.partition),
                     "--seed", str(config["partition_seed"]), "--train-ratio", str(config["train_ratio"]), "--out", str(partition)]) == 0
    words = plan.train_arguments(run, str(partition), 1)
    words[words.index("--out") + 1] = str(tmp_path / "run")
    assert cli_main(["train", *words]) == 0
    committed, retrained = store.read_record(ARTIFACTS / "mini" / "runs" / "table2" / "mnist_c2_a0.5" / "lgfedavg" / "seed0"), \
        store.read_record(tmp_path / "run")
    difference = retrained.compare(committed)
    allowed = (IDENTICAL,) if same_machine(retrained.record, committed.record) else (IDENTICAL, FLOAT_LEVEL)
    assert retrained.key == committed.key and difference.kind in allowed, difference.describe()
    print(f"retrained vs committed: {difference.describe()}")
