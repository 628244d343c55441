"""Section 2.3 costs: the paper's figures from the actual models, analytic bytes = the channel's, the CLI."""

from __future__ import annotations

import dataclasses
import json
import math

import pandas as pd
import pytest
import torch
from conftest import make_federation

from fedgmh import costs
from fedgmh.algorithms import get_algorithm
from fedgmh.cards import algorithm_names, resolve_options
from fedgmh.cli import main
from fedgmh.engine import run_rounds
from fedgmh.model import FedAvgCNN
from fedgmh.record import results_of

KB = 1024

# six clients of 8 samples (a multiple of the batch size, so drop_last keeps every label) holding 1 to 5 labels
CLIENTS = [[0, 1] * 4, [2] * 4 + [3] * 4, [0, 1, 2, 3, 4, 0, 1, 2], [4] * 8, [1, 2, 3, 1, 2, 3, 1, 2], [0, 4] * 4]


pytestmark = pytest.mark.usefixtures("one_thread")


def test_paper_figures_come_out_of_the_cifar10_model():
    sizes = costs.Sizes.for_dataset("cifar10")  # 3 x 32 x 32, 10 classes
    assert round(sizes.model / KB, 2) == 3431.79
    assert round(sizes.body / KB, 2) == 3411.75
    assert sizes.psi == sizes.head_entries == 5130 and round(sizes.psi / KB, 2) == 5.01
    assert sizes.feature_dim == 512 and sizes.prototype / KB == 2
    assert round(100 * (sizes.prototype + sizes.label) / KB, 2) == 200.39  # 0.39 KB = 100 int32 labels
    assert round(100 * sizes.head / KB) == 2004  # "about 2004 KB": 100 heads of the 10-class model
    assert round(100 * sizes.body / sizes.model, 2) == 99.42
    assert round(100 * (100 * sizes.head + sizes.psi) / sizes.model, 2) == 58.54
    # the model the runs build on the CPU has the same sizes as the meta-device one
    assert costs.Sizes.of(FedAvgCNN(3, 10, 32)) == sizes


def test_the_100_label_figures_on_the_cifar100_model():
    sizes = costs.Sizes.for_dataset("cifar100")
    assert round(sizes.model / KB, 2) == 3612.14 and round(sizes.body / KB, 2) == 3411.75
    assert round(100 * (sizes.prototype + sizes.label) / KB, 2) == 200.39  # d_f = 512 on every dataset
    assert round(100 * sizes.head / KB, 2) == 20039.06  # ten times the paper's "about 2004 KB"
    figures = costs.paper_figures(["cifar10", "cifar100"]).set_index(["dataset", "quantity"])
    # every byte figure at its printed precision; the computation (section 2.3.3) is a third of an epoch, not a half
    assert figures.xs("cifar10")["matches_paper"].dropna().drop("prototype_forward_per_epoch").all()
    assert not figures.loc[("cifar10", "prototype_forward_per_epoch"), "matches_paper"]
    forward = figures.xs("prototype_forward_per_epoch", level="quantity")["analytic"]
    assert ((0.3 < forward) & (forward < 0.4)).all()
    assert not figures.loc[("cifar100", "download_100_heads"), "matches_paper"]


def _models_downloaded(options, rnd: int, history: list[list[int]], client: int) -> int:
    """FedFomo: how many models `client` downloads in round `rnd` (none before anyone uploaded)."""
    if rnd == 0:
        return 0
    if options.selection == "top_m":
        return min(options.M, len(history[rnd - 1]))
    uploaded = set().union(*history[:rnd]) - {client}
    return min(options.M, len(uploaded))


def _retains_learned_layers(options) -> bool:
    """HeurpFedLA (k >= 1 layers retained, which ones learned): the analytic traffic is the most a client moves."""
    return getattr(options, "k", 0) > 0 and options.intermediate != "accumulate"


@pytest.mark.parametrize("preset", ["paper", "official"])
@pytest.mark.parametrize("name", algorithm_names())
def test_analytic_round_traffic_equals_the_channel(name, preset):
    options, engine = resolve_options(name, {"preset": preset})
    fed = make_federation(CLIENTS, **dataclasses.asdict(engine))
    algorithm = get_algorithm(name)(fed, options)
    history: list[list[int]] = []
    send = algorithm.send
    algorithm.send = lambda rnd, selected: (history.append(list(selected)), send(rnd, selected))[1]
    rows = run_rounds(fed, algorithm, 2, 0.5)
    sizes = costs.Sizes.of(fed.model)
    labels = [len(set(c)) for c in CLIENTS]
    assert [r["round"] for r in rows] == [0, 1, 2]
    for rnd in (0, 1):  # the training rounds
        models = {c: _models_downloaded(options, rnd, history, c) for c in history[rnd]} if name == "fedfomo" else None
        expected = costs.round_traffic(name, options, sizes, labels, history[rnd], models)
        if not _retains_learned_layers(options):
            assert (rows[rnd]["bytes_up"], rows[rnd]["bytes_down"]) == expected, f"round {rnd}"
        else:  # the analytic value is the most it can be (HeurpFedLA: which layers a client retains is learned)
            assert rows[rnd]["bytes_up"] == expected[0] and 0 < rows[rnd]["bytes_down"] <= expected[1], f"round {rnd}"
        if name != "local":  # the no-communication control sends nothing either way
            assert expected[0] > 0 and (expected[1] > 0 or name == "fedfomo")
    assert rows[2]["bytes_up"] == 0  # the last round only evaluates


def test_lgfedavg_traffic_follows_its_global_part():
    """fc1+head sends the body's last layer with the head, both ways, and the channel agrees."""
    sizes = costs.Sizes.for_dataset("mnist")
    head_only = costs.exchange("lgfedavg", resolve_options("lgfedavg", {})[0], sizes, labels=2)
    top_two = costs.exchange("lgfedavg", resolve_options("lgfedavg", {"global_part": "fc1+head"})[0], sizes, labels=2)
    assert (head_only.up, head_only.down, head_only.down_other) == (sizes.head,) * 3
    assert sizes.fc1 == (1024 * 512 + 512) * 4  # MNIST's fc1: Linear(64 * 4 * 4 -> 512), float32
    assert (top_two.up, top_two.down, top_two.down_other) == (sizes.fc1 + sizes.head,) * 3
    options, engine = resolve_options("lgfedavg", {"global_part": "fc1+head"})
    fed = make_federation(CLIENTS, **dataclasses.asdict(engine))
    selected = []
    algorithm = get_algorithm("lgfedavg")(fed, options)
    send = algorithm.send
    algorithm.send = lambda rnd, chosen: (selected.append(list(chosen)), send(rnd, chosen))[1]
    rows = run_rounds(fed, algorithm, 1, 0.5)
    expected = costs.round_traffic("lgfedavg", options, costs.Sizes.of(fed.model), [len(set(c)) for c in CLIENTS], selected[0])
    assert (rows[0]["bytes_up"], rows[0]["bytes_down"]) == expected
    assert expected[0] == len(selected[0]) * (costs.Sizes.of(fed.model).fc1 + costs.Sizes.of(fed.model).head)


def _fake_run(tmp_path, name: str, clients, rounds: int = 3):
    """A finished run directory of `name` on a tiny federation shaped like the digits dataset."""
    options, engine = resolve_options(name, {})
    fed = make_federation(clients, num_classes=10, **dataclasses.asdict(engine))
    rows = run_rounds(fed, get_algorithm(name)(fed, options), rounds, 0.5)
    out = tmp_path / name
    out.mkdir()
    metrics = pd.DataFrame(rows).drop(columns="client_acc")
    metrics.to_csv(out / "metrics.csv", index=False)
    run = {"algorithm": name, "dataset": "digits", "num_clients": len(clients),
           "config": {"join_ratio": 0.5, "rounds": rounds, "overrides": {}}, "algorithm_options": dataclasses.asdict(options),
           "partition": {"classes_per_client": 2}, **results_of(metrics)}
    (out / "run.json").write_text(json.dumps(run))
    return out


def test_cli_writes_the_table_with_measured_runs(tmp_path, capsys):
    clients = [[0, 1] * 4, [2, 3] * 4, [4, 5] * 4, [6, 7] * 4]  # two labels each, like classes_per_client
    runs = [_fake_run(tmp_path, name, clients) for name in ("fedavg", "fedgmh")]
    out, tex = tmp_path / "costs.csv", tmp_path / "costs.tex"
    assert main(["costs", "--out", str(out), "--tex", str(tex), "--dataset", "cifar10", "digits", "--runs", *map(str, runs)]) == 0
    assert "costs:" in capsys.readouterr().out
    table = pd.read_csv(out)
    model = table[(table["kind"] == "model") & (table["dataset"] == "cifar10")].set_index("quantity")
    assert model.loc["model", "analytic"] == pytest.approx(3431.79, abs=0.005)
    assert set(table[table["kind"] == "algorithm"]["algorithm"]) == set(algorithm_names())
    measured = table[table["kind"] == "run"]
    assert len(measured) == 6 and not measured["measured"].isna().any()
    assert list(measured["analytic"].round(6)) == list(measured["measured"].round(6))  # nominal |S_m| = 2 is exact here
    up = table[(table["kind"] == "algorithm") & (table["dataset"] == "digits") & (table["quantity"] == "up_per_participant")].set_index(["algorithm", "preset"])
    assert up.loc[("fedavg", "paper"), "measured"] == pytest.approx(up.loc[("fedavg", "paper"), "analytic"])
    assert math.isnan(up.loc[("fedper", "paper"), "measured"])
    text = tex.read_text()
    assert r"\begin{tabular}" in text and "3431.79" in text


def test_measured_costs_refuses_runs_without_traffic(tmp_path):
    from fedgmh.errors import UserError

    run = _fake_run(tmp_path, "fedavg", [[0, 1] * 4, [2, 3] * 4], rounds=1)
    metrics = pd.read_csv(run / "metrics.csv").drop(columns=["bytes_up", "bytes_down"])
    metrics.to_csv(run / "metrics.csv", index=False)
    with pytest.raises(UserError, match="bytes_up"):
        costs.measured_costs([run])


def test_fedgmh_downloads_the_heads_of_its_labels_and_uploads_int32_labels():
    # the labels go up as int32 (4 bytes) next to the float32 prototypes: |S_m| * (4 * d_f + 4) bytes
    fed = make_federation([[0, 1, 2, 0]], num_classes=3)
    options, _ = resolve_options("fedgmh", {})
    algorithm = get_algorithm("fedgmh")(fed, options)
    algorithm.send(0, [0])
    assert fed.channel.take_round() == {"bytes_up": 0, "bytes_down": 3 * (512 * 3 + 3) * 4}
    algorithm.train_client(0, 0)
    assert fed.channel.take_round()["bytes_up"] == 3 * (512 * 4 + torch.empty(0, dtype=torch.int32).element_size())


def test_measured_costs_refuses_an_invalid_record(tmp_path):
    """costs reads a run through the record's one validation (fedgmh.record): results that disagree
    with metrics.csv, or a metrics.csv that is a link to another run's, are refused naming the run."""
    from fedgmh.errors import UserError

    for name in "abc":
        (tmp_path / name).mkdir()
    tampered = _fake_run(tmp_path / "a", "fedavg", [[0, 1] * 4, [2, 3] * 4], rounds=1)
    record = json.loads((tampered / "run.json").read_text())
    (tampered / "run.json").write_text(json.dumps({**record, "best_test_acc": 0.999}))
    with pytest.raises(UserError, match=f"{tampered}: .*best_test_acc is 0.999 but metrics.csv gives"):
        costs.measured_costs([tampered])
    linked = _fake_run(tmp_path / "b", "fedavg", [[0, 1] * 4, [2, 3] * 4], rounds=1)
    (linked / "metrics.csv").unlink()
    (linked / "metrics.csv").symlink_to(_fake_run(tmp_path / "c", "fedavg", [[0, 1] * 4, [2, 3] * 4], rounds=1) / "metrics.csv")
    with pytest.raises(UserError, match="symbolic link"):
        costs.measured_costs([linked])


@pytest.mark.parametrize("labels", ["0", "11", "1000000"])
def test_labels_outside_the_datasets_classes_are_refused_in_one_line(tmp_path, capsys, labels):
    out = tmp_path / "costs.csv"
    assert main(["costs", "--out", str(out), "--dataset", "digits", "--labels", labels]) == 2
    err = capsys.readouterr().err
    assert f"--labels {labels}: a client of digits holds 1 to 10 labels" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()
    assert main(["costs", "--out", str(out), "--dataset", "digits", "--labels", "10"]) == 0
