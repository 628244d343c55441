"""Issue 12's reports on synthetic run directories: client uploads to a target accuracy (CE-pFL's
Table 1), layer-weight heat-maps (pFedLA's Fig. 6), the other documents' reference values in the
comparison, and layer_weights.csv as an optional record file of the store."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import artifact_args

from fedgmh import report, store
from fedgmh.cli import main
from fedgmh.errors import UserError
from fedgmh.report.layer_weights import plot_layer_weights, weight_matrix
from fedgmh.report.other_documents import compare_others, read_other_reference
from fedgmh.report.to_target import run_uploads, uploads_to_target

REPO = Path(__file__).resolve().parents[1]


def make_run(root: Path, algorithm: str, seed: int, accuracy: list[float], *, clients_up: list[int] | None = None,
             dataset: str = "cifar10", clients: int = 20, join_ratio: float = 0.5, c: int = 5, alpha: float = 1e6,
             assignment: str | None = None, experiment: str = "t1") -> Path:
    """A run folder like `fedgmh train --out`: metrics row r = accuracy after r training rounds and the
    uploads of round r's training (`clients_up`, left out when None)."""
    run_dir = root / experiment / algorithm / f"seed{seed}"
    run_dir.mkdir(parents=True)
    acc = np.asarray(accuracy, dtype=float)
    pooled = acc - 0.01
    metrics = pd.DataFrame({"round": np.arange(len(acc)), "test_acc": pooled, "test_acc_mean": acc,
                            "test_acc_std": 0.0, "train_loss": 1.0})
    if clients_up is not None:
        metrics["clients_up"] = clients_up
    metrics.to_csv(run_dir / "metrics.csv", index=False)
    config = {"dataset": dataset, "algorithm": algorithm, "rounds": len(acc) - 1, "join_ratio": join_ratio, "local_epochs": 5,
              "batch_size": 32, "lr": 0.01, "seed": seed, "overrides": {}}
    partition = {"scheme": "exdir", "dataset": dataset, "num_clients": clients, "classes_per_client": c, "alpha": alpha}
    if assignment:
        partition["assignment"] = assignment
    (run_dir / "run.json").write_text(json.dumps({
        "algorithm": algorithm, "dataset": dataset, "seed": seed, "config": config, "partition": partition,
        "best_test_acc": float(pooled.max()), "best_round": int(pooled.argmax()), "final_test_acc": float(pooled[-1]), "wall_time_s": 1.0,
        "workflow": {"experiment": experiment}}))
    return run_dir


# ----------------------------------------------------------------------------- uploads to target

def test_run_uploads_counts_the_rounds_before_the_first_hit() -> None:
    rounds, uploads = np.arange(6), np.array([10, 10, 12, 10, 10, 0])
    accuracy = np.array([10.0, 35.0, 45.0, 52.0, 61.0, 58.0])  # row r: after r training rounds
    assert run_uploads(rounds, accuracy, uploads, 40) == 20  # reached after 2 rounds: uploads of rounds 0 and 1
    assert run_uploads(rounds, accuracy, uploads, 50) == 32
    assert run_uploads(rounds, accuracy, uploads, 60) == 42
    assert run_uploads(rounds, accuracy, uploads, 10) == 0  # the initial model already reaches it
    assert run_uploads(rounds, accuracy, uploads, 70) == float("inf")


@pytest.fixture()
def runs(tmp_path: Path) -> list[Path]:
    up = [10] * 7 + [0]
    return [
        make_run(tmp_path, "fedavg", 0, [0.1, 0.2, 0.3, 0.42, 0.45, 0.51, 0.55, 0.58], clients_up=up),
        make_run(tmp_path, "fedavg", 1, [0.1, 0.2, 0.41, 0.42, 0.45, 0.49, 0.55, 0.58], clients_up=up),
        make_run(tmp_path, "fedavg", 2, [0.1, 0.2, 0.3, 0.35, 0.45, 0.49, 0.52, 0.61], clients_up=up),
        make_run(tmp_path, "fedrep", 0, [0.1, 0.5, 0.6, 0.65, 0.7, 0.7, 0.7, 0.7], clients_up=[10, 13, 10, 10, 10, 10, 10, 0]),
    ]


def test_uploads_table_median_over_seeds_and_the_paper(runs: list[Path], tmp_path: Path) -> None:
    _, curves = report.aggregate_runs(runs)
    assert "clients_up" in curves.columns
    setting = "cifar10_c5_a1000000"
    table = uploads_to_target(curves, "t1", setting, [40, 50, 60], paper={"fedavg": [80, 220, 660], "fedbabu": [30, 70, 230]})
    cell = {(r["algorithm"], r["target"]): r for r in table.to_dict("records")}
    # FedAvg reaches 40 % after 3, 2, 4 rounds (30, 20, 40 uploads): median 30; 60 % only seed 2 (70 uploads): median never
    assert cell[("fedavg", 40.0)]["uploads"] == "30" and cell[("fedavg", 40.0)]["per_seed"] == "30 20 40"
    assert cell[("fedavg", 60.0)]["uploads"] == "–" and cell[("fedavg", 60.0)]["seeds_reached"] == 1
    assert cell[("fedavg", 50.0)]["paper"] == "220"
    assert cell[("fedrep", 40.0)]["uploads"] == "10" and cell[("fedrep", 60.0)]["uploads"] == "23"
    assert cell[("fedbabu", 40.0)]["uploads"] == "not run" and cell[("fedbabu", 40.0)]["paper"] == "30"
    # the pooled accuracy is 1 point lower: FedRep's 60 % falls to round 3
    pooled = uploads_to_target(curves, "t1", setting, [60], metric="test_acc")
    assert pooled.set_index("algorithm").loc["fedrep", "uploads"] == "33"

    results = tmp_path / "r.csv"
    curves_csv = tmp_path / "c.csv"
    assert main(["aggregate", "--runs", *map(str, runs), "--out", str(results), "--curves", str(curves_csv)]) == 0
    out_tex, out_csv = tmp_path / "u.tex", tmp_path / "u.csv"
    params = {"experiment": "t1", "setting": setting, "targets": [40, 50, 60], "metric": "test_acc_mean",
              "paper": {"fedavg": [80, 220, 660], "fedrep": [None, 10, 290]}, "title": "Client uploads to target"}
    assert main(artifact_args("uploads_to_target", {"curves": curves_csv}, {"tex": out_tex, "csv": out_csv}, params)) == 0
    wide = pd.read_csv(out_csv, keep_default_na=False)
    assert list(wide.columns) == ["Method", "40% ours", "40% seeds", "40% paper", "50% ours", "50% seeds", "50% paper",
                                  "60% ours", "60% seeds", "60% paper"]
    assert wide.set_index("Method").loc["FedRep", "40% paper"] == "–"  # the paper's '–'
    assert wide.set_index("Method").loc["FedAvg", "40% seeds"] == "3/3"
    tex = out_tex.read_text()
    assert r"\toprule" in tex and "CIFAR-10 ExDir(5, 1000000), 20 clients" not in tex  # 20 clients is the config's here
    assert "mean client test accuracy" in tex


def test_uploads_need_the_upload_counter_and_every_round(tmp_path: Path) -> None:
    old = make_run(tmp_path, "fedavg", 0, [0.1, 0.5, 0.6])  # trained before clients_up existed
    _, curves = report.aggregate_runs([old])
    with pytest.raises(UserError, match=f"run {old}: its metrics.csv has no clients_up column"):
        uploads_to_target(curves, "t1", "cifar10_c5_a1000000", [40])
    gappy = make_run(tmp_path / "b", "fedavg", 0, [0.1, 0.5, 0.6], clients_up=[10, 10, 0])
    frame = pd.read_csv(gappy / "metrics.csv")
    frame.assign(round=[0, 2, 4]).to_csv(gappy / "metrics.csv", index=False)  # eval_every 2
    record = json.loads((gappy / "run.json").read_text())
    record["config"]["rounds"], record["engine_options"], record["best_round"] = 4, {"eval_every": 2}, 4
    (gappy / "run.json").write_text(json.dumps(record))
    _, curves = report.aggregate_runs([gappy])
    with pytest.raises(UserError, match="not every round is evaluated"):
        uploads_to_target(curves, "t1", "cifar10_c5_a1000000", [40])
    with pytest.raises(UserError, match="no curves of experiment 't1', setting 'x'"):
        uploads_to_target(curves, "t1", "x", [40])


# ----------------------------------------------------------------------------- layer weights

def write_weights(run_dir: Path, n: int = 8, layers=("conv1", "fc1")) -> None:
    rows = []
    for layer in layers:
        for i in range(n):
            raw = np.array([1.0 / (1 + abs(i - j)) for j in range(n)])
            rows += [(layer, i, j, w) for j, w in enumerate(raw / raw.sum())]
    pd.DataFrame(rows, columns=["layer", "client", "peer", "weight"]).to_csv(run_dir / "layer_weights.csv", index=False)


def test_layer_weight_heat_maps(tmp_path: Path) -> None:
    chain = [make_run(tmp_path, alg, seed, [0.1, 0.5], clients=8, c=4, dataset="fashion_mnist", assignment="chain")
             for alg in ("fedper", "fedrep") for seed in (0, 1)]
    for run_dir in chain:
        write_weights(run_dir)
    results, _ = report.aggregate_runs(chain, default_clients=100)
    setting = "fashion_mnist_c4_a1000000_n8_chain"
    assert set(results["setting"]) == {setting}
    out, png, csv = tmp_path / "lw.pdf", tmp_path / "lw.png", tmp_path / "lw.csv"
    panels = plot_layer_weights(results, "t1", setting, ["fedrep", "fedper"], out, png=png, csv=csv)
    assert panels == [("fedper", "conv1"), ("fedper", "fc1"), ("fedrep", "conv1"), ("fedrep", "fc1")]  # paper's order
    assert out.read_bytes()[:4] == b"%PDF" and png.read_bytes()[:4] == b"\x89PNG"
    drawn = pd.read_csv(csv)
    assert set(drawn["seed"]) == {0} and len(drawn) == 2 * 2 * 64  # the lowest seed by default
    matrix = weight_matrix(drawn[(drawn["algorithm"] == "fedper")], "fc1")
    assert matrix.shape == (8, 8) and all(matrix[i].argmax() == i for i in range(8))
    # one layer, another seed, through the CLI
    results_csv = tmp_path / "r.csv"
    results.to_csv(results_csv, index=False)
    params = {"experiment": "t1", "setting": setting, "algorithms": ["fedper"], "layer": "fc1", "seed": 1, "title": None}
    assert main(artifact_args("layer_weights", {"results": results_csv}, {"pdf": tmp_path / "one.pdf", "csv": tmp_path / "one.csv"},
                              params)) == 0
    one = pd.read_csv(tmp_path / "one.csv")
    assert set(one["layer"]) == {"fc1"} and set(one["seed"]) == {1}
    with pytest.raises(UserError, match="layer 'fc9' is not in"):
        plot_layer_weights(results, "t1", setting, ["fedper"], tmp_path / "x.pdf", layer="fc9")
    (chain[0] / "layer_weights.csv").unlink()
    with pytest.raises(UserError, match=f"run {chain[0]}: no layer_weights.csv"):
        plot_layer_weights(results, "t1", setting, ["fedper"], tmp_path / "x.pdf")


def test_layer_weights_csv_is_an_optional_record_file(tmp_path: Path) -> None:
    source = make_run(tmp_path / "src", "fedper", 0, [0.1, 0.5])
    write_weights(source)
    (source / ".layer_weights.x1y2.csv").write_text("a write in progress\n")  # atomic_path's temporary: not part
    (source / "checkpoint.pt").write_bytes(b"")
    assert store.optional_files(source) == ["layer_weights.csv"]
    destination = tmp_path / "store" / "run"
    store.copy_record(source, destination)
    assert sorted(p.name for p in destination.iterdir()) == ["layer_weights.csv", "metrics.csv", "run.json"]
    assert (destination / "layer_weights.csv").read_bytes() == (source / "layer_weights.csv").read_bytes()
    # a record without it is the same run; merge adds the table it lacks, a different one is a conflict
    bare = tmp_path / "bare" / "run"
    store.copy_record(source, bare, ["metrics.csv", "run.json"])
    record = lambda folder: store.StoredRun(folder, {}, {"same": "key"})  # noqa: E731  (make_run's run.json is partial)
    assert record(bare).missing(record(source)) == ["layer_weights.csv"] and record(source).missing(record(bare)) == []
    assert record(bare).same_results(record(source)) and record(destination).same_results(record(source))
    weights = pd.read_csv(destination / "layer_weights.csv")
    weights.loc[0, "weight"] += 0.5
    weights.to_csv(destination / "layer_weights.csv", index=False)
    assert not record(destination).same_results(record(source))


def test_chain_partition_enters_the_run_key_only_when_chain() -> None:
    record = {"config": {"algorithm": "fedavg", **{k: 1 for k in store.CONFIG_KEYS if k != "algorithm"}},
              "algorithm_options": {}, "engine_options": {}, "partition": {"classes_per_client": 4, "alpha": 1.0}}
    assert "assignment" not in store.run_key(record)["partition"]  # keys of records made before `chain`: unchanged
    record["partition"]["assignment"] = "random"
    assert "assignment" not in store.run_key(record)["partition"]
    record["partition"]["assignment"] = "chain"
    assert store.run_key(record)["partition"]["assignment"] == "chain"


# ----------------------------------------------------------------------------- other documents' values

def test_cepfl_reference_values() -> None:
    ref = read_other_reference(REPO / "reference" / "cepfl_paper_table1.csv")
    table1 = ref[ref["item"] == "Table 1"]
    assert len(table1) == 12 and set(table1["algorithm"]) == {"cepfl", "fedavg", "fedrep", "fedbabu"}
    values = {(r["algorithm"], int(r["target"])): r["value"] for r in table1.to_dict("records")}
    assert values[("cepfl", 40)] == 20 and values[("fedavg", 60)] == 660 and values[("fedbabu", 50)] == 70
    assert np.isnan(values[("fedrep", 40)]) and values[("fedrep", 60)] == 290
    assert (table1["clients"] == 20).all() and (table1["join_ratio"] == 0.5).all() and (table1["dataset"] == "Cifar10").all()
    text = ref[ref["quantity"] == "mean_client_accuracy"].iloc[0]
    assert text["value"] == 72.08 and text["join_ratio"] == 0.1 and text["algorithm"] == "cepfl"


def test_other_values_in_the_comparison(runs: list[Path], tmp_path: Path) -> None:
    ref = read_other_reference(REPO / "reference" / "cepfl_paper_table1.csv")
    results, _ = report.aggregate_runs(runs)
    other = compare_others(results, ref)
    assert len(other) == 13
    fedavg = other[(other["algorithm"] == "fedavg")].set_index("target")
    assert fedavg.loc["40", "ours"] == "30" and fedavg.loc["40", "status"] == "not comparable" and fedavg.loc["40", "n_runs"] == 3
    assert fedavg.loc["60", "ours"] == "–" and fedavg.loc["60", "paper"] == "660"
    assert (other.loc[other["algorithm"].isin(["cepfl", "fedbabu"]), "status"] == "not run").all()

    # the workflow's comparison: the FedGMH cells as before, the other values in their own section and CSV
    results_csv = tmp_path / "t1.results.csv"
    results.to_csv(results_csv, index=False)
    md, csv, other_csv, tex = tmp_path / "c.md", tmp_path / "c.csv", tmp_path / "o.csv", tmp_path / "c.tex"
    assert main(["compare", "--results", str(results_csv), "--reference", str(REPO / "reference" / "fedgmh_paper_tables.csv"),
                 "--out", str(md), "--tex", str(tex), "--csv", str(csv), "--other", str(REPO / "reference" / "cepfl_paper_table1.csv"),
                 "--other-csv", str(other_csv)]) == 0
    paper_cells = len(pd.read_csv(REPO / "reference" / "fedgmh_paper_tables.csv"))
    assert len(pd.read_csv(csv)) == paper_cells  # the paper's comparison is unchanged
    text = md.read_text()
    assert f"| **all** | {paper_cells} | 0 | 0 | 0 | 0 | 0 | 0 | {paper_cells} |" in text
    assert "| 004 Table 1 | 12 | 6 | 6 |" in text and "| **all** | 13 | 6 | 7 |" in text
    assert len(pd.read_csv(other_csv)) == 13
    assert text.count(r"\begin{longtable}") == 0 and tex.read_text().count(r"\begin{longtable}") == 2
    # without runs of CIFAR-10 (offline), every value is 'not run'
    smoke = compare_others(results.iloc[0:0], ref)
    assert (smoke["status"] == "not run").all() and len(smoke) == 13


def test_an_algorithm_names_its_record_tables_apart_from_the_engines() -> None:
    from types import SimpleNamespace

    from fedgmh.train_record import algorithm_tables

    table = pd.DataFrame({"a": [1]})
    tables_of = lambda **tables: algorithm_tables(SimpleNamespace(name="toy", extra_records=lambda: tables,  # noqa: E731
                                                                  record_tables=("layer_weights", "metrics", "clients")))
    assert list(tables_of(layer_weights=table)) == ["layer_weights.csv"]
    for bad in ("metrics", "clients", "Weights", "../x", "not_listed"):  # not_listed: missing from record_tables
        with pytest.raises(ValueError, match="names a record table"):
            tables_of(**{bad: table})


def test_layer_weights_have_readable_layer_names_and_one_colour_scale(tmp_path: Path, monkeypatch) -> None:
    import matplotlib.figure

    from fedgmh.model import FedAvgCNN
    from fedgmh.report.layer_weights import LAYER_NAMES

    body = FedAvgCNN(1, 10, 28).body  # the names are the paper's CNN's: conv1 is body.0, ...
    assert [type(body[int(k[5:])]).__name__ for k in LAYER_NAMES if k.startswith("body.")] == ["Conv2d", "Conv2d", "Linear"]
    drawn = []
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda self, *a, **k: drawn.append(self))
    run = make_run(tmp_path, "fedper", 0, [0.1, 0.5], clients=8, c=4, dataset="fashion_mnist", assignment="chain")
    write_weights(run, layers=("body.0", "head"))
    weights = pd.read_csv(run / "layer_weights.csv")
    weights.loc[weights["layer"] == "head", "weight"] *= 0.5  # a layer of smaller weights looks smaller
    weights.to_csv(run / "layer_weights.csv", index=False)
    results, _ = report.aggregate_runs([run], default_clients=100)
    plot_layer_weights(results, "t1", "fashion_mnist_c4_a1000000_n8_chain", ["fedper"], tmp_path / "lw.pdf")
    panels = [ax for ax in drawn[0].axes if ax.get_title()]
    assert [ax.get_title() for ax in panels] == ["FedPer (seed 0): conv1", "FedPer (seed 0): head (fc)"]
    assert len(drawn[0].axes) == 3  # two panels and one colour bar
    assert {ax.images[0].get_clim() for ax in panels} == {(0.0, weights["weight"].max())}
