"""The decision rules of the paper's claims (reference/fedgmh_paper_claims.yaml), which the claim
kinds (`fedgmh.report.claim_kinds`) apply to the runs.

Every rule takes plain data -- a cell is a mapping seed -> accuracy in percent, a curve a mapping
seed -> (evaluated rounds, accuracy in percent) -- and returns a `Part`: one comparison's verdict
with the numbers behind it. A claim is one or more parts (`combine`). Verdicts: holds, does not
hold, inconclusive (too few seeds, or the data decide neither way), not run (no runs). The rules,
and why these: docs/claims.md.

- `ranking`: A above B, a one-sided paired t-test over the seeds both cells have.
- `rounds_value` / `rounds_after` / `rounds_order`: rounds to a target accuracy, each seed's own first
  round: the paper's round against a prediction interval for a new seed, a bound, or another method's
  rounds seed by seed (sign tests; a tie counts against "before"); a first round known only to lie in a range
  (a run cut short, rounds not evaluated) decides only what holds across the range.
- `trend`: a monotone trend over a swept parameter (Spearman's sign, the first-to-last change, each step).
- `bound`: "little effect": every two cells within a tolerance.
- `cost_value` / `cost_below`: section 2.3's costs, computed from the model: a paper's figure at its
  printed precision, or one quantity below another (no seeds: a computation, not a measurement).
- `convergence`: a per-seed measure of the curve's end (its swing about its trend, alone or as a multiple
  of a reference's on the same seed) against a threshold.
- `not_converged`: still rising at the end more than a settled reference, or swinging at least twice as much.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations

import numpy as np

HOLDS, FAILS, INCONCLUSIVE, NOT_RUN = "holds", "does not hold", "inconclusive", "not run"
VERDICTS = (HOLDS, FAILS, INCONCLUSIVE, NOT_RUN)
#: level of every one-sided test; a refutation among k parts of one claim is tested at ALPHA / k (Bonferroni)
ALPHA = 0.05
#: fewer seeds (shared seeds for paired tests) and a comparison is inconclusive: no spread to judge it by
MIN_SEEDS = 3
#: the fewest seeds at which a sign test (`rounds_order`, `rounds_after`) can decide: all of them one way, 1/2**n < ALPHA
SIGN_SEEDS = math.floor(math.log2(1 / ALPHA)) + 1
#: the coverage of the prediction interval a paper's round to a target is held against: outside it, refuted
PREDICTION = 0.90
#: a paper's round to a target holds when our mean round's 90 % interval lies within +- this share of it
ROUND_TOLERANCE = 0.10
#: "not converged": the rounds whose least-squares rise tests "still rising", and the rise (points over
#: them) within which a curve counts as flat
RISE_WINDOW = 50
SETTLED_RISE = 0.5


@dataclass(frozen=True)
class Rules:
    """The choices a rule leaves open, at the values the verdicts use; the robustness check
    (`fedgmh.report.robustness`) re-decides every claim with each changed."""

    prediction: float = PREDICTION  # the coverage of the interval a paper's round is held against
    tolerance: float = ROUND_TOLERANCE  # within which share of a paper's round our mean round's interval holds it
    window: int | None = None  # the rounds that make a curve's end (None: the claim's `last`)
    rise_window: int = RISE_WINDOW  # the rounds whose rise tests "still rising"


Cell = Mapping[int, float]
Curve = Mapping[int, tuple[np.ndarray, np.ndarray]]
#: a first round at the target: a number when known (inf: never in the paper's rounds), else (low, high),
#: the range it is known to lie in (`fedgmh.report.to_target.first_round_bounds`)
Round = float | tuple[float, float]


def _stats():
    """scipy.stats, imported on first use: the workflow reads the claim kinds, which import these
    rules, while it builds its DAG, and importing scipy takes seconds."""
    from scipy import stats

    return stats


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
    p_against: float = math.nan  # the smallest level at which it refutes the claim (nan: a rule, not a test)
    unanimous: bool = False  # every seed points the way of its verdict (no single seed can turn it)
    min_seeds: int = MIN_SEEDS  # the fewest seeds at which its rule can decide (a sign test: SIGN_SEEDS)

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
    q = float(_stats().t.ppf(1 - ALPHA, n - 1))
    return TTest(n, mean, mean - q * se, mean + q * se, float(_stats().t.sf(t, n - 1)), float(_stats().t.cdf(t, n - 1)))


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
    verdict = decide(test, against_alpha)
    return Part(label, verdict, evidence, "mean paired difference (points)", test.mean, test.low, test.high,
                test.p_greater, test.n, p_against=test.p_less, unanimous=_one_way(diffs, verdict))


def _one_way(values: Sequence[float], verdict: str, null: float = 0.0) -> bool:
    """Whether every seed's value lies on the side of `null` its verdict says: above for holds, below for does not hold."""
    return verdict == HOLDS and all(v > null for v in values) or verdict == FAILS and all(v < null for v in values)


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
    half = float(_stats().t.ppf((1 + level) / 2, len(x) - 1)) * float(x.std(ddof=1)) * math.sqrt(1 + 1 / len(x))
    return float(x.mean()) - half, float(x.mean()) + half


def rounds_value(label: str, mean_round: Round, rounds: Mapping[int, Round], paper: float, level: float = PREDICTION,
                 tolerance: float = ROUND_TOLERANCE) -> Part:
    """Claim: the method first reaches the target at round `paper`. Three zones: holds when the 90 %
    confidence interval for our mean first round lies within paper +- `tolerance` * paper (fixed in
    advance); does not hold when `paper` lies outside the `level` prediction interval for a new
    seed's first round (`prediction_interval`), or no seed reaches the target in the paper's rounds;
    otherwise inconclusive ("not refuted"). A seed whose first round is known only as a range leaves
    it inconclusive: the intervals need each round."""
    if len(rounds) < MIN_SEEDS:
        return _few(label, len(rounds), "seed")
    spans = [_span(r) for _, r in sorted(rounds.items())]
    lows = [low for low, _ in spans]
    unknown = sum(low != high for low, high in spans)
    seen = f"seeds' first rounds {_seed_rounds(rounds)} (mean curve {_round_text(mean_round)}), paper {paper:g}"
    if unknown or any(math.isinf(low) for low in lows):
        never = all(math.isinf(low) for low in lows)
        why = ("; no seed reaches the target in the paper's rounds" if never else
               "; the intervals need every seed's round" + _unknown(unknown))
        return Part(label, FAILS if never else INCONCLUSIVE, seen + why, "mean of the seeds' first rounds", math.nan,
                    min(lows), max(high for _, high in spans), n_seeds=len(spans), reference=paper,
                    unanimous=never)
    low, high = prediction_interval(lows, level)
    mean = t_test(lows)
    band = (paper * (1 - tolerance), paper * (1 + tolerance))
    if band[0] <= mean.low and mean.high <= band[1]:
        verdict, zone = HOLDS, "holds: our mean's 90% interval lies within the tolerance"
    elif not low <= paper <= high:
        verdict, zone = FAILS, "does not hold: the paper's round lies outside the prediction interval"
    else:
        verdict, zone = INCONCLUSIVE, "not refuted: inside the prediction interval, but our mean's interval is not within the tolerance"
    evidence = (seen + f"; our mean {mean.mean:.0f} (90% CI {mean.low:.0f} to {mean.high:.0f}), tolerance {band[0]:.0f} to "
                f"{band[1]:.0f} (paper +-{100 * tolerance:g}%); {100 * level:g}% prediction interval for a new seed {low:.0f} to "
                f"{high:.0f}: {zone}")
    unanimous = (all(band[0] <= r <= band[1] for r in lows) if verdict == HOLDS else
                 verdict == FAILS and (all(r > paper for r in lows) or all(r < paper for r in lows)))
    return Part(label, verdict, evidence, "mean of the seeds' first rounds", mean.mean, mean.low, mean.high,
                n_seeds=len(spans), reference=paper, unanimous=unanimous)


def rounds_after(label: str, mean_round: Round, rounds: Mapping[int, Round], bound: float,
                 against_alpha: float = ALPHA) -> Part:
    """Claim: the method reaches the target only after round `bound`. A sign test over all n seeds, each
    first round known to be later, known not to be, or unknown (counting for neither side):
    holds when P(Binomial(n, 1/2) >= later) < ALPHA, does not hold when the same chance of the seeds
    at or before it is below `against_alpha` (its Holm level); so every one of at least SIGN_SEEDS seeds (`rounds_order`'s rule:
    all 3 of 3 one way happens 1 time in 8 when the seeds' median is at the bound)."""
    if len(rounds) < MIN_SEEDS:
        return _few(label, len(rounds), "seed")
    spans = [_span(r) for r in rounds.values()]
    n = len(spans)
    later, earlier = sum(low > bound for low, _ in spans), sum(high <= bound for _, high in spans)
    p_hold, p_against = sign_p(later, n), sign_p(earlier, n)
    verdict = HOLDS if p_hold < ALPHA else FAILS if p_against < against_alpha else INCONCLUSIVE
    evidence = (f"seeds' first rounds {_seed_rounds(rounds)} (mean curve {_round_text(mean_round)}): {later} of {n} "
                f"after round {bound:g}; sign test p = {p_hold:.2g}, the other way p = {p_against:.2g} (refuting below "
                f"{against_alpha:.2g})" + _unknown(n - later - earlier))
    if verdict == INCONCLUSIVE and n < SIGN_SEEDS and max(later, earlier) == n:
        evidence += f"; {n} seeds cannot reach {ALPHA:g} (all {n} one way: p = {sign_p(n, n):.2g}; {SIGN_SEEDS} needed)"
    unanimous = later == n if verdict == HOLDS else earlier == n if verdict == FAILS else False
    return Part(label, verdict, evidence, "first round of the mean curve", _exact(mean_round), min(low for low, _ in spans),
                max(high for _, high in spans), p_hold, n, reference=bound, p_against=p_against, unanimous=unanimous,
                min_seeds=SIGN_SEEDS)


def _order(a: tuple[float, float], b: tuple[float, float]) -> str:
    """Whose first round comes first on one seed: 'earlier' (a's), 'later', 'tie' (the same known round,
    or both never) or 'unknown' (their ranges overlap)."""
    (a_low, a_high), (b_low, b_high) = a, b
    if a_high < b_low:
        return "earlier"
    if a_low > b_high:
        return "later"
    return "tie" if a_low == a_high == b_low == b_high else "unknown"


def sign_p(successes: int, n: int) -> float:
    """The one-sided sign test's p-value: the chance of at least `successes` of `n` seeds going one way
    when each goes that way with probability 1/2 (a tie counts as not going that way)."""
    return float(_stats().binom.sf(successes - 1, n, 0.5)) if n else 1.0


def rounds_order(label: str, earlier: tuple[Round, Mapping[int, Round]], later: tuple[Round, Mapping[int, Round]],
                 against_alpha: float = ALPHA) -> Part:
    """Claim: one method reaches the target strictly before another. Per shared seed, whose first round
    comes first: earlier, later, tied (the same round, or both never) or unknown (ranges that overlap).
    A sign test in which a tie counts against the claim: holds when the first method is earlier in so
    many seeds that P(Binomial(n, 1/2) >= earlier) < ALPHA (every seed of at least 5); does not hold
    when it is later or tied in so many that the same chance is below `against_alpha`. An unknown
    seed counts for neither side."""
    (mean_a, a), (mean_b, b) = earlier, later
    shared = sorted(set(a) & set(b))
    if len(shared) < MIN_SEEDS:
        return _few(label, len(shared))
    pairs = [(_span(a[s]), _span(b[s])) for s in shared]
    orders = [_order(*pair) for pair in pairs]
    count = {key: orders.count(key) for key in ("earlier", "later", "tie", "unknown")}
    n = len(shared)
    p_hold, p_against = sign_p(count["earlier"], n), sign_p(count["later"] + count["tie"], n)
    verdict = HOLDS if p_hold < ALPHA else FAILS if p_against < against_alpha else INCONCLUSIVE
    # the rounds from the first method's to the other's, seed by seed (never minus never: none)
    gaps = [(b_low - a_high, b_high - a_low) for (a_low, a_high), (b_low, b_high) in pairs]
    ties = f", tied in {count['tie']} (a tie counts against)" if count["tie"] else ""
    evidence = (f"earlier in {count['earlier']}, later in {count['later']} of {n} shared seeds{ties} (first rounds "
                f"{_seed_rounds({s: a[s] for s in shared})} vs {_seed_rounds({s: b[s] for s in shared})}); mean curves "
                f"{_round_text(mean_a)} vs {_round_text(mean_b)}; sign test p = {p_hold:.2g}, the other way p = {p_against:.2g} "
                f"(refuting below {against_alpha:.2g})" + _unknown(count["unknown"]))
    if verdict == INCONCLUSIVE and n < SIGN_SEEDS and count["unknown"] == 0:
        evidence += f"; {n} seeds cannot reach {ALPHA:g} (all {n} one way: p = {sign_p(n, n):.2g}; {SIGN_SEEDS} needed)"
    one_way = count["earlier"] == n if verdict == HOLDS else count["later"] + count["tie"] == n
    return Part(label, verdict, evidence, "rounds between the mean curves (later minus earlier)", _exact(mean_b) - _exact(mean_a),
                min((low for low, _ in gaps if not math.isnan(low)), default=math.nan),
                max((high for _, high in gaps if not math.isnan(high)), default=math.nan), p_hold, n,
                p_against=p_against, unanimous=verdict in (HOLDS, FAILS) and one_way, min_seeds=SIGN_SEEDS)


# ----------------------------------------------------------------------------- trend and bound over a swept parameter


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Spearman's rank correlation (ties share their mean rank); nan when either side is constant."""
    rx, ry = _stats().rankdata(xs), _stats().rankdata(ys)
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
    steps, p_steps = [], 1.0
    for (x0, a), (x1, b) in zip(points, points[1:]):
        diffs = paired(b, a)
        if len(diffs) < MIN_SEEDS:
            return _few(label, len(diffs))
        step = t_test([sign * d for d in diffs])
        p_steps = min(p_steps, step.p_less * (len(points) - 1))  # each step refutes at against_alpha / steps
        noise = "*" if min(step.p_greater, step.p_less) < ALPHA / 2 else ""  # the two-sided 95 % interval excludes 0
        steps.append(f"{x0:g}→{x1:g} {sign * step.mean:+.2f}{noise}")
    whole = paired(points[-1][1], points[0][1])
    if len(whole) < MIN_SEEDS:
        return _few(label, len(whole))
    overall = t_test([sign * d for d in whole])
    p_against = min(1.0, overall.p_less, p_steps)
    if overall.p_greater < ALPHA and sign * rho > 0 and not p_steps < against_alpha:
        verdict = HOLDS
    elif p_against < against_alpha:
        verdict = FAILS
    else:
        verdict = INCONCLUSIVE
    low, high = sorted((sign * overall.low, sign * overall.high))
    evidence = (f"Spearman rho {rho:+.2f}; first to last {sign * overall.mean:+.2f} points (one-sided p = {overall.p_greater:.2g}); "
                f"steps {', '.join(steps)} (*: beyond noise)")
    return Part(label, verdict, evidence, "change first to last point (points)", sign * overall.mean, low, high, overall.p_greater,
                few, p_against=p_against, unanimous=_one_way([sign * d for d in whole], verdict))


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
    inside = all(abs(d) < tolerance for (_, a), (_, b) in combinations(points, 2) for d in paired(b, a))
    return Part(label, verdict, evidence, "highest minus lowest cell (points)", test.mean, test.low, test.high, p_within, few,
                tolerance, p_against=min(1.0, p_beyond * len(points) * (len(points) - 1)), unanimous=verdict == HOLDS and inside)


# ----------------------------------------------------------------------------- convergence


def swing(acc: np.ndarray, last: int) -> float:
    """The std of the last `last` values about their least-squares line: how much the curve swings,
    not how much it still rises or falls."""
    y = acc[-last:]
    x = np.arange(len(y), dtype=float)
    return float(np.std(y - np.polyval(np.polyfit(x, y, 1), x)))


#: measure -> (what it is, its value for one seed's accuracy curve in percent and the last k evaluated rounds)
MEASURES = {
    "fluctuation": ("std of the last rounds about their trend line (points)", swing),
    "relative_fluctuation": ("std of the last rounds about their trend line, as a multiple of the reference's", swing),
}
#: the measures held against a reference curve of the same seed (a ratio, tested on the log scale)
RELATIVE = ("relative_fluctuation",)


def _values(curve: Curve, seeds: Sequence[int], measure: str, last: int) -> list[float]:
    return [MEASURES[measure][1](np.asarray(curve[s][1], dtype=float), last) for s in seeds]


def convergence(label: str, curve: Curve, measure: str, last: int, threshold: float, above: bool = True,
                against_alpha: float = ALPHA, reference: Curve | None = None) -> Part:
    """Claim: the curve's end swings by more than `threshold` (`above`), or by less.
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
        values, test = _log_ratio_test(values, base, threshold)
    else:
        test = t_test(values, null=threshold)
    if not above:
        test = TTest(test.n, test.mean, test.low, test.high, test.p_less, test.p_greater)
    seeds_text = ", ".join(f"{v:.2f}" for v in values)
    unit = "times the reference's" if relative else "points"
    mean = "geometric mean" if relative else "mean"
    evidence = (f"{measure} over the last {last} rounds, {mean} {test.mean:.2f} {unit} (seeds {seeds_text}; 90% CI "
                f"{test.low:.2f} to {test.high:.2f}), threshold {threshold:g}" + _against(test, against_alpha))
    verdict = decide(test, against_alpha)
    sides = [v - threshold if above else threshold - v for v in values]
    return Part(label, verdict, evidence, what, test.mean, test.low, test.high, test.p_greater, test.n, threshold,
                p_against=test.p_less, unanimous=_one_way(sides, verdict))


def rise(rounds: np.ndarray, acc: np.ndarray, last: int) -> float:
    """How much the curve still rises over its last `last` evaluated rounds: the least-squares slope of
    accuracy on round number, times `last` (points over the window)."""
    x, y = np.asarray(rounds[-last:], dtype=float), np.asarray(acc[-last:], dtype=float)
    return float(np.polyfit(x, y, 1)[0]) * last


def _log_ratio_test(values: Sequence[float], base: Sequence[float], factor: float) -> tuple[list[float], TTest]:
    """Each seed's value over its reference's, and the t-test of their logs against log(factor), back on the ratio scale."""
    ratios = [v / b for v, b in zip(values, base)]
    logs = t_test(np.log(ratios), null=math.log(factor))
    return ratios, TTest(logs.n, math.exp(logs.mean), math.exp(logs.low), math.exp(logs.high), logs.p_greater, logs.p_less)


def not_converged(label: str, curve: Curve, reference: Curve, last: int, factor: float, rise_last: int = RISE_WINDOW,
                  settled_rise: float = SETTLED_RISE, against_alpha: float = ALPHA) -> Part:
    """Claim: the curve has not converged. Two parts, each on the seeds it shares with a settled
    `reference` (the same seeds of a method the paper shows settling):

    - rising: each seed's `rise` over its last `rise_last` evaluated rounds less the reference's on
      the same seed, significantly above 0 (a settled curve still creeps up: FedGMH's does on CIFAR-100);
    - swinging: each seed's `swing` over its last `last` rounds, significantly above `factor` times
      the reference's on the same seed (tested on the log scale).

    Holds when either part does, each at ALPHA / 2 (a union of two tests). Does not hold when both
    show the curve settled: the rise beyond the reference's, its 90 % interval within
    +-`settled_rise` points, and the swing significantly below `factor` times the reference's, each at `against_alpha`. A part without
    the evaluated rounds it needs cannot decide; the evidence names the part that decided."""
    seeds = sorted(set(curve) & set(reference))
    if len(seeds) < MIN_SEEDS:
        return _few(label, len(seeds))
    evaluated = min(len(curve[s][1]) for s in seeds)
    reference_evaluated = min(len(reference[s][1]) for s in seeds)
    notes, held, settled, p_holds, p_settled = [], [], [], [], []
    estimates: dict[str, tuple[str, TTest]] = {}
    if min(evaluated, reference_evaluated) >= rise_last:
        rises = [rise(curve[s][0], curve[s][1], rise_last) - rise(reference[s][0], reference[s][1], rise_last)
                 for s in seeds]
        up = t_test(rises)
        flat = max(t_test(rises, null=settled_rise).p_less, t_test(rises, null=-settled_rise).p_greater)
        p_holds.append(up.p_greater)
        p_settled.append(flat)
        if up.p_greater < ALPHA / 2:
            held.append(("rising", all(r > 0 for r in rises)))
        if flat < against_alpha:
            settled.append(all(abs(r) < settled_rise for r in rises))
        estimates["rising"] = (f"rise over the last {rise_last} rounds beyond the reference's (points)", up)
        notes.append(f"rise over the last {rise_last} rounds beyond the reference's {up.mean:+.2f} points (seeds "
                     f"{', '.join(f'{r:+.2f}' for r in rises)}; "
                     f"90% CI {up.low:+.2f} to {up.high:+.2f}; above 0 p = {up.p_greater:.2g}, within +-{settled_rise:g} p = {flat:.2g})")
    else:
        notes.append(f"rise: only {min(evaluated, reference_evaluated)} evaluated rounds (need {rise_last})")
    if min(evaluated, reference_evaluated) >= last:
        base = [swing(np.asarray(reference[s][1], dtype=float), last) for s in seeds]
        if min(base) > 0:
            ratios, test = _log_ratio_test([swing(np.asarray(curve[s][1], dtype=float), last) for s in seeds], base, factor)
            p_holds.append(test.p_greater)
            p_settled.append(test.p_less)
            if test.p_greater < ALPHA / 2:
                held.append(("swinging", all(r > factor for r in ratios)))
            if test.p_less < against_alpha:
                settled.append(all(r < factor for r in ratios))
            estimates["swinging"] = (f"swing over the last {last} rounds, times the reference's", test)
            notes.append(f"swing over the last {last} rounds {test.mean:.2f} times the reference's (seeds "
                         f"{', '.join(f'{r:.2f}' for r in ratios)}; 90% CI {test.low:.2f} to {test.high:.2f}; above {factor:g} "
                         f"p = {test.p_greater:.2g}, below it p = {test.p_less:.2g})")
        else:
            notes.append("swing: the reference does not move at all on some seed")
    else:
        notes.append(f"swing: fewer than {last} evaluated rounds")
    if held:
        verdict, why = HOLDS, "decided by: " + " and ".join(name for name, _ in held)
    elif len(settled) == 2:
        verdict, why = FAILS, "decided by: both parts (settled: flat and calm)"
    else:
        verdict, why = INCONCLUSIVE, "neither part decides"
    evidence = "; ".join(notes) + f"; each part holds below {ALPHA / 2:g}, refutes below {against_alpha:.2g}: {why}"
    if not estimates:
        return Part(label, INCONCLUSIVE, evidence, n_seeds=len(seeds))
    # the numbers of the part that decided (the first, where both did), else of the rise where measured
    measure, test = estimates[held[0][0]] if held else estimates.get("rising", estimates.get("swinging"))
    unanimous = any(one for _, one in held) if verdict == HOLDS else verdict == FAILS and all(settled)
    p_against = max(p_settled) if len(p_settled) == 2 else math.nan
    return Part(label, verdict, evidence, measure, test.mean, test.low, test.high, min(1.0, 2 * min(p_holds)), len(seeds),
                factor if "times" in measure else 0.0, p_against=p_against, unanimous=unanimous)


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
