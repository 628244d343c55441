"""The results store: a finished run's record is reused only for exactly the same run, conflicts are
reported and nothing is overwritten (fedgmh.store, `fedgmh store`, `fedgmh train --store`)."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml

from fedgmh import store
from fedgmh.cli import main as cli_main
from fedgmh.errors import UserError

from conftest import SMOKE, Digits, prepare_digits, snakemake, train_args


def train(digits: Digits, out: Path, *extra: str) -> int:
    """A 2-round FedAvg run (batches of 20, the CLI's local epochs and threads) into OUT."""
    return cli_main(train_args(digits, out, *extra, rounds=2, batch_size=20, local_epochs=None, threads=None))


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> dict:
    """A store holding one trained record, and the data it was made from."""
    root = tmp_path_factory.mktemp("store")
    digits = prepare_digits(root)
    assert train(digits, root / "store" / "table2" / "fedavg" / "seed0") == 0
    return {"digits": digits, "store": root / "store", "record": root / "store" / "table2" / "fedavg" / "seed0"}


def test_exact_record_is_reused_without_training(stored, tmp_path: Path) -> None:
    assert train(stored["digits"], tmp_path / "run", "--store", str(stored["store"]), "--device", "cpu",
                 "--threads", "1", "--set", "eval_batch_size=7") == 0
    # copied, not recomputed: even the per-round wall times are the stored run's
    assert (tmp_path / "run" / "metrics.csv").read_bytes() == (stored["record"] / "metrics.csv").read_bytes()
    assert (tmp_path / "run" / "run.json").read_bytes() == (stored["record"] / "run.json").read_bytes()
    assert not (tmp_path / "run" / "checkpoint.pt").exists()


def test_a_trained_record_says_where_it_was_made(stored) -> None:
    import platform

    import torch

    from fedgmh.machine import cpu_model, same_machine

    record = json.loads((stored["record"] / "run.json").read_text())
    machine = record["machine"]
    assert machine["cpu"] == cpu_model() and machine["cpu"] in (Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists()
                                                                 else platform.processor() or platform.machine())
    assert machine["torch"] == torch.__version__ and machine["gpu"] is None  # trained on the CPU
    assert machine["deterministic_algorithms"] is torch.are_deterministic_algorithms_enabled()
    assert {"cpu_capability", "cudnn", "mkl", "onednn", "tf32_matmul", "tf32_cudnn", "cudnn_deterministic",
            "cudnn_benchmark", "float32_matmul_precision"} <= set(machine)
    if torch.backends.mkldnn.is_available():
        assert machine["onednn"] and machine["onednn"][0].isdigit()
    assert same_machine(record, record) and not same_machine(record, {**record, "threads": record["threads"] + 1})
    assert not same_machine({**record, "machine": None}, {**record, "machine": None})  # unknown: never the same


def test_an_invalid_record_is_never_reused_nor_kept_as_finished(stored, tmp_path: Path, capsys) -> None:
    """A stored record whose run.json claims 0.999 while its metrics' best is lower is not reused
    (the job trains and says why); the same record as the finished run in --out is refused."""
    tampered = tmp_path / "store" / "table2" / "fedavg" / "seed0"
    shutil.copytree(stored["record"], tampered)
    record = json.loads((tampered / "run.json").read_text())
    record["best_test_acc"] = 0.999
    (tampered / "run.json").write_text(json.dumps(record))
    assert train(stored["digits"], tmp_path / "run", "--store", str(tmp_path / "store")) == 0
    assert "record not used, invalid" in capsys.readouterr().err
    trained = json.loads((tmp_path / "run" / "run.json").read_text())
    assert trained["best_test_acc"] != 0.999 and trained["started_utc"] != record["started_utc"]  # trained anew
    shutil.copy(tampered / "run.json", tmp_path / "run" / "run.json")
    assert train(stored["digits"], tmp_path / "run") == 2
    assert "holds an invalid run record" in capsys.readouterr().err and "best_test_acc" in (tmp_path / "run" / "run.json").read_text()


def test_find_reads_whole_only_the_records_of_the_run_it_looks_for(stored, tmp_path: Path, monkeypatch) -> None:
    """A training job searches every committed record: the others give their key from run.json alone
    (their tables are neither read nor checked: `store check` does that), the run's own are read and checked."""
    from fedgmh import record as record_module

    other = tmp_path / "store" / "seed1"
    shutil.copytree(stored["record"], other)
    data = json.loads((other / "run.json").read_text())
    data["config"]["seed"] = 1
    (other / "run.json").write_text(json.dumps(data))
    (other / "metrics.csv").write_text("not a table")  # would be an invalid record if read
    broken = tmp_path / "store" / "broken"
    broken.mkdir()
    (broken / "run.json").write_text("{")
    key = store.run_key(json.loads((stored["record"] / "run.json").read_text()))
    read = []
    monkeypatch.setattr(store, "load_record", lambda folder: read.append(Path(folder)) or record_module.load_record(folder))
    found, notes = store.find([stored["store"], tmp_path / "store"], key)
    assert found.folder == stored["record"] and read == [stored["record"]]
    invalid = [note for note in notes if note.startswith(store.INVALID_NOTE)]
    assert len(invalid) == 1 and f"{broken / 'run.json'} is not valid JSON" in invalid[0]  # a run.json without a key: said
    assert "seed1" in " ".join(store.scan([tmp_path / "store"])[1])  # the whole check (store check) sees the other's table


def test_record_of_other_settings_is_not_reused(stored, tmp_path: Path) -> None:
    key = store.run_key(json.loads((stored["record"] / "run.json").read_text()))
    other = dict(key, lr=0.02)
    found, notes = store.find([stored["store"]], other)
    assert found is None and notes and "lr: 0.01 vs 0.02" in notes[0]
    assert train(stored["digits"], tmp_path / "run", "--store", str(stored["store"]), "--lr", "0.02") == 0
    ours = pd.read_csv(tmp_path / "run" / "metrics.csv")
    theirs = pd.read_csv(stored["record"] / "metrics.csv")
    assert not ours["test_acc"].equals(theirs["test_acc"])  # trained anew, with lr 0.02
    assert json.loads((tmp_path / "run" / "run.json").read_text())["config"]["lr"] == 0.02


def test_run_key_covers_what_decides_results_and_nothing_else(stored) -> None:
    record = json.loads((stored["record"] / "run.json").read_text())
    key = store.run_key(record)
    assert key["partition"]["digest"] and key["partition"]["dataset_fingerprint"] and key["results_version"] == 1
    same = copy.deepcopy(record)
    same["config"].update(device="cuda:0", threads=8, root="/elsewhere", partition="/elsewhere/p.npz")
    same["engine_options"].update(vectorise="on", eval_cache=False, eval_batch_size=17, memory_format="channels_last", conv="unfold", eval_batched=True)
    same["host"] = "gpu-box"
    del same["engine_options"]["tf32"]  # an option the record predates is compared at its default
    assert store.run_key(same) == key
    for path, value in [(("config", "seed"), 1), (("config", "rounds"), 3), (("engine_options", "lr_decay"), 0.9),
                        (("engine_options", "tf32"), True), (("partition", "digest"), "0" * 64),
                        (("partition", "dataset_fingerprint"), "f" * 64), (("results_version",), 2)]:
        changed = copy.deepcopy(record)
        target = changed
        for part in path[:-1]:
            target = target[part]
        target[path[-1]] = value
        assert store.run_key(changed) != key, path
    with pytest.raises(UserError, match="not a run record"):
        store.run_key({"config": {}})


def test_conflicting_records_are_reported_and_never_overwritten(stored, tmp_path: Path, capsys) -> None:
    mine = tmp_path / "mine"
    shutil.copytree(stored["store"], mine)
    other = tmp_path / "other" / "gpu-job" / "fedavg"
    shutil.copytree(stored["record"], other)
    metrics = pd.read_csv(other / "metrics.csv")
    metrics.loc[1, "test_acc"] += 0.01  # the same run, other numbers (another machine, a bug...)
    metrics.to_csv(other / "metrics.csv", index=False)

    key = store.run_key(json.loads((other / "run.json").read_text()))
    with pytest.raises(store.StoreConflict, match="same run"):
        store.find([mine, tmp_path / "other"], key)
    assert cli_main(["store", "check", str(mine), str(tmp_path / "other")]) == 2
    assert "1 conflict(s)" in capsys.readouterr().out

    before = {p: p.read_bytes() for p in mine.rglob("*") if p.is_file()}
    assert cli_main(["store", "merge", str(tmp_path / "other"), "--into", str(mine)]) == 2
    assert {p: p.read_bytes() for p in mine.rglob("*") if p.is_file()} == before
    # the same record again is 'already present'; a new run is added under its relative path
    assert cli_main(["store", "merge", str(stored["store"]), "--into", str(mine)]) == 0
    assert "0 added, 1 already present" in capsys.readouterr().out
    new = tmp_path / "new" / "fedavg-lr" / "seed0"
    shutil.copytree(stored["record"], new)
    record = json.loads((new / "run.json").read_text())
    record["config"]["lr"] = 0.5
    (new / "run.json").write_text(json.dumps(record))
    assert cli_main(["store", "merge", str(tmp_path / "new"), "--into", str(mine)]) == 0
    assert (mine / "fedavg-lr" / "seed0" / "run.json").read_text() == json.dumps(record)
    assert cli_main(["store", "check", str(mine)]) == 0


def test_put_refuses_to_replace_the_record_of_another_run(stored, tmp_path: Path) -> None:
    destination = tmp_path / "dest"
    assert store.put(stored["record"], destination) == "added"
    assert store.put(stored["record"], destination) == "present"  # nothing rewritten
    other = tmp_path / "other"
    shutil.copytree(stored["record"], other)
    record = json.loads((other / "run.json").read_text())
    record["config"]["lr"] = 0.5
    (other / "run.json").write_text(json.dumps(record))
    with pytest.raises(store.StoreConflict, match="another run.*lr: 0.01 vs 0.5"):
        store.put(other, destination)
    assert json.loads((destination / "run.json").read_text())["config"]["lr"] == 0.01


def test_clients_csv_is_part_of_a_record_when_present(stored, tmp_path: Path, capsys) -> None:
    clients = pd.read_csv(stored["record"] / "clients.csv")  # written by `fedgmh train`
    assert list(clients.columns) == ["client", "test_samples", "test_acc_best", "test_acc_last"] and len(clients) == 4
    record = json.loads((stored["record"] / "run.json").read_text())
    pooled = lambda column: float((clients[column] * clients["test_samples"]).sum() / clients["test_samples"].sum())  # noqa: E731
    assert pooled("test_acc_best") == pytest.approx(record["best_test_acc"])  # the best round's clients
    assert pooled("test_acc_last") == pytest.approx(record["final_test_acc"])
    old = tmp_path / "store" / "run"  # a record made before clients.csv existed: still valid
    shutil.copytree(stored["record"], old)
    (old / "clients.csv").unlink()
    assert store.read_record(old).same_results(store.read_record(stored["record"]))
    # of two equal records the first by store order is reused, not the one with more files
    found, notes = store.find([tmp_path / "store", stored["store"]], store.read_record(old).key)
    assert found.folder == old and any("first of 2 equal records by store order" in note for note in notes)
    found, _ = store.find([stored["store"], tmp_path / "store"], store.read_record(old).key)
    assert (found.folder / "clients.csv").is_file()
    # merge completes the stored record with the file it lacks, and overwrites nothing
    metrics = (old / "metrics.csv").read_bytes()
    assert cli_main(["store", "merge", str(stored["store"]), "--into", str(tmp_path / "store")]) == 0
    assert "(+ clients.csv)" in capsys.readouterr().out
    assert (old / "clients.csv").read_bytes() == (stored["record"] / "clients.csv").read_bytes()
    assert (old / "metrics.csv").read_bytes() == metrics
    # put: copied with the record; other per-client numbers are a conflict, not an overwrite
    destination = tmp_path / "dest"
    assert store.put(stored["record"], destination) == "added" and (destination / "clients.csv").is_file()
    other = tmp_path / "other"
    shutil.copytree(stored["record"], other)
    shifted = clients.copy()
    low, high = shifted["test_acc_best"].idxmin(), shifted["test_acc_best"].idxmax()  # the pooled accuracy stays
    shifted.loc[low, "test_acc_best"] += 0.01 / shifted.loc[low, "test_samples"]
    shifted.loc[high, "test_acc_best"] -= 0.01 / shifted.loc[high, "test_samples"]
    shifted.to_csv(other / "clients.csv", index=False)
    with pytest.raises(store.StoreConflict, match="different results"):
        store.put(other, destination)
    clients.loc[0, "test_acc_best"] += 0.5  # one that does not pool to run.json's best: not even a valid record
    clients.to_csv(other / "clients.csv", index=False)
    with pytest.raises(UserError, match="test_acc_best pools to"):
        store.put(other, destination)
    assert (destination / "clients.csv").read_bytes() == (stored["record"] / "clients.csv").read_bytes()


def test_workflow_second_time_from_records_only(tmp_path: Path) -> None:
    """A fresh clone (no results/, the committed paper_artifacts/) regenerates its tables from the
    records without training; a record whose settings differ is not used and not overwritten."""
    config = yaml.safe_load(SMOKE.read_text())
    config.update(name="reuse", seeds=[0], figures={}, reference_tables=None)
    config.pop("rounds_to_target", None)
    config.update(uploads_to_target=None, layer_weights=None)  # of experiments left out
    config["experiments"] = {"table2": {**config["experiments"]["table2"], "algorithms": ["fedavg", "fedper", "fedgmh"]}}
    path = tmp_path / "reuse.yaml"
    path.write_text(yaml.safe_dump(config))
    first = snakemake(tmp_path, "all_tables", "--cores", "2", "--configfile", str(path), timeout=600)
    assert first.returncode == 0, (first.stdout + first.stderr)[-3000:]
    art = tmp_path / "paper_artifacts" / "reuse"
    table = (art / "table2.csv").read_bytes()
    records = sorted((art / "runs").rglob("run.json"))
    assert len(records) == 3

    # a fresh clone: no results, no logs, no .snakemake; one record edited to claim another lr
    for folder in ("results", "logs", ".snakemake"):
        shutil.rmtree(tmp_path / folder)
    edited = art / "runs" / "table2" / "digits_c2_a0.5" / "fedper" / "seed0" / "run.json"
    record = json.loads(edited.read_text())
    record["config"]["lr"] = 0.5
    edited.write_text(json.dumps(record))
    (art / "table2.csv").unlink()

    second = snakemake(tmp_path, "all_tables", "--cores", "2", "--configfile", str(path), timeout=600)
    logs = {p.parent.name: p.read_text() for p in (tmp_path / "logs" / "reuse" / "train").rglob("*.log")}
    assert "reused the record" in logs["fedavg"] and "reused the record" in logs["fedgmh"]
    assert "reused" not in logs["fedper"].replace("not reused", "") and "lr: 0.5 vs 0.05" in logs["fedper"]
    rounds = config["rounds"]
    assert f"] round {rounds}/{rounds}" in logs["fedper"] and "] round 0/" not in logs["fedavg"]  # only FedPer trained
    # ... and its record goes beside the edited one, which is not replaced
    assert second.returncode == 0, (second.stdout + second.stderr)[-3000:]
    assert "beside the record of another run" in logs["fedper"]  # put there by the train job itself
    assert edited.read_text() == json.dumps(record)
    beside = [p for p in edited.parent.parent.glob("seed0-*/run.json")]
    assert len(beside) == 1 and json.loads(beside[0].read_text())["config"]["lr"] == 0.05
    shutil.rmtree(beside[0].parent)  # so that the edited record alone holds FedPer's run below

    # the edit undone: the whole table comes from the records, identical to the first time
    record["config"]["lr"] = 0.05
    edited.write_text(json.dumps(record))
    for folder in ("results", "logs", ".snakemake"):
        shutil.rmtree(tmp_path / folder)
    third = snakemake(tmp_path, "all_tables", "--cores", "2", "--configfile", str(path), timeout=600)
    assert third.returncode == 0, (third.stdout + third.stderr)[-3000:]
    logs = [p.read_text() for p in (tmp_path / "logs" / "reuse" / "train").rglob("*.log")]
    assert len(logs) == 3 and all("reused the record" in log and "] round 0/" not in log for log in logs)
    assert (art / "table2.csv").read_bytes() == table


def test_a_reused_record_is_filed_under_the_jobs_labels(stored, tmp_path: Path) -> None:
    """The workflow labels a run (config, experiment, setting, variant) in its run.json; a record
    reused from a store gets the labels of the job that reuses it, its results untouched."""
    labels = ["--config-name", "paper", "--experiment", "table2_pflib", "--setting", "digits_c3_a0.5@paper", "--variant", "paper"]
    (stored["record"] / "notes.txt").write_text("not part of the record")
    assert train(stored["digits"], tmp_path / "run", "--store", str(stored["store"]), *labels) == 0
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert record["workflow"] == {"config_name": "paper", "experiment": "table2_pflib", "setting": "digits_c3_a0.5@paper",
                                  "variant": "paper"}
    assert (tmp_path / "run" / "metrics.csv").read_bytes() == (stored["record"] / "metrics.csv").read_bytes()
    assert store.run_key(record) == store.read_record(stored["record"]).key
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["clients.csv", "metrics.csv", "run.json"]  # the record's files only
    assert "workflow" not in json.loads((stored["record"] / "run.json").read_text())  # the store is only read
    (stored["record"] / "notes.txt").unlink()
    # the same command again: the finished run is kept; other labels relabel it, nothing is trained
    before = (tmp_path / "run" / "metrics.csv").read_bytes()
    assert train(stored["digits"], tmp_path / "run", *labels[:4]) == 0
    assert json.loads((tmp_path / "run" / "run.json").read_text())["workflow"] == {"config_name": "paper", "experiment": "table2_pflib"}
    assert (tmp_path / "run" / "metrics.csv").read_bytes() == before


def test_fedprox_with_mu_0_computes_fedavg_and_reuses_its_record(stored, tmp_path: Path) -> None:
    """FedProx with mu = 0 trains FedAvg's numbers, so the store files FedAvg's record as it (labelled
    FedProx, `computed_as` FedAvg); FedProx with mu > 0 is another computation and trains."""
    fedavg = pd.read_csv(stored["record"] / "metrics.csv").drop(columns="seconds")
    assert train(stored["digits"], tmp_path / "trained", "--algorithm", "fedprox") == 0
    trained = pd.read_csv(tmp_path / "trained" / "metrics.csv").drop(columns="seconds")
    pd.testing.assert_frame_equal(trained, fedavg, check_exact=True)  # the same numbers, trained
    own = store.read_record(tmp_path / "trained").spec
    assert own != store.read_record(stored["record"]).spec and own.computation() == store.read_record(stored["record"]).spec

    assert train(stored["digits"], tmp_path / "reused", "--algorithm", "fedprox", "--store", str(stored["store"])) == 0
    assert (tmp_path / "reused" / "metrics.csv").read_bytes() == (stored["record"] / "metrics.csv").read_bytes()  # not trained
    reused = store.read_record(tmp_path / "reused")  # a valid record of FedProx with mu = 0
    assert reused.spec == own and reused.record["algorithm"] == "fedprox" and reused.record["algorithm_options"]["mu"] == 0
    assert reused.record["computed_as"]["algorithm"] == "fedavg"

    assert train(stored["digits"], tmp_path / "proximal", "--algorithm", "fedprox", "--set", "mu=0.1",
                 "--store", str(stored["store"])) == 0
    proximal = pd.read_csv(tmp_path / "proximal" / "metrics.csv").drop(columns="seconds")
    assert "computed_as" not in json.loads((tmp_path / "proximal" / "run.json").read_text())
    assert not proximal["train_loss"].equals(fedavg["train_loss"])  # the proximal term changes the training
