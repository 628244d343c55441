"""One definition of "the same run" (fedgmh.runspec): the spec the plan gives every run of the mini,
smoke and paper configs equals the spec read back from the record its training job writes, and
the campaign, the store and snapshots compare specs."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from test_plan import load

from fedgmh import runspec, store
from fedgmh.cli import build_parser, train_config
from fedgmh.cli import main as cli_main
from fedgmh.datasets import DATASETS
from fedgmh.io import write_json
from fedgmh.partition import Partition, load_partition, save_partition
from fedgmh.plan import Plan, Run
from fedgmh.record import new_record
from fedgmh.runspec import RunSpec, exdir_meta
from fedgmh.train_resolve import planned_identity

REPO = Path(__file__).resolve().parents[1]
FINGERPRINT = "f" * 64  # the dataset's, made up: the partitions below are written without the data
PARSER = build_parser()  # `fedgmh`'s
METRICS = pd.DataFrame({"round": [0], "test_acc": [0.5], "train_loss": [np.nan]})  # a record's results, made up


def partition_args(plan: Plan, name: str, out: Path) -> list[str]:
    """The workflow's `fedgmh partition` arguments (workflow/rules/partition.smk) of a partition."""
    run = plan.partitions[name]
    return ["partition", "--dataset", run.dataset, "--root", plan.data, *plan.partition_arguments(name),
            "--seed", str(plan.config["partition_seed"]), "--train-ratio", str(plan.config["train_ratio"]), "--out", str(out)]


def stand_in_partitions(plan: Plan, folder: Path) -> dict[str, Path]:
    """A partition file for each of the plan's partitions, its meta what `fedgmh partition` writes
    from the workflow's arguments (parsed by the CLI's parser), one sample per client and split in
    place of ExDir's draw, which needs the data."""
    files = {}
    for name in plan.partitions:
        files[name] = folder / f"{name}.npz"
        args = PARSER.parse_args(partition_args(plan, name, files[name]))
        info = DATASETS[args.dataset]
        meta = exdir_meta(args.dataset, FINGERPRINT, info.num_samples, info.num_classes, args.clients, args.classes_per_client,
                          args.alpha, args.train_ratio, args.seed, args.assignment)
        save_partition(files[name], Partition(train=[np.array([2 * c]) for c in range(args.clients)],
                                              test=[np.array([2 * c + 1]) for c in range(args.clients)]), meta)
    return files


def made(partition: Path) -> dict:
    """The meta and digest of a partition file, as `fedgmh train` reads them."""
    indices, meta = load_partition(partition)
    return {**meta, "digest": indices.digest()}


def written_record(plan: Plan, run: Run, partition: Path, folder: Path) -> Path:
    """The run.json the run's training job writes, built as `fedgmh train` builds it from the job's
    own arguments (`planned_identity`, `new_record`; the results made up), in `folder`."""
    config = train_config(PARSER.parse_args(["train", *plan.train_arguments(run, str(partition), 1)]))
    record = new_record(dataclasses.asdict(config), planned_identity(config), METRICS, run.clients, {"wall_time_s": 1.0})
    (folder / "run.json").write_text(json.dumps(record))  # what write_json writes, without its fsync: 1,819 records
    return folder


@pytest.mark.parametrize("config_file", ["mini.yaml", "smoke.yaml", "config.yaml"])
def test_the_plans_spec_of_every_run_is_the_spec_of_the_record_its_job_writes(config_file: str, tmp_path: Path) -> None:
    plan = Plan(load(config_file), basedir=REPO)
    partitions = stand_in_partitions(plan, tmp_path)
    folder = tmp_path / "run"
    folder.mkdir()
    files = {name: made(partition) for name, partition in partitions.items()}
    for run in plan.train_jobs.values():
        recorded = store.read_spec(written_record(plan, run, partitions[run.partition], folder))  # as the store reads it
        planned = RunSpec.from_run(run, files[run.partition])
        assert recorded == planned, f"{run.run_dir}: {recorded.difference(planned)}"
        assert recorded.without_data() == run.spec  # the train rule's rerun trigger, the store's run key
        assert recorded.knows_data and not run.spec.knows_data
    assert len({run.spec for run in plan.train_jobs.values()}) == len(plan.train_jobs)  # each run trained once


def test_a_smoke_run_trained_end_to_end_records_the_plans_spec(digits_root: Path, tmp_path: Path) -> None:
    """The real thing for two smoke runs: partitions drawn from the data by `fedgmh partition`, runs
    trained by `fedgmh train` with the workflow's arguments."""
    plan = Plan(load("smoke.yaml", rounds=1, data_root=str(digits_root)), basedir=REPO)
    for experiment, setting, algorithm in [("table2", "digits_c2_a0.5", "fedgmh"), ("chain", "digits_c4_a1000000_chain", "pfedla")]:
        run = plan.train_job(experiment, setting, algorithm, 0)
        partition = tmp_path / f"{run.partition}.npz"
        assert cli_main(partition_args(plan, run.partition, partition)) == 0
        words = plan.train_arguments(run, str(partition), 1)
        words[words.index("--out") + 1] = str(tmp_path / run.run_dir)
        assert cli_main(["train", *words, "--quiet"]) == 0
        recorded = store.read_record(tmp_path / run.run_dir).spec
        assert recorded == RunSpec.from_run(run, made(partition)) and recorded.without_data() == run.spec


def test_a_record_of_another_results_version_or_partition_is_not_done(digits_root: Path, tmp_path: Path) -> None:
    """`campaign status` calls a record done only when its spec is the run's, the partition's digest
    and the results version included (the store would not reuse it otherwise)."""
    from fedgmh.campaign import load_campaign, record_problem

    config = load("smoke.yaml", data_root=str(digits_root))
    (tmp_path / "camp.yaml").write_text(yaml.safe_dump(config, sort_keys=False))  # config order decides who trains a shared run
    (tmp_path / "campaign.yaml").write_text(yaml.safe_dump({"config": "camp.yaml", "groups": [{"runs": ["table2/digits_c2_a0.5/fedgmh/seed0"]}]}))
    entry = load_campaign(tmp_path / "campaign.yaml", tmp_path, REPO / "Snakefile")[0]
    partition = tmp_path / entry.partition
    partition.parent.mkdir(parents=True)
    assert cli_main(partition_args(entry.plan, entry.run.partition, partition)) == 0
    folder = tmp_path / entry.record.parent
    folder.mkdir(parents=True)
    written_record(entry.plan, entry.run, partition, folder)
    record = json.loads((folder / "run.json").read_text())
    (folder / "metrics.csv").write_text("round,test_acc,train_loss\n" + "".join(f"{r},0.5,1.0\n" for r in range(entry.run.rounds + 1)))
    write_json({**record, "evaluated_rounds": entry.run.rounds + 1}, folder / "run.json")
    assert record_problem(entry, tmp_path) is None
    for field, value, said in [("results_version", 2, "results_version: 2 vs 1"), ("partition", {**record["partition"], "digest": "0" * 64},
                                                                                  "partition.digest: '00")]:
        write_json({**record, "evaluated_rounds": entry.run.rounds + 1, field: value}, folder / "run.json")
        assert said in (record_problem(entry, tmp_path) or "done"), field
    partition.unlink()  # not made yet: only what the plan knows is compared
    assert record_problem(entry, tmp_path) is None


def test_a_spec_is_its_key_and_says_what_differs() -> None:
    committed = REPO / "paper_artifacts/mini/runs/table2/mnist_c2_a0.5/fedgmh/seed0"
    spec = store.read_spec(committed)
    assert RunSpec.from_key(spec.key()) == spec and spec.key() == store.run_key(json.loads((committed / "run.json").read_text()))
    assert spec.text == json.dumps(spec.key(), sort_keys=True) and len(spec.digest) == 16
    other = dataclasses.replace(spec, lr=0.02, partition=tuple((k, 5 if k == "alpha" else v) for k, v in spec.partition))
    assert spec.difference(other) == ["lr: 0.01 vs 0.02", "partition.alpha: 0.5 vs 5"]
    assert spec.without_data().difference(spec) == [f"partition.dataset_fingerprint: None vs {dict(spec.partition)['dataset_fingerprint']!r}",
                                                     f"partition.digest: None vs {dict(spec.partition)['digest']!r}"]
    with pytest.raises(runspec.UserError, match="not a run record"):
        RunSpec.from_record({"config": {}})
