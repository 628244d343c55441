"""Whether each decided verdict survives the other defensible choices: robust or fragile.

A claim that holds or does not hold is decided again under each alternative (`alternatives`):

- accuracy: the unweighted mean over clients instead of the pooled accuracy (or the other way);
- reading: the other reading's runs (PFLlib's and the official code's, or the paper's text);
- rule: a paper's round held against an 80 % or a 95 % prediction interval instead of 90 %; a
  curve's end as its last 10 or 40 evaluated rounds instead of the claim's (20);
- seeds: each seed left out in turn.

Under an alternative the claim is decided on the comparisons that decided it (those with the seeds
to decide: holds, does not hold, or at least MIN_SEEDS seeds), each as the alternative makes it, and
only those of them that have the seeds there too. *Robust*: the same verdict under every alternative
that has evidence; *fragile*: some alternative gives another verdict, and the flips are listed. An
alternative without evidence (none of those comparisons run there, or all left with fewer than
MIN_SEEDS seeds: a verdict on 3 seeds with one left out) is listed as untested, not counted: it says
nothing either way. docs/claims.md, "Robustness".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fedgmh.report import claims as kinds
from fedgmh.report.claim_file import Claim
from fedgmh.report.claims_report import Rules, Runs, evaluate_claims
from fedgmh.report.summary import READINGS_OF_ACCURACY

ROBUST, FRAGILE = "robust", "fragile"
#: the rule variants each decided verdict is re-decided under
RULE_VARIANTS = {"80 % prediction interval": Rules(prediction=0.80), "95 % prediction interval": Rules(prediction=0.95),
                 "last 10 rounds": Rules(window=10), "last 40 rounds": Rules(window=40)}


@dataclass(frozen=True)
class Robustness:
    status: str  # ROBUST, FRAGILE, or '' for a claim not decided
    flips: tuple[str, ...] = ()  # 'alternative: verdict' for each alternative that decides otherwise
    untested: tuple[str, ...] = ()  # the alternatives without evidence

    def text(self) -> str:
        if not self.status:
            return ""
        return self.status + (f" ({'; '.join(self.flips)})" if self.flips else "")


def tested(part: kinds.Part) -> bool:
    """Whether a comparison has the seeds to decide: decided, or inconclusive on at least MIN_SEEDS seeds."""
    return part.verdict in (kinds.HOLDS, kinds.FAILS) or part.n_seeds >= kinds.MIN_SEEDS


def re_decided(parts: Sequence[kinds.Part], alternative: Sequence[kinds.Part]) -> str | None:
    """The claim's verdict under an alternative (`alternative`: its comparisons there) on the comparisons
    of `parts` that have the seeds to decide, where they have them there too; None: no evidence."""
    labels = {part.label for part in parts if tested(part)}
    kept = [part for part in alternative if part.label in labels and tested(part)]
    return kinds.combine(kept) if kept else None


def alternatives(claims: Sequence[Claim], runs: Runs, other: tuple[str, Runs] | None = None) -> dict[str, dict[str, list[kinds.Part]]]:
    """alternative -> claim id -> the claim's comparisons under it."""
    cases: dict[str, tuple[Runs, Rules]] = {}
    for accuracy, (_, words) in READINGS_OF_ACCURACY.items():
        if accuracy != runs.accuracy:
            cases[words] = (runs.variant(accuracy), Rules())
    if other is not None:
        cases[other[0]] = (other[1], Rules())
    cases.update({name: (runs, rules) for name, rules in RULE_VARIANTS.items()})
    cases.update({f"without seed {seed}": (runs.variant(without_seed=seed), Rules()) for seed in runs.seeds()})
    return {name: evaluate_claims(claims, case_runs, rules)[1] for name, (case_runs, rules) in cases.items()}


def robustness(verdicts: Mapping[str, str], parts: Mapping[str, Sequence[kinds.Part]],
               alternative: Mapping[str, Mapping[str, Sequence[kinds.Part]]]) -> dict[str, Robustness]:
    """Per claim id: robust or fragile when `verdicts` (claim id -> verdict, its comparisons `parts`)
    decides it, else ''."""
    out = {}
    for claim_id, verdict in verdicts.items():
        if verdict not in (kinds.HOLDS, kinds.FAILS):
            out[claim_id] = Robustness("")
            continue
        again = {name: re_decided(parts[claim_id], alt[claim_id]) for name, alt in alternative.items()}
        flips = tuple(f"{name}: {v}" for name, v in again.items() if v is not None and v != verdict)
        untested = _short([name for name, v in again.items() if v is None])
        out[claim_id] = Robustness(FRAGILE if flips else ROBUST, flips, untested)
    return out


def _short(names: Sequence[str]) -> tuple[str, ...]:
    """The untested alternatives, every seed left out said once."""
    seeds = [name for name in names if name.startswith("without seed ")]
    rest = tuple(name for name in names if name not in seeds)
    return rest + (("each seed left out",) if seeds else ())
