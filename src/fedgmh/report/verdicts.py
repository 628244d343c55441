"""Whether one of our cells reproduces the paper's: Welch's interval and an equivalence test (TOST).

Both sides are means over seeds: ours over our n distinct seeds (sample std, ddof=1), the paper's
over its 5 seeds, whose reported std is the population std (ddof=0, PFLlib's np.std), converted
to the sample std s = sigma * sqrt(5/4). The difference d = ours - paper has the Welch standard
error se = sqrt(s_o^2/n_o + s_p^2/n_p) and the Welch-Satterthwaite degrees of freedom. With the
margin M (accuracy points) and the level alpha:

- *reproduced*: both one-sided tests of TOST reject at alpha (H0: d <= -M and H0: d >= +M), i.e.
  the (1 - 2 alpha) interval d ± t(1 - alpha, df) * se lies inside (-M, +M);
- *not reproduced*: the difference is shown to lie beyond the margin, i.e. the one-sided test of
  H0: d <= +M (or of H0: d >= -M) rejects at alpha: the whole (1 - 2 alpha) interval lies above +M
  (or below -M);
- *inconclusive*: neither (the interval overlaps a margin's edge: too few seeds or too much spread
  to tell).

`p_welch` is the ordinary two-sided Welch p-value of "no difference" (d = 0): a cell can be within
the margin and still significantly off the paper's mean. How to read them: docs/verdicts.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy import stats

from fedgmh.errors import UserError

#: the default equivalence margin in accuracy points (why 0.5: docs/verdicts.md)
DEFAULT_MARGIN = 0.5
DEFAULT_ALPHA = 0.05
#: fewer distinct seeds than this and a cell is not judged: its spread over seeds is barely known
MIN_SEEDS = 3
REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE = "reproduced", "not reproduced", "inconclusive"


def check_test_settings(margin: float, alpha: float) -> None:
    """The margin must be a finite number > 0, alpha in (0, 0.5) (the interval shown is the (1 - 2 alpha) one)."""
    if not (math.isfinite(margin) and margin > 0):
        raise UserError(f"the equivalence margin must be a finite number > 0 (accuracy points), got {margin}")
    if not (0 < alpha < 0.5):
        raise UserError(f"alpha must be in (0, 0.5): the verdicts use the (1 - 2 alpha) interval; got {alpha}")


def sample_std(std: float, n: int, ddof: int) -> float:
    """The sample std (ddof=1) of n values whose std was computed with `ddof` (0: population)."""
    return std * math.sqrt((n - ddof) / (n - 1)) if n > 1 else math.nan


@dataclass(frozen=True)
class Welch:
    """The difference of two means over seeds, its (1 - 2 alpha) interval, the tests' p-values and the verdict."""

    diff: float
    se: float
    df: float
    ci_low: float
    ci_high: float
    p_tost: float
    p_beyond: float
    p_welch: float
    verdict: str


def welch_tost(ours: tuple[float, float, int], paper: tuple[float, float, int], margin: float, alpha: float) -> Welch:
    """`ours`, `paper`: (mean, sample std, n). See the module docstring for what is tested."""
    check_test_settings(margin, alpha)
    (mean_o, s_o, n_o), (mean_p, s_p, n_p) = ours, paper
    if n_o < 2 or n_p < 2:
        raise UserError(f"a Welch test needs at least 2 seeds on each side, got {n_o} and {n_p}")
    var_o, var_p = s_o**2 / n_o, s_p**2 / n_p
    diff, se = mean_o - mean_p, math.sqrt(var_o + var_p)
    if se == 0:  # no spread on either side: the difference is known exactly
        p_tost, p_beyond = float(abs(diff) >= margin), float(abs(diff) <= margin)
        return Welch(diff, 0.0, math.inf, diff, diff, p_tost, p_beyond, float(diff == 0), _verdict(p_tost, p_beyond, alpha))
    df = (var_o + var_p) ** 2 / (var_o**2 / (n_o - 1) + var_p**2 / (n_p - 1))
    half = stats.t.ppf(1 - alpha, df) * se
    # TOST: H0 d <= -M rejected for large (d + M) / se; H0 d >= +M for small (d - M) / se
    p_tost = max(stats.t.sf((diff + margin) / se, df), stats.t.cdf((diff - margin) / se, df))
    # beyond the margin: H0 d <= +M rejected for large (d - M) / se, or H0 d >= -M for small (d + M) / se
    p_beyond = min(stats.t.sf((diff - margin) / se, df), stats.t.cdf((diff + margin) / se, df))
    p_welch = 2 * stats.t.sf(abs(diff) / se, df)
    return Welch(diff, se, df, float(diff - half), float(diff + half), float(p_tost), float(p_beyond), float(p_welch),
                 _verdict(p_tost, p_beyond, alpha))


def _verdict(p_tost: float, p_beyond: float, alpha: float) -> str:
    if p_tost < alpha:
        return REPRODUCED
    return NOT_REPRODUCED if p_beyond < alpha else INCONCLUSIVE
