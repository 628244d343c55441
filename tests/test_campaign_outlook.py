"""`fedgmh campaign status`: the claims each group decides, and its time (fedgmh.campaign_outlook)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

from conftest import REPO_ROOT

from fedgmh import campaign_outlook as outlook
from fedgmh.report import claims
from fedgmh.report.claim_file import read_claims


def entry(experiment="table2", setting="cifar100_c5_a0.5", algorithm="fedgh", dataset="cifar100", rounds=300):
    return SimpleNamespace(run=SimpleNamespace(experiment=experiment, setting=setting, algorithm=algorithm,
                                               dataset=dataset, rounds=rounds))


def run(experiment="table2", setting="cifar100_c5_a0.5", algorithm="fedgh", variant=""):
    return SimpleNamespace(experiment=experiment, setting=setting, algorithm=algorithm, variant=variant)


def test_a_run_gives_its_seed_to_its_cell_under_its_reading():
    official = {("table2_pflib", "official"): "table2", ("table5_pflib", "official"): "table5"}
    assert outlook.run_cells(run("table2_pflib", "cifar100_c5_a0.5@official", "fedper", "official"), official) == \
        [("official", "table2", "cifar100_c5_a0.5", "fedper")]
    assert outlook.run_cells(run("table2_pflib", "cifar100_c5_a0.5@paper", "fedper", "paper"), official) == \
        [("paper", "table2_pflib", "cifar100_c5_a0.5", "fedper")]  # the paper variant: Table 2's runs, filed there
    assert outlook.run_cells(run("table5", algorithm="gmh_o"), official) == [("paper", "table5", "cifar100_c5_a0.5", "gmh_o")]
    assert outlook.run_cells(run("table5_pflib", "cifar100_c5_a0.5@official", "fedgmh", "official"), official) == \
        [("official", "table5", "cifar100_c5_a0.5", "fedgmh"), ("official", "table2", "cifar100_c5_a0.5", "fedgmh")]


SMALL_CLAIMS = """
claims:
  - {id: best, where: Table 2, claim: FedGMH beats FedAvg, test: ranking,
     above: {table2/mnist_c2_a5: [fedgmh]}, below: {table2/mnist_c2_a5: [fedavg]}}
  - {id: best-of-three, where: Table 2, claim: FedGMH beats FedAvg and FedPer, test: ranking,
     above: {table2/mnist_c2_a5: [fedgmh]}, below: {table2/mnist_c2_a5: [fedavg, fedper]}}
  - {id: settled, where: Table 2, claim: FedGMH beats FedPer, test: ranking,
     above: {table2/mnist_c2_a5: [fedgmh]}, below: {table2/mnist_c2_a5: [fedper]}}
"""


def test_a_group_decides_a_claim_only_when_every_cell_it_needs_has_the_seeds(tmp_path: Path):
    (tmp_path / "claims.yaml").write_text(SMALL_CLAIMS)
    claims = read_claims(tmp_path / "claims.yaml")
    cell = lambda algorithm, reading="paper": (reading, "table2", "mnist_c2_a5", algorithm)  # noqa: E731
    stored = {cell("fedgmh"): {0, 1, 2}, cell("fedavg"): {0}}
    verdicts = {"paper": {"settled": "does not hold", "best": "not run"}}
    groups = [("fedavg seed 1", [(cell("fedavg"), 1)]),
              ("fedavg seed 2, fedper seed 0", [(cell("fedavg"), 2), (cell("fedper"), 0)]),
              ("fedper seeds 1-2, twice", [(cell("fedper"), 1), (cell("fedper"), 2), (cell("fedper"), 2)]),
              ("PFLlib's reading: fedgmh, fedavg", [(cell(a, "official"), s) for a in ("fedgmh", "fedavg") for s in (0, 1, 2)])]
    decided = outlook.decided_by_group(groups, claims, verdicts, stored)
    assert decided == {"fedavg seed 1": [], "fedavg seed 2, fedper seed 0": [("paper", "best")],
                       "fedper seeds 1-2, twice": [("paper", "best-of-three")],  # 'settled' is decided already
                       "PFLlib's reading: fedgmh, fedavg": [("official", "best")]}
    assert stored == {cell("fedgmh"): {0, 1, 2}, cell("fedavg"): {0}}  # the store's seeds are not changed
    # cells complete before the first group: decided by none of them
    assert outlook.decided_by_group(groups[1:], claims, verdicts, {**stored, cell("fedavg"): {0, 1, 2}})[groups[1][0]] == []
    assert outlook.claims_text([("paper", "best"), ("official", "best")]) == "2 claim(s) (best; under PFLlib's reading best)"


ORDER_CLAIMS = """
claims:
  - {id: first, where: Figure 3, claim: FedGMH reaches 70 % before FedAvg, test: rounds, target: 70,
     curves: table2/mnist_c2_a5, earlier: [fedgmh], later: [fedavg]}
  - {id: after, where: Figure 3, claim: FedAvg reaches 70 % after round 100, test: rounds, target: 70,
     curves: table2/mnist_c2_a5, after: 100, algorithms: [fedavg]}
  - {id: at-80, where: Figure 3, claim: FedAvg reaches 70 % at round 80, test: rounds, target: 70,
     curves: table2/mnist_c2_a5, paper: {fedavg: 80}}
"""


def test_which_method_comes_first_waits_for_the_seeds_its_sign_test_can_hold_on(tmp_path: Path):
    """A sign test cannot decide on 3 seeds (p = 1/8): the order claim and 'only after round 100' count only
    from SIGN_SEEDS seeds on, the paper's round beside them (a t interval) from MIN_SEEDS."""
    (tmp_path / "claims.yaml").write_text(ORDER_CLAIMS)
    first, after, at = read_claims(tmp_path / "claims.yaml")
    assert (first.fewest_seeds(), after.fewest_seeds(), at.fewest_seeds()) == (claims.SIGN_SEEDS,) * 2 + (claims.MIN_SEEDS,)
    assert (claims.SIGN_SEEDS, claims.MIN_SEEDS) == (5, 3)
    cell = lambda algorithm: ("paper", "table2", "mnist_c2_a5", algorithm)  # noqa: E731
    groups = [(f"seed {seed}", [(cell("fedgmh"), seed), (cell("fedavg"), seed)]) for seed in range(5)]
    decided = outlook.decided_by_group(groups, [first, after, at], {}, {})
    assert decided == {"seed 0": [], "seed 1": [], "seed 2": [("paper", "at-80")], "seed 3": [],
                       "seed 4": [("paper", "after"), ("paper", "first")]}
    # SIGN_SEEDS is the fewest seeds at which every seed one way holds
    one_way = lambda n: claims.rounds_order("x", (math.nan, {s: 10.0 for s in range(n)}), (math.nan, {s: 20.0 for s in range(n)}))  # noqa: E731
    assert one_way(claims.SIGN_SEEDS).verdict == claims.HOLDS
    assert one_way(claims.SIGN_SEEDS - 1).verdict == claims.INCONCLUSIVE


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
    line = outlook.worth([("paper", "a")], runs, seconds, rates, 2)
    assert "3 to train: 1.5 machine-hours at --jobs 2 on CPU" in line and line.endswith("0.67 claims per machine-hour")


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
