"""The numerics study: do PyTorch's default GPU numerics (engine option `numerics=pytorch`: TF32 for
cuDNN convolutions, as the paper's authors most likely ran PFLlib) give Table 2's accuracies, which
every committed record computed in plain fp32 (`strict`), within the comparison's margin?

A cell is a run of config/numerics.yaml's experiment without its seed (FedPer, FedGMH on CIFAR-100
ExDir(5, 0.5)). Its *TF32* side is that config's records, each found by its run key and trained on
CUDA with TF32 convolutions allowed: a record made elsewhere computed fp32 under the TF32 key and is
refused, named. Its *strict* side is the paper config's Table 2 records of the same runs but for
`numerics`, as the tables pool them: fp32 on a CPU or a GPU (device is not in the run key, so no
GPU twin of a CPU record can be stored beside it); a GPU record there must show TF32 off. A cell's
records must share their partition's data (fingerprint and digest). The test is the comparison's
(fedgmh.report.verdicts, docs/verdicts.md): Welch's (1 - 2 alpha) interval of the difference of the
two means of the best accuracy over distinct seeds, and TOST at the margin; at least MIN_SEEDS seeds
a side; one look, after every planned seed (config/numerics_campaign.yaml). A cell is *equivalent*
(TOST rejects), *differs* (the interval lies beyond the margin) or *inconclusive*. So the study asks
whether TF32 runs may be pooled with the strict records, not what TF32 alone does: a gap between a
GPU's and a CPU's fp32 would show as a difference too. `numerics=pytorch` may become the GPU
campaign's default only when every cell is equivalent.

`power` is the rule calibrated on simulated seeds before it judges: how often a cell whose two sides
do not differ at all comes out equivalent, with the strict side's spread, at 3 and 5 TF32 seeds; the
study's seeds are planned by it. `python -m fedgmh.numerics_study` prints the table (BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from fedgmh import store
from fedgmh.errors import UserError
from fedgmh.filing import parse_setting_id
from fedgmh.plan import Run
from fedgmh.plan_cost import load_plan
from fedgmh.report.verdicts import DEFAULT_ALPHA, DEFAULT_MARGIN, MIN_SEEDS, NOT_REPRODUCED, REPRODUCED, welch_tost
from fedgmh.runspec import RunSpec

STUDY_CONFIG, STUDY_EXPERIMENT = "config/numerics.yaml", "numerics"
STRICT_CONFIG, STRICT_EXPERIMENT = "config/config.yaml", "table2"
STORES = ("paper_artifacts",)
EQUIVALENT, DIFFERS, INCONCLUSIVE, NOT_JUDGED = "equivalent", "differs", "inconclusive", "not judged"
#: the numbers of TF32 seeds `power` is given for
PLANNED_SEEDS = (3, 5)
TRIALS = 2000
#: the accuracy (%) the simulated cells are drawn around (the test sees only differences)
LEVEL = 75.0


@dataclasses.dataclass(frozen=True)
class Cell:
    """One cell: its name, each side's best accuracy (%) by seed, and the verdict (with Welch's numbers
    when both sides have MIN_SEEDS seeds)."""

    name: str
    tf32: dict[int, float]
    strict: dict[int, float]
    verdict: str
    diff: float = math.nan
    ci: tuple[float, float] = (math.nan, math.nan)
    #: how many of the strict side's records were trained on a GPU (the others on a CPU)
    strict_on_gpu: int = 0


def _summary(values: Iterable[float]) -> tuple[float, float, int]:
    values = list(values)
    return float(np.mean(values)), float(np.std(values, ddof=1)), len(values)


def judge(name: str, tf32: dict[int, float], strict: dict[int, float], margin: float = DEFAULT_MARGIN,
          alpha: float = DEFAULT_ALPHA) -> Cell:
    """The cell's verdict from each side's best accuracy (%) by seed."""
    for side, values in (("TF32", tf32), ("strict", strict)):
        bad = [seed for seed, value in values.items() if not (math.isfinite(value) and 0 <= value <= 100)]
        if bad:
            raise UserError(f"numerics study, {name}: the {side} side's seed(s) {bad} have no accuracy in [0, 100]")
    if min(len(tf32), len(strict)) < MIN_SEEDS:
        return Cell(name, tf32, strict, NOT_JUDGED)
    test = welch_tost(_summary(tf32.values()), _summary(strict.values()), margin, alpha)
    verdict = {REPRODUCED: EQUIVALENT, NOT_REPRODUCED: DIFFERS}.get(test.verdict, INCONCLUSIVE)
    return Cell(name, tf32, strict, verdict, test.diff, (test.ci_low, test.ci_high))


def power(std: float, tf32_seeds: int, strict_seeds: int, margin: float = DEFAULT_MARGIN, alpha: float = DEFAULT_ALPHA,
          shift: float = 0.0, trials: int = TRIALS, seed: int = 0) -> float:
    """The share of `trials` simulated cells, both sides normal with this std and means `shift` apart, that
    `judge` calls equivalent (shift 0: the power; shift = margin: the false-equivalence rate, <= alpha)."""
    rng = np.random.default_rng(seed)
    found = 0
    for _ in range(trials):
        tf32, strict = rng.normal(LEVEL + shift, std, tf32_seeds), rng.normal(LEVEL, std, strict_seeds)
        found += judge("simulated", dict(enumerate(tf32)), dict(enumerate(strict)), margin, alpha).verdict == EQUIVALENT
    return found / trials


def decision(cells: Sequence[Cell]) -> str:
    """What the study says of `numerics=pytorch` as the GPU campaign's default."""
    differing = [cell.name for cell in cells if cell.verdict == DIFFERS]
    open_cells = [cell.name for cell in cells if cell.verdict in (INCONCLUSIVE, NOT_JUDGED)]
    if differing:
        return f"numerics=pytorch stays opt-in: its runs differ from the strict records beyond the margin in {', '.join(differing)}"
    if open_cells or not cells:
        return f"Not settled ({', '.join(open_cells) or 'no cell'}): numerics=pytorch stays opt-in"
    return "numerics=pytorch is equivalent to strict in every cell: it may become the GPU campaign's default"


def _by_spec(keyed: list[tuple[Path, RunSpec]], run: Run) -> Path | None:
    """The folder of the first record of `run` (its key, the partition's data aside; store order), or None."""
    found = [folder for folder, spec in keyed if spec.without_data() == run.spec]
    return found[0] if found else None


def _on_gpu(record: dict) -> bool:
    return str(record.get("device", "")).startswith("cuda")


def _arithmetic_problem(record: dict, tf32: bool) -> str | None:
    """Why `record` did not compute in the arithmetic of its side (TF32 convolutions on CUDA, or fp32), or None."""
    allowed = (record.get("machine") or {}).get("tf32_cudnn")
    if tf32 and not _on_gpu(record):
        return f"trained on {record.get('device') or 'an unnamed device'}, where numerics=pytorch computes fp32"
    if tf32 and allowed is not True:
        return "its machine facts do not show TF32 convolutions allowed"
    if not tf32 and _on_gpu(record) and allowed is not False:
        return "a GPU record of a strict run whose machine facts do not show TF32 off"
    return None


def _data(record: dict) -> tuple:
    partition = record.get("partition") or {}
    return partition.get("dataset_fingerprint"), partition.get("digest")


def study_cells(base: Path | str = ".", stores: Sequence[Path | str] = STORES, margin: float = DEFAULT_MARGIN,
                alpha: float = DEFAULT_ALPHA) -> list[Cell]:
    """Every cell of the study with the records committed in `stores` (below `base`)."""
    base = Path(base)
    study, strict = (load_plan([config], [], base) for config in (STUDY_CONFIG, STRICT_CONFIG))
    keyed, _ = store.scan_specs([base / folder for folder in stores])
    cells: dict[str, tuple[dict[int, float], dict[int, float], list[dict]]] = {}
    for run in (run for run in study.runs if run.experiment == STUDY_EXPERIMENT):
        setting = parse_setting_id(run.setting).without_variant
        tf32, fp32, records = cells.setdefault(f"{run.algorithm} {setting}", ({}, {}, []))
        twin = strict.train_job(STRICT_EXPERIMENT, setting, run.algorithm, run.seed)
        for side, wanted, is_tf32 in ((tf32, run, True), (fp32, twin, False)):
            folder = _by_spec(keyed, wanted)
            if folder is None:
                continue
            record = store.read_record(folder).record
            problem = _arithmetic_problem(record, is_tf32)
            if problem:
                raise UserError(f"numerics study: {folder} is not a {'TF32' if is_tf32 else 'strict'} run ({problem}); "
                                "move it out of the store")
            if records and _data(record) != _data(records[0]):
                raise UserError(f"numerics study: {folder} was trained on other data than {records[0]['folder']} "
                                "(partition fingerprint or digest)")
            records.append({**record, "folder": str(folder), "tf32": is_tf32})
            side[run.seed] = 100 * float(record["best_test_acc"])
    return [dataclasses.replace(judge(name, tf32, fp32, margin, alpha),
                                strict_on_gpu=sum(not r["tf32"] and _on_gpu(r) for r in records))
            for name, (tf32, fp32, records) in cells.items()]


def _accuracy(values: dict[int, float], note: str = "") -> str:
    """'mean ± sample std (seeds[; note])', or 'none'."""
    if not values:
        return "none"
    mean, std, n = _summary(values.values()) if len(values) > 1 else (next(iter(values.values())), math.nan, 1)
    return f"{mean:.2f}" + (f" ± {std:.2f}" if n > 1 else "") + f" ({n}{'; ' + note if note else ''})"


def markdown(cells: Sequence[Cell], margin: float = DEFAULT_MARGIN, alpha: float = DEFAULT_ALPHA) -> str:
    """The study's table: each side's mean ± sample std (seeds), the difference and its interval, the
    verdict, and the power at PLANNED_SEEDS TF32 seeds against the strict side as it is."""
    level = round(100 * (1 - 2 * alpha))
    lines = [f"| cell | TF32, mean ± sample std (seeds) | strict, the same (seeds; on a GPU) | difference, {level} % interval | verdict | "
             f"power at {' / '.join(map(str, PLANNED_SEEDS))} TF32 seeds |", "| --- | --- | --- | --- | --- | --- |"]
    for cell in cells:
        interval = f"{cell.diff:+.2f} [{cell.ci[0]:+.2f}, {cell.ci[1]:+.2f}]" if math.isfinite(cell.diff) else "-"
        if len(cell.strict) >= 2:
            _, std, n = _summary(cell.strict.values())
            powers = " / ".join(f"{power(std, k, n, margin, alpha):.0%}" for k in PLANNED_SEEDS)
        else:
            powers = "-"
        strict = _accuracy(cell.strict, str(cell.strict_on_gpu))
        lines.append(f"| {cell.name} | {_accuracy(cell.tf32)} | {strict} | {interval} | {cell.verdict} | {powers} |")
    return "\n".join(lines) + f"\n\nMargin ±{margin:g} points, alpha {alpha:g}. {decision(cells)}.\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fedgmh.numerics_study", description=__doc__.split("\n\n")[0])
    parser.add_argument("--margin", type=float, default=DEFAULT_MARGIN)
    parser.add_argument("--alpha", type=float, default=DEFAULT_ALPHA)
    args = parser.parse_args(argv)
    try:
        print(markdown(study_cells(margin=args.margin, alpha=args.alpha), args.margin, args.alpha), end="")
    except UserError as err:
        print(f"error: {err}")
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
