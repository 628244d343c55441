"""The test kinds of the paper's claims (reference/fedgmh_paper_claims.yaml), each with a stated decision rule.

Every kind takes plain data -- a cell is a mapping seed -> accuracy in percent, a curve a mapping
seed -> (evaluated rounds, accuracy in percent) -- and returns a `Part`: one comparison's verdict
with the numbers behind it. A claim is one or more parts (`combine`). Verdicts: holds, does not
hold, inconclusive (too few seeds, or the data decide neither way), not run (no runs). The rules,
and why these: docs/claims.md.

- `ranking`: A above B, a one-sided paired t-test over the seeds both cells have.
- `rounds_value` / `rounds_after` / `rounds_order`: rounds to a target accuracy, each seed's own first
  round: the paper's round against a prediction interval for a new seed, a bound, or another method's
  rounds seed by seed (a tie is no evidence either way); a first round known only to lie in a range
  (a run cut short, rounds not evaluated) decides only what holds across the range.
- `trend`: a monotone trend over a swept parameter (Spearman's sign, the first-to-last change, each step).
- `bound`: "little effect": every two cells within a tolerance.
- `cost_value` / `cost_below`: section 2.3's costs, computed from the model: a paper's figure at its
  printed precision, or one quantity below another (no seeds: a computation, not a measurement).
- `convergence`: a per-seed measure of the curve's end (its swing about its trend, alone or as a multiple
  of a reference's on the same seed; its decline from the best level it held) against a threshold.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations

import numpy as np
from scipy import stats

HOLDS, FAILS, INCONCLUSIVE, NOT_RUN = "holds", "does not hold", "inconclusive", "not run"
VERDICTS = (HOLDS, FAILS, INCONCLUSIVE, NOT_RUN)
#: level of every one-sided test; a refutation among k parts of one claim is tested at ALPHA / k (Bonferroni)
ALPHA = 0.05
#: fewer seeds (shared seeds for paired tests) and a comparison is inconclusive: no spread to judge it by
MIN_SEEDS = 3
#: the coverage of the prediction interval a paper's round to a target is held against
PREDICTION = 0.90

Cell = Mapping[int, float]
Curve = Mapping[int, tuple[np.ndarray, np.ndarray]]
#: a first round at the target: a number when known (inf: never in the paper's rounds), else (low, high),
#: the range it is known to lie in (`fedgmh.report.to_target.first_round_bounds`)
Round = float | tuple[float, float]


@dataclass(frozen=True)
class Part:
    """One comparison of a claim: its verdict, a sentence of evidence, and the numbers behind it."""

    label: str
    verdict: str
    evidence: str
    measure: str = ""  # what `estimate` is
    estimate: float = math.nan
    low: float = math.nan  # with `high`: a 90 % confidence or prediction interval, or the seeds' range
    high: float = math.nan
    p_value: float = math.nan  # of the claimed direction
    n_seeds: int = 0
    reference: float = math.nan  # the threshold, tolerance or paper value it is held against

    @property
    def tested(self) -> bool:
        """Whether a significance test was made: one not run, or with too few seeds or rounds, has no p-value."""
        return not math.isnan(self.p_value)


@dataclass(frozen=True)
class TTest:
    """A one-sample t-test of a mean against `null`: a paired test when the values are paired differences."""

    n: int
    mean: float
    low: float  # the 90 % interval: its bounds are the one-sided 95 % bounds
    high: float
    p_greater: float  # H1: mean > null
    p_less: float  # H1: mean < null


def t_test(values: Sequence[float], null: float = 0.0) -> TTest:
    x = np.asarray(values, dtype=float)
    if not (np.isfinite(x).all() and math.isfinite(null)):  # the tables' numbers are checked where they are read
        raise ValueError(f"a t-test of {list(values)} against {null}: every number must be finite")
    n, mean = len(x), float(x.mean())
    se = float(x.std(ddof=1)) / math.sqrt(n) if n > 1 else math.nan
    if not se > 0:  # identical values (or one): the mean is exact
        return TTest(n, mean, mean, mean, float(mean <= null), float(mean >= null))
    t = (mean - null) / se
    q = float(stats.t.ppf(1 - ALPHA, n - 1))
    return TTest(n, mean, mean - q * se, mean + q * se, float(stats.t.sf(t, n - 1)), float(stats.t.cdf(t, n - 1)))


def decide(test: TTest, against_alpha: float) -> str:
    """holds when the claimed direction is significant at ALPHA, does not hold when the opposite is at `against_alpha`."""
    return HOLDS if test.p_greater < ALPHA else FAILS if test.p_less < against_alpha else INCONCLUSIVE


def paired(a: Cell, b: Cell) -> list[float]:
    """a - b on each seed both cells have."""
    return [a[s] - b[s] for s in sorted(set(a) & set(b))]


def _few(label: str, n: int, what: str = "shared seed") -> Part:
    """Inconclusive: n seeds ('shared seed', 'seed', 'seed in a cell'), fewer than MIN_SEEDS."""
    return Part(label, INCONCLUSIVE, f"{n} {what if n == 1 else what.replace('seed', 'seeds', 1)} (need {MIN_SEEDS})", n_seeds=n)


def _against(test: TTest, against_alpha: float) -> str:
    """The p-value the other way, where the mean goes against the claim, with the level that would refute it."""
    return f" (the other way p = {test.p_less:.2g}, refuting below {against_alpha:.2g})" if test.p_less < test.p_greater else ""


def _num(x: float) -> str:
    return "never" if math.isinf(x) else f"{x:g}"


# ----------------------------------------------------------------------------- ranking


def ranking(label: str, above: Cell, below: Cell, against_alpha: float = ALPHA) -> Part:
    """Claim: `above` is more accurate than `below`. One-sided paired t-test of the mean difference over shared seeds."""
    diffs = paired(above, below)
    if len(diffs) < MIN_SEEDS:
        return _few(label, len(diffs))
    test = t_test(diffs)
    evidence = (f"{test.mean:+.2f} points (90% CI {test.low:+.2f} to {test.high:+.2f}), one-sided p = {test.p_greater:.2g}"
                + _against(test, against_alpha) + f", {test.n} shared seeds")
    return Part(label, decide(test, against_alpha), evidence, "mean paired difference (points)", test.mean, test.low, test.high,
                test.p_greater, test.n)


# ----------------------------------------------------------------------------- rounds to a target


def _span(first: Round) -> tuple[float, float]:
    return (float(first[0]), float(first[1])) if isinstance(first, tuple) else (float(first), float(first))


def _round_text(first: Round) -> str:
    low, high = _span(first)
    return _num(low) if low == high else f"{low:g}-{_num(high)}"


def _seed_rounds(rounds: Mapping[int, Round]) -> str:
    return ", ".join(_round_text(r) for _, r in sorted(rounds.items()))


def _exact(first: Round) -> float:
    """The round where it is known, nan where only a range is."""
    low, high = _span(first)
    return low if low == high else math.nan


def _unknown(n: int) -> str:
    """The evidence's note on seeds whose first round is known only as a range."""
    return (f"; {n} unknown (a-b: somewhere from round a to b, as rounds before b were not evaluated or the run ends "
            "before the paper's last round)" if n else "")


def prediction_interval(values: Sequence[float], level: float = PREDICTION) -> tuple[float, float]:
    """Where one more seed's value falls with probability `level`, from n seeds' values taken as a
    normal sample: mean +- t((1 + level) / 2, n - 1) * s * sqrt(1 + 1/n)."""
    x = np.asarray(values, dtype=float)
    if len(x) < 2 or not np.isfinite(x).all():
        raise ValueError(f"a prediction interval from {list(values)}: at least 2 finite values")
    half = float(stats.t.ppf((1 + level) / 2, len(x) - 1)) * float(x.std(ddof=1)) * math.sqrt(1 + 1 / len(x))
    return float(x.mean()) - half, float(x.mean()) + half


def rounds_value(label: str, mean_round: Round, rounds: Mapping[int, Round], paper: float, level: float = PREDICTION) -> Part:
    """Claim: the method first reaches the target at round `paper`. Holds when `paper` lies within the
    `level` prediction interval for a new seed's first round (`prediction_interval` of our seeds'),
    does not hold when outside it, or when no seed reaches the target in the paper's rounds. A seed
    whose first round is known only as a range leaves it inconclusive: the interval needs each round."""
    if len(rounds) < MIN_SEEDS:
        return _few(label, len(rounds), "seed")
    spans = [_span(r) for _, r in sorted(rounds.items())]
    lows = [low for low, _ in spans]
    unknown = sum(low != high for low, high in spans)
    seen = f"seeds' first rounds {_seed_rounds(rounds)} (mean curve {_round_text(mean_round)}), paper {paper:g}"
    if unknown or any(math.isinf(low) for low in lows):
        never = all(math.isinf(low) for low in lows)
        why = ("; no seed reaches the target in the paper's rounds" if never else
               "; a prediction interval needs every seed's round" + _unknown(unknown))
        return Part(label, FAILS if never else INCONCLUSIVE, seen + why, "mean of the seeds' first rounds", math.nan,
                    min(lows), max(high for _, high in spans), n_seeds=len(spans), reference=paper)
    low, high = prediction_interval(lows, level)
    verdict = HOLDS if low <= paper <= high else FAILS
    evidence = seen + f"; {100 * level:g}% prediction interval for a new seed {low:.0f} to {high:.0f}"
    return Part(label, verdict, evidence, "mean of the seeds' first rounds", float(np.mean(lows)), low, high,
                n_seeds=len(spans), reference=paper)


def rounds_after(label: str, mean_round: Round, rounds: Mapping[int, Round], bound: float) -> Part:
    """Claim: the method reaches the target only after round `bound`. Holds when every seed's first
    round is known to be later, does not hold when every seed's is known not to be."""
    if len(rounds) < MIN_SEEDS:
        return _few(label, len(rounds), "seed")
    spans = [_span(r) for r in rounds.values()]
    later, earlier = sum(low > bound for low, _ in spans), sum(high <= bound for _, high in spans)
    verdict = HOLDS if later == len(spans) else FAILS if earlier == len(spans) else INCONCLUSIVE
    evidence = (f"seeds' first rounds {_seed_rounds(rounds)} (mean curve {_round_text(mean_round)}): {later} of {len(spans)} "
                f"after round {bound:g}" + _unknown(len(spans) - later - earlier))
    return Part(label, verdict, evidence, "first round of the mean curve", _exact(mean_round), min(low for low, _ in spans),
                max(high for _, high in spans), n_seeds=len(spans), reference=bound)


def _order(a: tuple[float, float], b: tuple[float, float]) -> str:
    """Whose first round comes first on one seed: 'earlier' (a's), 'later', 'tie' (the same known round,
    or both never) or 'unknown' (their ranges overlap)."""
    (a_low, a_high), (b_low, b_high) = a, b
    if a_high < b_low:
        return "earlier"
    if a_low > b_high:
        return "later"
    return "tie" if a_low == a_high == b_low == b_high else "unknown"


def rounds_order(label: str, earlier: tuple[Round, Mapping[int, Round]], later: tuple[Round, Mapping[int, Round]]) -> Part:
    """Claim: one method reaches the target before another. Per shared seed, whose first round comes
    first; a tie (the same round, or both never) is no evidence either way. Holds when the first
    method is earlier in every seed that is not a tie, does not hold when it is later in every one,
    with at least MIN_SEEDS such seeds and none whose order a range leaves unknown; else inconclusive."""
    (mean_a, a), (mean_b, b) = earlier, later
    shared = sorted(set(a) & set(b))
    if len(shared) < MIN_SEEDS:
        return _few(label, len(shared))
    pairs = [(_span(a[s]), _span(b[s])) for s in shared]
    orders = [_order(*pair) for pair in pairs]
    count = {key: orders.count(key) for key in ("earlier", "later", "tie", "unknown")}
    untied = count["earlier"] + count["later"]
    if count["unknown"] or untied < MIN_SEEDS or count["earlier"] and count["later"]:
        verdict = INCONCLUSIVE
    else:
        verdict = HOLDS if count["earlier"] else FAILS
    # the rounds from the first method's to the other's, seed by seed (never minus never: none)
    gaps = [(b_low - a_high, b_high - a_low) for (a_low, a_high), (b_low, b_high) in pairs]
    ties = f", {count['tie']} tied (no evidence either way)" if count["tie"] else ""
    evidence = (f"earlier in {count['earlier']}, later in {count['later']} of {len(shared)} shared seeds{ties} (first rounds "
                f"{_seed_rounds({s: a[s] for s in shared})} vs {_seed_rounds({s: b[s] for s in shared})}); mean curves "
                f"{_round_text(mean_a)} vs {_round_text(mean_b)}" + _unknown(count["unknown"]))
    if untied < MIN_SEEDS and not count["unknown"]:
        evidence += f"; {untied} untied seeds (need {MIN_SEEDS})"
    return Part(label, verdict, evidence, "rounds between the mean curves (later minus earlier)", _exact(mean_b) - _exact(mean_a),
                min((low for low, _ in gaps if not math.isnan(low)), default=math.nan),
                max((high for _, high in gaps if not math.isnan(high)), default=math.nan), n_seeds=len(shared))


# ----------------------------------------------------------------------------- trend and bound over a swept parameter


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Spearman's rank correlation (ties share their mean rank); nan when either side is constant."""
    rx, ry = stats.rankdata(xs), stats.rankdata(ys)
    if np.ptp(rx) == 0 or np.ptp(ry) == 0:
        return math.nan
    return float(np.corrcoef(rx, ry)[0, 1])


def _means(points: Sequence[tuple[float, Cell]]) -> list[float]:
    return [float(np.mean(list(cell.values()))) for _, cell in points]


def trend(label: str, points: Sequence[tuple[float, Cell]], increasing: bool, against_alpha: float = ALPHA) -> Part:
    """Claim: accuracy rises (falls) with the parameter. Holds when Spearman's rho of the cell means
    has the claimed sign, the first-to-last change is significant in the claimed direction (paired
    t-test) and no step goes significantly the other way (each step at ALPHA / steps); does not
    hold when the first-to-last change, or a step, goes significantly the other way."""
    points = sorted(points, key=lambda point: point[0])
    few = min(len(cell) for _, cell in points)
    if few < MIN_SEEDS:
        return _few(label, few, "seed in a cell")
    sign = 1.0 if increasing else -1.0
    means = _means(points)
    rho = spearman([x for x, _ in points], means)
    steps, against = [], False
    for (x0, a), (x1, b) in zip(points, points[1:]):
        diffs = paired(b, a)
        if len(diffs) < MIN_SEEDS:
            return _few(label, len(diffs))
        step = t_test([sign * d for d in diffs])
        against |= step.p_less < against_alpha / (len(points) - 1)
        noise = "*" if min(step.p_greater, step.p_less) < ALPHA / 2 else ""  # the two-sided 95 % interval excludes 0
        steps.append(f"{x0:g}→{x1:g} {sign * step.mean:+.2f}{noise}")
    whole = paired(points[-1][1], points[0][1])
    if len(whole) < MIN_SEEDS:
        return _few(label, len(whole))
    overall = t_test([sign * d for d in whole])
    if overall.p_greater < ALPHA and sign * rho > 0 and not against:
        verdict = HOLDS
    elif overall.p_less < against_alpha or against:
        verdict = FAILS
    else:
        verdict = INCONCLUSIVE
    low, high = sorted((sign * overall.low, sign * overall.high))
    evidence = (f"Spearman rho {rho:+.2f}; first to last {sign * overall.mean:+.2f} points (one-sided p = {overall.p_greater:.2g}); "
                f"steps {', '.join(steps)} (*: beyond noise)")
    return Part(label, verdict, evidence, "change first to last point (points)", sign * overall.mean, low, high, overall.p_greater,
                few)


def bound(label: str, points: Sequence[tuple[float, Cell]], tolerance: float, against_alpha: float = ALPHA) -> Part:
    """Claim: the parameter has little effect, every two cells within `tolerance` points. Holds when
    every pair's paired difference has its 90 % interval within +-tolerance (two one-sided tests a
    pair; a claim on every pair needs no correction); does not hold when some pair's difference is
    beyond the tolerance, on either side, at against_alpha / (k(k-1)) (Bonferroni over the k(k-1)/2
    pairs, each two-sided), so that the widest pair, chosen after seeing the data, refutes a true
    claim with probability at most against_alpha. The numbers shown: the highest minus the lowest cell."""
    few = min(len(cell) for _, cell in points)
    if few < MIN_SEEDS:
        return _few(label, few, "seed in a cell")
    within, beyond = [], []  # per pair: p-value of |difference| < tolerance (TOST), of > tolerance (the likelier side)
    for (x0, a), (x1, b) in combinations(points, 2):
        diffs = paired(b, a)
        if len(diffs) < MIN_SEEDS:
            return _few(label, len(diffs))
        up, down = t_test(diffs, null=tolerance), t_test(diffs, null=-tolerance)
        within.append(max(up.p_less, down.p_greater))
        beyond.append((min(up.p_greater, down.p_less), f"{x1:g} minus {x0:g}"))
    p_within, (p_beyond, widest) = max(within), min(beyond)
    level = against_alpha / (len(points) * (len(points) - 1))
    verdict = HOLDS if p_within < ALPHA else FAILS if p_beyond < level else INCONCLUSIVE
    means = _means(points)
    top, bottom = points[int(np.argmax(means))], points[int(np.argmin(means))]
    test = t_test(paired(top[1], bottom[1]))
    evidence = (f"cell means {min(means):.2f} to {max(means):.2f}: highest ({top[0]:g}) minus lowest ({bottom[0]:g}) "
                f"{test.mean:.2f} points (90% CI {test.low:.2f} to {test.high:.2f}), tolerance {tolerance:g}; every pair within "
                f"it p = {p_within:.2g}; beyond it most clearly {widest}, p = {p_beyond:.2g}, refuting below {level:.2g} "
                f"({len(within)} pairs)")
    return Part(label, verdict, evidence, "highest minus lowest cell (points)", test.mean, test.low, test.high, p_within, few,
                tolerance)


# ----------------------------------------------------------------------------- convergence


def swing(acc: np.ndarray, last: int) -> float:
    """The std of the last `last` values about their least-squares line: how much the curve swings,
    not how much it still rises or falls."""
    y = acc[-last:]
    x = np.arange(len(y), dtype=float)
    return float(np.std(y - np.polyval(np.polyfit(x, y, 1), x)))


def _window_means(acc: np.ndarray, last: int, parity: int) -> np.ndarray:
    """The mean of the values at evaluations of `parity` (0: even, 1: odd) in every window of `last`."""
    kept = np.arange(len(acc)) % 2 == parity
    ones = np.ones(last)
    return np.convolve(np.where(kept, acc, 0.0), ones, mode="valid") / np.convolve(kept.astype(float), ones, mode="valid")


def decline(acc: np.ndarray, last: int) -> float:
    """How far the curve ends below the best level it held: the mean of its last `last` values subtracted
    from the level of its best window of `last` consecutive values. The window is picked by the mean
    of its even-numbered evaluations and its level measured by its odd-numbered ones, so the noise
    that picks it does not also measure it: on a flat noisy curve the best single round (or the best
    window, picked and measured on the same values) lies above the level by the noise alone."""
    acc = np.asarray(acc, dtype=float)
    picked = int(np.argmax(_window_means(acc, last, 0)))
    return float(_window_means(acc, last, 1)[picked] - np.mean(acc[-last:]))


#: measure -> (what it is, its value for one seed's accuracy curve in percent and the last k evaluated rounds)
MEASURES = {
    "fluctuation": ("std of the last rounds about their trend line (points)", swing),
    "relative_fluctuation": ("std of the last rounds about their trend line, as a multiple of the reference's", swing),
    "decline": ("level of the best k consecutive rounds minus the mean of the last k (points)", decline),
}
#: the measures held against a reference curve of the same seed (a ratio, tested on the log scale)
RELATIVE = ("relative_fluctuation",)


def _values(curve: Curve, seeds: Sequence[int], measure: str, last: int) -> list[float]:
    return [MEASURES[measure][1](np.asarray(curve[s][1], dtype=float), last) for s in seeds]


def convergence(label: str, curve: Curve, measure: str, last: int, threshold: float, above: bool = True,
                against_alpha: float = ALPHA, reference: Curve | None = None) -> Part:
    """Claim: the curve's end swings (or declines) by more than `threshold` (`above`), or by less.
    Each seed's measure over its last `last` evaluated rounds, a one-sample t-test of their mean
    against the threshold. A relative measure is each seed's ratio to the `reference` curve's on the
    same seed (another method, or the same method in another setting), tested on the log scale
    against log(threshold)."""
    relative = measure in RELATIVE
    if relative and reference is None:
        raise ValueError(f"measure {measure} needs a reference curve")
    seeds = sorted(set(curve) & set(reference)) if relative else sorted(curve)
    if len(seeds) < MIN_SEEDS:
        return _few(label, len(seeds), "shared seed" if relative else "seed")
    short = min(len(acc) for _, acc in [*(curve[s] for s in seeds), *((reference[s] for s in seeds) if relative else ())])
    if short < last:
        return Part(label, INCONCLUSIVE, f"only {short} evaluated rounds (need {last})", n_seeds=len(seeds))
    values = _values(curve, seeds, measure, last)
    what = MEASURES[measure][0]
    if relative:
        base = _values(reference, seeds, measure, last)
        if min(base) <= 0:
            return Part(label, INCONCLUSIVE, "the reference curve does not move at all on some seed", n_seeds=len(seeds))
        values = [v / b for v, b in zip(values, base)]
        logs = t_test(np.log(values), null=math.log(threshold))
        test = TTest(logs.n, math.exp(logs.mean), math.exp(logs.low), math.exp(logs.high), logs.p_greater, logs.p_less)
    else:
        test = t_test(values, null=threshold)
    if not above:
        test = TTest(test.n, test.mean, test.low, test.high, test.p_less, test.p_greater)
    seeds_text = ", ".join(f"{v:.2f}" for v in values)
    unit = "times the reference's" if relative else "points"
    mean = "geometric mean" if relative else "mean"
    evidence = (f"{measure} over the last {last} rounds, {mean} {test.mean:.2f} {unit} (seeds {seeds_text}; 90% CI "
                f"{test.low:.2f} to {test.high:.2f}), threshold {threshold:g}" + _against(test, against_alpha))
    return Part(label, decide(test, against_alpha), evidence, what, test.mean, test.low, test.high, test.p_greater, test.n, threshold)


# ----------------------------------------------------------------------------- costs


def at_printed_precision(printed: str, value: float) -> bool:
    """Whether `value` is the paper's figure as printed (`printed`, its text): equal once rounded to
    the decimals the paper prints (2004 holds 2003.91; 200.39 holds 200.390625)."""
    decimals = len(printed.partition(".")[2])
    return abs(value - float(printed)) <= 0.5 * 10.0**-decimals + 1e-9


def cost_value(label: str, value: float, printed: str, unit: str = "KB") -> Part:
    """Claim: the computed cost is the paper's figure. Holds when it is, at the paper's printed precision."""
    verdict = HOLDS if at_printed_precision(printed, value) else FAILS
    return Part(label, verdict, f"computed {value:.2f} {unit}, paper {printed} {unit}", f"computed cost ({unit})", value,
                reference=float(printed))


def cost_below(label: str, value: float, other: float, unit: str = "KB") -> Part:
    """Claim: one computed cost is below another."""
    verdict = HOLDS if value < other else FAILS
    return Part(label, verdict, f"computed {value:.2f} {unit} against {other:.2f} {unit}", f"computed cost ({unit})", value, reference=other)


# ----------------------------------------------------------------------------- a claim from its parts


def combine(parts: Sequence[Part]) -> str:
    """A claim's verdict: does not hold if a part does not, holds if every part holds, not run if
    none was run, else inconclusive."""
    verdicts = {part.verdict for part in parts}
    if FAILS in verdicts:
        return FAILS
    if verdicts == {HOLDS}:
        return HOLDS
    if not verdicts or verdicts == {NOT_RUN}:
        return NOT_RUN
    return INCONCLUSIVE


def deciding(parts: Sequence[Part]) -> Part | None:
    """The part whose numbers stand for the claim: the first that does not hold, else the first
    inconclusive one, else (all hold) the weakest, the one with the largest p-value."""
    for verdict in (FAILS, INCONCLUSIVE):
        found = [part for part in parts if part.verdict == verdict]
        if found:
            return found[0]
    held = [part for part in parts if part.verdict == HOLDS]
    if held:
        return max(held, key=lambda part: -math.inf if math.isnan(part.p_value) else part.p_value)
    return parts[0] if parts else None
