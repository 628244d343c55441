"""The arguments of the report commands of `fedgmh` (`fedgmh.cli_report` runs them)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from fedgmh.cards import PRESETS

# `--accuracy` values are checked by fedgmh.report.summary (ACCURACIES), not here: importing it
# would load pandas for every `fedgmh` command
ACCURACY_HELP = ("each run's accuracy: best (over all evaluated rounds: the paper's, default), last (the last round) or "
                 "last10 (mean of the last 10 evaluated rounds)")


def add_report_parsers(sub: argparse._SubParsersAction, commands: dict[str, Callable[[argparse.Namespace], None]]) -> None:
    """Add the report subcommands to the `fedgmh` parser, each running `commands[name]`."""
    p = sub.add_parser("artifact", help="write one report artifact (fedgmh.report.artifacts) as the workflow's rule of it does")
    p.add_argument("name", help="the artifact, e.g. table, curves, compare")
    p.add_argument("--job", required=True, help='its inputs, outputs and params as JSON: {"input": {...}, "output": {...}, "params": {...}}')
    p.set_defaults(func=commands["artifact"])

    p = sub.add_parser("aggregate", help="collect run directories into a tidy results CSV (and per-round curves)")
    p.add_argument("--runs", nargs="+", required=True, metavar="RUNDIR", help="run directories written by `fedgmh train`")
    p.add_argument("--out", required=True, help="results CSV: one row per run")
    p.add_argument("--curves", help="curves CSV: one row per run and evaluated round (long format)")
    p.add_argument("--experiment", help="experiment / table id for every run (default: each run.json's workflow.experiment, else empty)")
    p.add_argument("--variant", nargs="+", metavar="NAME",
                   help="variant name of each run, in the order of --runs (rows of an audit table; setting ids get @NAME)")
    p.add_argument("--clients", type=int, help="the config's number of clients: setting ids of runs with another number get "
                   "_n<N>, as the workflow's run folders (default: never)")
    p.add_argument("--preset-evaluation", action="store_true",
                   help="report runs trained with their own eval_every / eval_last as their preset evaluates: best, final and "
                   "last-10 accuracy over the preset's rounds (the official FedGMH code: the last 20); curves keep every round")
    p.add_argument("--best-of-last", type=int, metavar="N",
                   help="each run's best accuracy over its last N rounds only (one scoring rule for runs of codes that "
                   "evaluate differently); a run that did not evaluate each of them is refused")
    p.set_defaults(func=commands["aggregate"])

    p = sub.add_parser("curves", help="figure: test accuracy per round, mean over seeds with a ±1 std band")
    p.add_argument("--curves", required=True, help="curves CSV from `fedgmh aggregate --curves`")
    p.add_argument("--out", required=True, help="figure file (PDF, or any format matplotlib knows by suffix)")
    p.add_argument("--png", help="also write this PNG")
    p.add_argument("--experiment", help="only this experiment's runs")
    p.add_argument("--setting", nargs="+", help="setting id(s) to draw, e.g. cifar100_c5_a0.5 (default: all, one panel each)")
    p.add_argument("--algorithm", nargs="+", help="only these algorithms (default: all)")
    p.add_argument("--title", help="figure title")
    p.add_argument("--target", nargs="+", type=float, default=[], help="target accuracies in percent, drawn as lines, e.g. 70 75")
    p.add_argument("--paper", help='the paper\'s rounds to --target per algorithm, drawn as stars, as JSON: {"fedgmh": [68, 185]}')
    p.add_argument("--overlay-curves", help="curves CSV of another reading (e.g. preset=official runs), drawn as wide lines")
    p.add_argument("--overlay-algorithm", nargs="+", help="only these algorithms of --overlay-curves (default: all)")
    p.add_argument("--overlay-name", default="other reading", help="the overlay's name in the legend, e.g. \"PFLlib's reading (preset=official)\"")
    p.add_argument("--label", action="append", default=[], metavar="ALGORITHM=NAME",
                   help="legend name of a method, e.g. 'fedprox=FedProx (mu = 0, = FedAvg)' (repeatable)")
    p.add_argument("--reference", help="the paper's numbers (reference/fedgmh_paper_tables.csv): each method's value in the table "
                   "named like the experiment, as a diamond with its ±std at the last round")
    p.set_defaults(func=commands["curves"])

    p = sub.add_parser("rounds", help="table: first round at which each method's accuracy curve reaches target accuracies")
    p.add_argument("--curves", required=True, help="curves CSV from `fedgmh aggregate --curves`")
    p.add_argument("--experiment", required=True, help="experiment whose runs to use, e.g. table2")
    p.add_argument("--setting", required=True, help="setting id, e.g. cifar100_c5_a0.5")
    p.add_argument("--target", nargs="+", type=float, required=True, help="target accuracies in percent, e.g. 70 75")
    p.add_argument("--paper", help='the paper\'s rounds per algorithm, aligned with --target, as JSON: {"fedgmh": [68, 185]}')
    p.add_argument("--out", required=True, help="LaTeX file (.tex)")
    p.add_argument("--csv", help="the same table as CSV")
    p.add_argument("--title", default="Rounds to target", help="caption's first words")
    p.set_defaults(func=commands["rounds"])

    p = sub.add_parser("compare", help="every cell of the paper's tables next to ours: Markdown report (+ LaTeX, CSV)")
    p.add_argument("--results", nargs="+", required=True, help="results CSVs from `fedgmh aggregate` (experiment ids = table ids)")
    p.add_argument("--reference", required=True, help="the paper's numbers (reference/fedgmh_paper_tables.csv)")
    p.add_argument("--out", required=True, help="Markdown report (.md)")
    p.add_argument("--tex", help="LaTeX longtable (.tex)")
    p.add_argument("--csv", help="one row per paper cell (CSV)")
    p.add_argument("--margin", type=float, help="equivalence margin in accuracy points: a cell is reproduced when the "
                   "(1 - 2 alpha) Welch interval of ours - paper lies within +-margin (default 0.5; docs/verdicts.md)")
    p.add_argument("--alpha", type=float, help="level of the tests (TOST, and not reproduced), in (0, 0.5) (default 0.05)")
    p.add_argument("--reading", choices=PRESETS, default="paper",
                   help="the paper's protocol read as its text (every option's default) or as PFLlib / the official code "
                   "(preset=official); runs with other options are 'other protocol' (default paper)")
    p.add_argument("--other", nargs="*", default=[], help="other documents' reference values (reference/cepfl_paper_table1.csv): "
                   "their own section and summary in the report")
    p.add_argument("--other-csv", help="with --other: one row per other document's value (CSV)")
    p.set_defaults(func=commands["compare"])

    p = sub.add_parser("claims", help="the paper's claims (reference/fedgmh_paper_claims.yaml), each with a verdict and its numbers")
    p.add_argument("--claims", required=True, help="the claims file (reference/fedgmh_paper_claims.yaml; format: docs/claims.md)")
    p.add_argument("--results", nargs="*", default=[], help="results CSVs from `fedgmh aggregate` (claims on other experiments: not run)")
    p.add_argument("--curves", nargs="*", default=[], help="curves CSVs from `fedgmh aggregate --curves` (rounds to target, convergence)")
    p.add_argument("--out", required=True, help="Markdown report (.md): every claim's verdict and evidence, then every comparison")
    p.add_argument("--csv", required=True, help="one row per claim: verdict, evidence and the numbers of the comparison that decides it")
    p.add_argument("--title", default="The paper's claims", help="the report's title")
    p.add_argument("--official-results", nargs="*", default=[], help="results CSVs of the runs of PFLlib's reading (preset=official): "
                   "each claim's verdict under that reading too, in the same row")
    p.add_argument("--official-curves", nargs="*", default=[], help="curves CSVs of the runs of PFLlib's reading")
    p.add_argument("--official-csv", help="one row per claim under PFLlib's reading (with --official-results / --official-curves)")
    p.add_argument("--costs", help="costs.csv of `fedgmh costs`: the computed costs the section 2.3 claims are judged on "
                   "(without it they are not run)")
    p.add_argument("--unavailable", nargs="*", default=[], metavar="DATASET",
                   help="datasets whose data cannot be obtained here (e.g. cifar10 offline): their claims read "
                        "'data unavailable offline', not 'not run'")
    p.set_defaults(func=commands["claims"])

    p = sub.add_parser("seeds", help="figure: a few methods seed by seed per setting, on a shared axis, under the paper's mean ± std")
    p.add_argument("--results", nargs="+", required=True, help="results CSVs from `fedgmh aggregate`, one per reading")
    p.add_argument("--name", nargs="+", help="each results file's reading, for the rows' labels, e.g. \"the paper's text\" \"PFLlib's reading\"")
    p.add_argument("--reference", required=True, help="the paper's numbers (reference/fedgmh_paper_tables.csv)")
    p.add_argument("--experiment", required=True, help="the experiment whose runs are drawn, e.g. table2")
    p.add_argument("--setting", nargs="+", required=True, help="setting ids, one panel each, e.g. mnist_c2_a0.5 mnist_c2_a5")
    p.add_argument("--algorithm", nargs="+", required=True, help="the methods, top to bottom, e.g. fedgmh fedper")
    p.add_argument("--out", required=True, help="figure file (PDF, or any format matplotlib knows by suffix)")
    p.add_argument("--png", help="also write this PNG")
    p.add_argument("--accuracy", default="best", help=ACCURACY_HELP)
    p.add_argument("--title", help="figure title")
    p.set_defaults(func=commands["seeds"])
