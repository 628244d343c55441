"""The numerics study (fedgmh.numerics_study): its runs are Table 2's but for `numerics`, its rule is the
comparison's TOST calibrated on simulated cells, and only TF32 records trained on CUDA are judged."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from fedgmh import numerics_study as study
from fedgmh.campaign import load_campaign
from fedgmh.errors import UserError
from fedgmh.plan_cost import load_plan

REPO = Path(__file__).resolve().parents[1]
STRICT_RECORDS = REPO / "paper_artifacts" / "paper" / "runs" / "table2" / "cifar100_c5_a0.5" / "fedper"


def test_each_study_run_is_table2s_run_but_for_numerics() -> None:
    """One definition of a run: a TF32 run and its strict twin differ in `numerics` alone, so the strict
    side is exactly Table 2's records; the study's campaign file lists every run of the study once."""
    runs = [run for run in load_plan([study.STUDY_CONFIG], [], REPO).runs if run.experiment == study.STUDY_EXPERIMENT]
    strict = load_plan([study.STRICT_CONFIG], [], REPO)
    assert {run.algorithm for run in runs} == {"fedper", "fedgmh"} and {run.seed for run in runs} == set(range(5))
    for run in runs:
        twin = strict.train_job(study.STRICT_EXPERIMENT, "cifar100_c5_a0.5", run.algorithm, run.seed)
        assert run.spec.difference(twin.spec) == ["engine_options.numerics: 'pytorch' vs 'strict'"]
    listed = load_campaign(REPO / "config" / "numerics_campaign.yaml", REPO, REPO / "Snakefile")
    assert sorted(entry.run.run_dir for entry in listed) == sorted(run.run_dir for run in runs)
    assert [entry.run.seed for entry in listed] == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]  # every seed, in order


def test_the_verdicts() -> None:
    tight = {0: 75.0, 1: 75.1, 2: 74.9}
    assert study.judge("c", tight, {0: 75.05, 1: 75.0, 2: 74.95, 3: 75.1}).verdict == study.EQUIVALENT
    assert study.judge("c", {s: v + 2 for s, v in tight.items()}, tight).verdict == study.DIFFERS
    wide = study.judge("c", {0: 74.0, 1: 76.0, 2: 75.0}, tight)
    assert wide.verdict == study.INCONCLUSIVE and wide.ci[0] < -0.5 < 0.5 < wide.ci[1]
    assert study.judge("c", {0: 75.0, 1: 75.0}, tight).verdict == study.NOT_JUDGED  # 2 seeds: not judged
    with pytest.raises(UserError, match="seed\\(s\\) \\[1\\]"):
        study.judge("c", {0: 75.0, 1: math.nan, 2: 75.0}, tight)


def test_the_decision_needs_every_cell_equivalent() -> None:
    cell = study.Cell("a", {}, {}, study.EQUIVALENT)
    assert "may become" in study.decision([cell, study.Cell("b", {}, {}, study.EQUIVALENT)])
    assert "Not settled" in study.decision([cell, study.Cell("b", {}, {}, study.INCONCLUSIVE)])
    assert "stays opt-in: its runs differ" in study.decision([cell, study.Cell("b", {}, {}, study.DIFFERS)])
    assert "Not settled" in study.decision([])


def test_the_rule_is_calibrated_on_simulated_cells() -> None:
    """At the margin the rule calls a cell equivalent at most alpha of the time (2,000 draws: +-0.01); with
    FedPer's spread (0.21) five seeds a side show no difference as such most of the time, and a spread
    of one point almost never."""
    assert study.power(0.21, 5, 5, shift=study.DEFAULT_MARGIN) <= study.DEFAULT_ALPHA + 0.01
    assert study.power(0.21, 3, 3, shift=-study.DEFAULT_MARGIN) <= study.DEFAULT_ALPHA + 0.01
    assert study.power(0.21, 5, 5) > 0.85
    assert study.power(1.0, 5, 5) < 0.05


def _copy(seed: int, into: Path, tf32_on: str | None, **edits) -> None:
    """A committed strict record of FedPer's seed, or (tf32_on: a device) made a TF32 record; `edits`:
    run.json's top-level fields replaced."""
    folder = into / ("tf32" if tf32_on else "strict") / f"seed{seed}"
    shutil.copytree(STRICT_RECORDS / f"seed{seed}", folder)
    record = json.loads((folder / "run.json").read_text())
    if tf32_on:
        record["engine_options"]["numerics"] = "pytorch"
        record["device"] = tf32_on
        record["machine"]["tf32_cudnn"] = tf32_on.startswith("cuda")
    (folder / "run.json").write_text(json.dumps({**record, **edits}))


def test_cells_from_records(tmp_path: Path) -> None:
    """Each side's records are found by run key; the strict side is every Table 2 seed, the TF32 side the
    study's; a TF32 record made on a CPU (fp32 under the TF32 key) is refused, named."""
    for seed in range(5):
        _copy(seed, tmp_path, None)
    for seed in range(3):
        _copy(seed, tmp_path, "cuda:0 (NVIDIA H200)")
    cells = {cell.name: cell for cell in study.study_cells(REPO, [tmp_path])}
    fedper = cells["fedper cifar100_c5_a0.5"]
    best = {seed: 100 * json.loads((STRICT_RECORDS / f"seed{seed}" / "run.json").read_text())["best_test_acc"] for seed in range(5)}
    assert fedper.strict == best and fedper.tf32 == {seed: best[seed] for seed in range(3)}
    assert fedper.verdict in (study.EQUIVALENT, study.INCONCLUSIVE) and math.isfinite(fedper.diff)
    assert cells["fedgmh cifar100_c5_a0.5"].verdict == study.NOT_JUDGED
    assert "| fedper cifar100_c5_a0.5 |" in study.markdown(list(cells.values()))

    gpu = {s for s in range(5) if json.loads((STRICT_RECORDS / f"seed{s}" / "run.json").read_text())["device"].startswith("cuda")}
    assert fedper.strict_on_gpu == len(gpu)

    shutil.rmtree(tmp_path / "tf32" / "seed1")
    _copy(1, tmp_path, "cpu")
    with pytest.raises(UserError, match="tf32/seed1 is not a TF32 run \\(trained on cpu"):
        study.study_cells(REPO, [tmp_path])
    shutil.rmtree(tmp_path / "tf32" / "seed1")
    _copy(1, tmp_path, "cuda:0 (NVIDIA H200)")
    record = json.loads((tmp_path / "strict" / "seed3" / "run.json").read_text())
    shutil.rmtree(tmp_path / "strict" / "seed3")
    _copy(3, tmp_path, None, device="cuda:0 (NVIDIA H200)", machine={**record["machine"], "tf32_cudnn": True})
    with pytest.raises(UserError, match="strict/seed3 is not a strict run \\(a GPU record of a strict run"):
        study.study_cells(REPO, [tmp_path])
    shutil.rmtree(tmp_path / "strict" / "seed3")
    _copy(3, tmp_path, None, partition={**record["partition"], "dataset_fingerprint": "another"})
    with pytest.raises(UserError, match="trained on other data than"):
        study.study_cells(REPO, [tmp_path])


def test_benchmarks_shows_the_study_as_it_stands() -> None:
    """BENCHMARKS.md's table is the command's on the committed records (regenerate: python -m fedgmh.numerics_study)."""
    shown = {line.strip() for line in (REPO / "BENCHMARKS.md").read_text().splitlines()}
    for line in study.markdown(study.study_cells(REPO)).splitlines():
        assert line.strip() in shown, f"BENCHMARKS.md lacks the study's line {line.strip()!r}"
