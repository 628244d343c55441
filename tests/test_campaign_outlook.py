"""`fedgmh campaign status`: which undecided claims the remaining runs bear on, and their time (fedgmh.campaign_outlook)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from conftest import REPO_ROOT

from fedgmh import campaign_outlook as outlook
from fedgmh.report.claim_file import read_claims


def entry(experiment="table2", setting="cifar100_c5_a0.5", algorithm="fedgh", dataset="cifar100", rounds=300):
    return SimpleNamespace(run=SimpleNamespace(experiment=experiment, setting=setting, algorithm=algorithm,
                                               dataset=dataset, rounds=rounds))


def test_a_pflib_experiment_counts_for_its_table_under_the_official_reading():
    assert outlook.paper_cell(entry("table2_pflib", "cifar100_c5_a0.5@official")) == \
        ("official", "table2", "cifar100_c5_a0.5", "fedgh")
    assert outlook.paper_cell(entry("table5", algorithm="gmh_o")) == ("paper", "table5", "cifar100_c5_a0.5", "gmh_o")


def test_only_undecided_claims_count_and_each_reading_has_its_own_verdicts():
    claims = read_claims(REPO_ROOT / "reference" / "fedgmh_paper_claims.yaml")
    verdicts = {"paper": {"f4-gmh-o-late": "does not hold", "t5-ablations-below-fedgmh": "inconclusive"},
                "official": {"f4-gmh-o-late": "holds"}}
    cells = outlook.claim_cells(claims, verdicts)
    gmh_o = cells[("paper", "table5", "cifar100_c5_a0.5", "gmh_o")]
    assert "f4-gmh-o-late" not in gmh_o and "t5-ablations-below-fedgmh" in gmh_o
    assert "t5-multihead-matters-more" in gmh_o  # no verdict at all: undecided
    assert "f4-gmh-o-late" not in cells[("official", "table5", "cifar100_c5_a0.5", "gmh_o")]
    line = outlook.outlook([entry("table5", algorithm="gmh_o")], cells, {}, {}, 2)
    assert line.startswith("1 to train; ") and "t5-ablations-below-fedgmh" in line and "f4-gmh-o-late" not in line


def test_times_fill_the_slots_and_say_what_they_lack():
    seconds = {("cifar100", 300): 3600.0, ("mnist", 200): 1800.0}
    runs = [entry(), entry(), entry(dataset="mnist", rounds=200)]
    rates = {"cifar100": (6.0, "H200"), "mnist": (10.0, "H100")}
    text = outlook.estimate(runs, seconds, rates, jobs=2)
    assert text.startswith("1 h 30 min at --jobs 2 on CPU cores")  # 1 h + 30 min in one slot, 1 h in the other
    assert text.endswith(f"{round((300 / 6 * 2 + 200 / 10) / 60)} min of one H100 / H200 at its best measured rate")
    assert outlook.estimate(runs, seconds, rates, jobs=3).startswith("1 h 00 min at --jobs 3")
    assert "no CPU record" in outlook.estimate([entry(dataset="fmnist")], seconds, rates, 2)
    assert outlook.estimate(runs, seconds, {"mnist": (10.0, "H100")}, 2).endswith("no GPU rate measured for cifar100")


def test_cpu_times_come_from_whole_cpu_runs_and_gpu_rates_from_the_best_measurement(tmp_path: Path):
    for name, device, resumed, wall in [("a", "cpu", None, 100.0), ("b", "cpu", None, 300.0), ("c", "cpu", 50, 10.0),
                                        ("d", "cuda:0 (H200)", None, 5.0), ("e", "cpu", None, 200.0)]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "run.json").write_text(json.dumps({"device": device, "resumed_from_round": resumed,
                                                              "dataset": "mnist", "config": {"rounds": 200},
                                                              "wall_time_s": wall}))
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "run.json").write_text("{")
    assert outlook.cpu_run_seconds(tmp_path) == {("mnist", 200): 200.0}
    rates = tmp_path / "rates.csv"
    rates.write_text("date,device,dataset,rounds_per_s\n1,H100,mnist,5.8\n2,H200,cifar100,6.7\n3,H200,cifar100,7.6\n")
    assert outlook.gpu_rates(rates) == {"mnist": (5.8, "H100"), "cifar100": (7.6, "H200")}
