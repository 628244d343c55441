"""How often each claim rule holds or refutes on simulated runs where its claim is false, and where it
is true, at 3 and 5 seeds: the false-hold and false-refute rates (and the power) docs/claims.md quotes.

The noise is the committed runs' own: the round-to-round std of the accuracy over the last 100 rounds
of the CIFAR-100 ExDir(5, 0.5) runs is about 0.2 points for FedGMH (a settled method), 0.4 for
FedAvg, 0.6 for GMH-oa and 1.2 for FedGH. Every draw comes from one generator seeded per row, so the
table is the same on every machine. `python -m fedgmh.report.calibration` prints it;
tests/test_claims.py checks that docs/claims.md carries the same numbers.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from fedgmh.report import claims as kinds

ROUNDS = 300  # CIFAR-100's rounds in the paper
SEED_COUNTS = (3, 5)
TRIALS = 2000
SETTLED_NOISE = 0.2  # FedGMH's round-to-round noise on CIFAR-100: the settled reference


def shape(kind: str) -> np.ndarray:
    """A noiseless accuracy curve (percent) over ROUNDS + 1 evaluated rounds: `flat` (at its level from
    round 30 on), `creeping` (flat but for a steady +0.6 points every 50 rounds, as FedGMH's settled
    curve on CIFAR-100) or `rising` (still rising at the end, as FedAvg on CIFAR-100: about +0.4 points
    over its last 50 rounds)."""
    r = np.arange(ROUNDS + 1, dtype=float)
    if kind == "flat":
        return 60.0 * np.minimum(1.0, r / 30)
    if kind == "creeping":
        return 60.0 * np.minimum(1.0, r / 30) + 0.012 * np.maximum(0.0, r - 30)
    if kind == "rising":
        return 10.0 * (1 - np.exp(-r / 120))
    raise ValueError(f"unknown curve shape {kind!r}")


def noisy(kind: str, noise: float, rng: np.random.Generator, seeds: int) -> kinds.Curve:
    """`seeds` runs of `shape(kind)` plus independent normal noise of std `noise` each round."""
    base = shape(kind)
    return {s: (np.arange(len(base)), base + rng.normal(0.0, noise, len(base))) for s in range(seeds)}


def rates(verdict: Callable[[np.random.Generator], str], trials: int = TRIALS, seed: int = 0) -> tuple[float, float]:
    """The shares of `trials` simulated draws on which the rule holds, and on which it refutes."""
    rng = np.random.default_rng(seed)
    verdicts = [verdict(rng) for _ in range(trials)]
    return verdicts.count(kinds.HOLDS) / trials, verdicts.count(kinds.FAILS) / trials


def not_converged(kind: str, noise: float, seeds: int, trials: int = TRIALS, factor: float = 2.0,
                  reference_kind: str = "flat") -> tuple[float, float]:
    """"Not converged" (`kinds.not_converged`) on `kind` curves with `noise`, against a reference of
    `reference_kind` with SETTLED_NOISE on the same seeds."""
    def verdict(rng: np.random.Generator) -> str:
        curve, reference = noisy(kind, noise, rng, seeds), noisy(reference_kind, SETTLED_NOISE, rng, seeds)
        return kinds.not_converged("x", curve, reference, 20, factor).verdict

    return rates(verdict, trials)


def rounds_value(shift: float, seeds: int, trials: int = TRIALS, spread: float = 10.0, paper: float = 150.0) -> tuple[float, float]:
    """A paper's round `paper` against seeds' first rounds drawn normal (std `spread`, whole rounds)
    about paper * (1 + shift); shift None: the paper's round is itself a draw like a seed's."""
    def verdict(rng: np.random.Generator) -> str:
        if shift is None:
            draws = np.round(rng.normal(paper, spread, seeds + 1))
            rounds, claimed = draws[:seeds], float(draws[-1])
        else:
            rounds, claimed = np.round(rng.normal(paper * (1 + shift), spread, seeds)), paper
        return kinds.rounds_value("x", math.nan, {s: float(r) for s, r in enumerate(rounds)}, claimed).verdict

    return rates(verdict, trials)


def rounds_after(shift: float, seeds: int, trials: int = TRIALS, spread: float = 10.0, bound: float = 200.0) -> tuple[float, float]:
    """"Only after round `bound`" with the seeds' first rounds drawn normal (std `spread`, whole rounds)
    about bound + shift: at the bound (shift 0) the claim is false, and so is its refutation."""
    def verdict(rng: np.random.Generator) -> str:
        rounds = np.round(rng.normal(bound + shift, spread, seeds))
        return kinds.rounds_after("x", math.nan, {s: float(r) for s, r in enumerate(rounds)}, bound).verdict

    return rates(verdict, trials)


def rounds_order(lead: float, seeds: int, trials: int = TRIALS, spread: float = 2.0) -> tuple[float, float]:
    """"A before B" with A's first rounds `lead` rounds earlier than B's in law (normal, std `spread`,
    whole rounds: ties are frequent when lead is 0)."""
    def verdict(rng: np.random.Generator) -> str:
        a, b = np.round(rng.normal(80.0 - lead, spread, seeds)), np.round(rng.normal(80.0, spread, seeds))
        first = {s: float(v) for s, v in enumerate(a)}, {s: float(v) for s, v in enumerate(b)}
        return kinds.rounds_order("x", (math.nan, first[0]), (math.nan, first[1])).verdict

    return rates(verdict, trials)


def ranking(lead: float, seeds: int, comparisons: int = 1, trials: int = TRIALS, spread: float = 0.3) -> tuple[float, float]:
    """"A above B" with paired differences normal about `lead` points (std `spread`); refuting at
    ALPHA / `comparisons` (the first step of Holm's over a claim of that many comparisons)."""
    def verdict(rng: np.random.Generator) -> str:
        diffs = rng.normal(lead, spread, seeds)
        return kinds.ranking("x", {s: float(d) for s, d in enumerate(diffs)}, {s: 0.0 for s in range(seeds)},
                             kinds.ALPHA / comparisons).verdict

    return rates(verdict, trials)


def swept_cells(levels: list[float], seeds: int, rng: np.random.Generator, spread: float = 0.3) -> list[tuple[float, kinds.Cell]]:
    """Cells at parameter values 1, 2, ... with these mean accuracies on `seeds` seeds: a seed's offset
    (std 0.5) shared by every cell, plus noise making each paired difference's std `spread`."""
    offsets = rng.normal(0.0, 0.5, seeds)
    return [(float(x), {s: level + offsets[s] + rng.normal(0.0, spread / math.sqrt(2)) for s in range(seeds)})
            for x, level in enumerate(levels, 1)]


def trend(step: float, seeds: int, trials: int = TRIALS, points: int = 5) -> tuple[float, float]:
    """"Accuracy rises with the parameter" over `points` cells `step` points apart (Table 7's eta_h, Table
    4's participation: 5 points)."""
    def verdict(rng: np.random.Generator) -> str:
        return kinds.trend("x", swept_cells([77.0 + step * i for i in range(points)], seeds, rng), True).verdict

    return rates(verdict, trials)


def bound(off: float, seeds: int, trials: int = TRIALS, points: int = 10, tolerance: float = 1.0) -> tuple[float, float]:
    """"Little effect: every two cells within `tolerance`" over `points` cells (Table 6's beta: 10, within
    1 point), all alike but the last, `off` points below."""
    def verdict(rng: np.random.Generator) -> str:
        levels = [77.0] * (points - 1) + [77.0 - off]
        return kinds.bound("x", swept_cells(levels, seeds, rng), tolerance).verdict

    return rates(verdict, trials)


#: (rule, simulated case, whether the claim is true there, (seeds, trials) -> (share that holds, share that refutes))
CASES: list[tuple[str, str, bool, Callable[[int, int], tuple[float, float]]]] = [
    ("not converged", "settled: flat, noise 0.2 as the reference's", False, lambda n, t: not_converged("flat", 0.2, n, trials=t)),
    ("not converged", "settled: flat, noise 0.35 (1.75x the reference's)", False, lambda n, t: not_converged("flat", 0.35, n, trials=t)),
    ("not converged", "settled: creeping +0.6 as the reference", False,
     lambda n, t: not_converged("creeping", 0.2, n, trials=t, reference_kind="creeping")),
    ("not converged", "rising +0.4 over the last 50, noise 0.2", True, lambda n, t: not_converged("rising", 0.2, n, trials=t)),
    ("not converged", "rising +0.4 over the last 50, noise 0.4", True, lambda n, t: not_converged("rising", 0.4, n, trials=t)),
    ("not converged", "flat, swinging 3x the reference's (noise 0.6)", True, lambda n, t: not_converged("flat", 0.6, n, trials=t)),
    ("round r (three zones)", "r a draw like a seed's", True, lambda n, t: rounds_value(None, n, trials=t)),
    ("round r (three zones)", "our mean at r, spread 10", True, lambda n, t: rounds_value(0.0, n, trials=t)),
    ("round r (three zones)", "our mean 15 % after r, spread 10", False, lambda n, t: rounds_value(0.15, n, trials=t)),
    ("round r (three zones)", "our mean 30 % after r, spread 10", False, lambda n, t: rounds_value(0.30, n, trials=t)),
    ("only after round R (sign test)", "the seeds' median at R, spread 10", False, lambda n, t: rounds_after(0.0, n, trials=t)),
    ("only after round R (sign test)", "the seeds' mean 20 rounds after R, spread 10", True, lambda n, t: rounds_after(20.0, n, trials=t)),
    ("A before B (sign test, ties against)", "A and B alike (ties frequent)", False, lambda n, t: rounds_order(0.0, n, trials=t)),
    ("A before B (sign test, ties against)", "A 5 rounds earlier", True, lambda n, t: rounds_order(5.0, n, trials=t)),
    ("rising trend (5 points)", "every point alike", False, lambda n, t: trend(0.0, n, trials=t)),
    ("rising trend (5 points)", "0.5 points a step", True, lambda n, t: trend(0.5, n, trials=t)),
    ("little effect (10 points, within 1)", "every point alike", True, lambda n, t: bound(0.0, n, trials=t)),
    ("little effect (10 points, within 1)", "one point 1.5 below the rest", False, lambda n, t: bound(1.5, n, trials=t)),
    ("A above B (paired t-test)", "A and B alike", False, lambda n, t: ranking(0.0, n, trials=t)),
    ("A above B (paired t-test)", "A 0.5 points above", True, lambda n, t: ranking(0.5, n, trials=t)),
    ("A above B (paired t-test), 1 of 11 comparisons", "A 0.3 points below", False, lambda n, t: ranking(-0.3, n, 11, trials=t)),
]


def table(trials: int = TRIALS) -> list[tuple[str, str, bool, dict[int, tuple[float, float]]]]:
    """(rule, case, claim true, seeds -> (share that holds, share that refutes)) for each case."""
    return [(rule, case, true, {n: run(n, trials) for n in SEED_COUNTS}) for rule, case, true, run in CASES]


def markdown(trials: int = TRIALS) -> str:
    """The calibration table as docs/claims.md carries it: per case and seed count, the shares of draws
    that hold and that refute; an error share is a hold where the claim is false, a refutation where it is true."""
    lines = ["| rule | simulated case | claim | " + " | ".join(f"holds, {n} seeds | refutes, {n} seeds" for n in SEED_COUNTS) + " |",
             "| --- | --- | --- | " + " | ".join("---: | ---:" for _ in SEED_COUNTS) + " |"]
    for rule, case, true, shares in table(trials):
        cells = " | ".join(f"{100 * shares[n][0]:.1f} % | {100 * shares[n][1]:.1f} %" for n in SEED_COUNTS)
        lines.append(f"| {rule} | {case} | {'true' if true else 'false'} | {cells} |")
    return "\n".join(lines)


def main() -> None:
    print(markdown())


if __name__ == "__main__":
    main()
