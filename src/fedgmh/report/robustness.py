"""Whether each decided verdict survives the other defensible choices: robust, fragile, partly tested or exact.

A claim that holds or does not hold is decided again under each alternative (`alternatives`):

- accuracy: the unweighted mean over clients instead of the pooled accuracy (or the other way);
- reading: the other reading's runs (PFLlib's and the official code's, or the paper's text);
- rule: a paper's round held against an 80 % or a 95 % prediction interval instead of 90 %, and
  within +-5 % or +-20 % instead of +-10 %; a curve's swing over its last 10 or 40 evaluated rounds
  instead of the claim's (20), its rise over the last 25 or 100 instead of 50;
- seeds: each seed left out in turn (where the rest can still decide: at least 4 seeds, 6 for a sign
  test), or every seed going the verdict's way.

Under an alternative the claim is decided on the comparisons that decided it (those with the seeds
to decide: holds, does not hold, or at least the seeds their rule decides on: `tested`), each as the alternative makes it, and
only those of them that have the seeds there too. *Robust*: every alternative that applies was
evaluated and none gives another verdict; *fragile*: some alternative gives another verdict, and the
flips are listed (`flip`: with the alternative's verdict on the whole claim where that differs);
*partly tested*: none flips it but some could not be evaluated (listed); *exact*:
a computation, with no alternative. docs/claims.md, "Robustness".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields

from fedgmh.report import claims as kinds
from fedgmh.report.claim_file import Claim
from fedgmh.report.claim_kinds import claim_kinds
from fedgmh.report.claims import Rules
from fedgmh.report.claims_report import Runs, evaluate_claims
from fedgmh.report.summary import READINGS_OF_ACCURACY

ROBUST, FRAGILE, PARTLY, EXACT = "robust", "fragile", "partly tested", "exact"
#: the rule variants each decided verdict is re-decided under, and the claims each applies to
RULE_VARIANTS = {"80 % prediction interval": Rules(prediction=0.80), "95 % prediction interval": Rules(prediction=0.95),
                 "tolerance +-5 %": Rules(tolerance=0.05), "tolerance +-20 %": Rules(tolerance=0.20),
                 "swing over the last 10 rounds": Rules(window=10), "swing over the last 40 rounds": Rules(window=40),
                 "rise over the last 25 rounds": Rules(rise_window=25), "rise over the last 100 rounds": Rules(rise_window=100)}
SEEDS = "each seed left out"


def leaves_one_out(part: kinds.Part) -> bool:
    """Whether its seeds less one can still decide (`Part.min_seeds`: 3 for a t-test, 5 for a sign test);
    with fewer, the seeds are tested only when every seed goes one way."""
    return part.n_seeds > part.min_seeds


def applies(claim: Claim, variant: str) -> bool:
    """Whether a rule variant changes anything the claim's kind reads (`ClaimKind.rules`)."""
    if variant not in RULE_VARIANTS:
        return True
    changed = {f.name for f in fields(Rules) if getattr(RULE_VARIANTS[variant], f.name) != getattr(Rules(), f.name)}
    return bool(changed & claim_kinds()[claim.test].rules(claim.spec))


@dataclass(frozen=True)
class Robustness:
    status: str  # ROBUST, FRAGILE, PARTLY, EXACT, or '' for a claim not decided
    flips: tuple[str, ...] = ()  # 'alternative: verdict' for each alternative that decides otherwise
    untested: tuple[str, ...] = ()  # the alternatives that could not be evaluated
    tested: tuple[str, ...] = ()  # the alternatives evaluated

    def text(self) -> str:
        if not self.status:
            return ""
        return self.status + (f" ({'; '.join(self.flips)})" if self.flips else "")


def tested(part: kinds.Part) -> bool:
    """Whether a comparison has the seeds to decide: decided, or inconclusive on at least the seeds its
    rule can decide on (`Part.min_seeds`: a sign test on 3 seeds is untested, not inconclusive)."""
    return part.verdict in (kinds.HOLDS, kinds.FAILS) or part.n_seeds >= part.min_seeds


def re_decided(parts: Sequence[kinds.Part], alternative: Sequence[kinds.Part]) -> str | None:
    """The claim's verdict under an alternative (`alternative`: its comparisons there) on the comparisons
    of `parts` that have the seeds to decide; None (not evaluated) unless each of them has the seeds
    there too."""
    labels = {part.label for part in parts if tested(part)}
    kept = [part for part in alternative if part.label in labels and tested(part)]
    return kinds.combine(kept) if kept and len(kept) == len(labels) else None


def flip(name: str, verdict: str, parts: Sequence[kinds.Part], alternative: Sequence[kinds.Part]) -> str:
    """'alternative: verdict', and where the alternative's whole claim says otherwise than the
    comparisons that decided it (others not run or not decided there), that verdict too: a reader
    must not take 'holds on these comparisons' for the other reading's verdict."""
    whole = kinds.combine(alternative)
    if whole == verdict:
        return f"{name}: {verdict}"
    deciding = sum(tested(part) for part in parts)
    which = "the comparison" if deciding == 1 else f"the {deciding} comparisons"
    return f"{name}: {verdict} on {which} that decided it ({whole} on all {len(alternative)})"


def alternatives(claims: Sequence[Claim], runs: Runs, other: tuple[str, Runs] | None = None) -> dict[str, dict[str, list[kinds.Part]]]:
    """alternative -> claim id -> the claim's comparisons under it (the other reading: its name, or
    'the other reading' with no runs, where every claim is untested)."""
    cases: dict[str, tuple[Runs, Rules]] = {}
    for accuracy, (_, words) in READINGS_OF_ACCURACY.items():
        if accuracy != runs.accuracy:
            cases[words] = (runs.variant(accuracy), Rules())
    if other is not None:
        cases[other[0]] = (other[1], Rules())
    cases.update({name: (runs, rules) for name, rules in RULE_VARIANTS.items()})
    cases.update({f"without seed {seed}": (runs.variant(without_seed=seed), Rules()) for seed in runs.seeds()})
    return {name: evaluate_claims(claims, case_runs, rules)[1] for name, (case_runs, rules) in cases.items()}


def _decisive(parts: Sequence[kinds.Part], verdict: str) -> list[kinds.Part]:
    """The comparisons that make the verdict: every one where it holds, those that do not hold where it does not."""
    return [part for part in parts if part.verdict == verdict]


def robustness(claims: Sequence[Claim], verdicts: Mapping[str, str], parts: Mapping[str, Sequence[kinds.Part]],
               alternative: Mapping[str, Mapping[str, Sequence[kinds.Part]]], seeds: Mapping[str, set[int]],
               other_reading: str | None = None) -> dict[str, Robustness]:
    """Per claim id: exact (a computation), robust, fragile or partly tested when `verdicts` (claim id
    -> verdict, its comparisons `parts`) decides it, else ''. `seeds`: each claim's seeds;
    `other_reading`: the other reading's name, or None where it has no runs (untested).

    Robust: every alternative that applies was evaluated and none flips the verdict, the seeds
    included: each seed left out where the deciding comparisons' seeds less one can still decide
    (`leaves_one_out`), or, with fewer, every seed's difference going the way of the verdict. Fragile: some
    alternative flips it. Partly tested: none flips it, but some could not be evaluated."""
    out = {}
    for claim in claims:
        claim_id, verdict = claim.id, verdicts[claim.id]
        if verdict not in (kinds.HOLDS, kinds.FAILS):
            out[claim_id] = Robustness("")
            continue
        if claim_kinds()[claim.test].exact:
            out[claim_id] = Robustness(EXACT)
            continue
        decisive = _decisive(parts[claim_id], verdict)
        names = [name for name in alternative if not name.startswith("without seed ")
                 and (name not in RULE_VARIANTS or applies(claim, name))]
        again = {name: re_decided(parts[claim_id], alternative[name][claim_id]) for name in names}
        untested = [name for name, v in again.items() if v is None]
        if other_reading is None:
            untested.append("the other reading (no runs)")
        if all(leaves_one_out(part) for part in decisive):
            left_out = {f"without seed {s}": re_decided(parts[claim_id], alternative[f"without seed {s}"][claim_id])
                        for s in sorted(seeds.get(claim_id, ())) if f"without seed {s}" in alternative}
            again |= left_out
            untested += [name for name, v in left_out.items() if v is None]
            seed_check = SEEDS
        elif decisive and all(part.unanimous for part in decisive):
            seed_check = "every seed the same way"
        else:
            seed_check = ""
            untested.append(f"{SEEDS} ({min(part.n_seeds for part in decisive)} seeds, not every one the same way)")
        flips = tuple(flip(name, v, parts[claim_id], alternative[name][claim_id])
                      for name, v in again.items() if v is not None and v != verdict)
        evaluated = tuple(name for name, v in again.items() if v is not None and not name.startswith("without seed "))
        evaluated += (seed_check,) if seed_check else ()
        status = FRAGILE if flips else PARTLY if untested else ROBUST
        out[claim_id] = Robustness(status, flips, tuple(untested), evaluated)
    return out
