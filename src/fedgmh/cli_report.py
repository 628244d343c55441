"""CLI subcommands that turn run directories into tables and figures (see fedgmh.report): those people run
by hand, and `artifact`, which the workflow's report rules run (fedgmh.report.artifacts)."""

from __future__ import annotations

import argparse


def _cmd_aggregate(args: argparse.Namespace) -> None:
    from fedgmh import report
    from fedgmh.report.summary import summary_lines

    results = report.write_aggregate(args.runs, args.out, curves_out=args.curves, experiment=args.experiment,
                                     variants=args.variant, default_clients=args.clients,
                                     preset_evaluation=args.preset_evaluation, best_of_last=args.best_of_last)
    print(f"aggregate: {len(results)} runs, {results['setting'].nunique()} settings, "
          f"{results['algorithm'].nunique()} algorithms -> {args.out}")
    for line in summary_lines(results):
        print(line)


PAPER_EXAMPLE = "e.g. '{\"fedgmh\": [68, 185]}'"
#: how a message names a JSON value's type
JSON_KINDS = {dict: "an object", list: "an array", str: "a string", int: "a number", float: "a number", bool: "true/false",
              type(None): "null"}


def _paper_rounds(text: str | None, targets: list[float]) -> dict | None:
    """--paper: algorithm -> the paper's round to each --target (a number >= 0, or null where it gives none)."""
    import json
    import math

    from fedgmh.errors import UserError

    if not text:
        return None
    try:
        paper = json.loads(text)
    except json.JSONDecodeError as err:
        raise UserError(f"--paper is not JSON ({err}); {PAPER_EXAMPLE}") from err
    if not isinstance(paper, dict):
        raise UserError(f"--paper is {JSON_KINDS[type(paper)]}, not an object of algorithm -> rounds; {PAPER_EXAMPLE}")
    for algorithm, rounds in paper.items():
        if not isinstance(rounds, list) or len(rounds) != len(targets):
            raise UserError(f"--paper {algorithm!r}: give an array of {len(targets)} round(s), one per --target "
                            f"(null: none), not {json.dumps(rounds)}; {PAPER_EXAMPLE}")
        for value in rounds:
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if value is not None and not (number and math.isfinite(value) and value >= 0):
                raise UserError(f"--paper {algorithm!r}: {json.dumps(value)} is not a round (a number >= 0, or null)")
    return paper


def _cmd_curves(args: argparse.Namespace) -> None:
    from fedgmh import report
    from fedgmh.errors import UserError
    from fedgmh.report.marks import Marks
    from fedgmh.report.paper import read_reference

    bad = [text for text in args.label if "=" not in text]
    if bad:
        raise UserError(f"--label takes ALGORITHM=NAME, not {bad[0]!r}; e.g. --label 'fedprox=FedProx (mu = 0, = FedAvg)'")
    overlay = report.read_curves(args.overlay_curves) if args.overlay_curves else None
    if overlay is not None and args.overlay_algorithm:
        overlay = overlay[overlay["algorithm"].isin(args.overlay_algorithm)]
    marks = Marks(targets=args.target, paper_rounds=_paper_rounds(args.paper, args.target) or {}, overlay=overlay,
                  overlay_name=args.overlay_name, labels=dict(text.split("=", 1) for text in args.label),
                  reference=read_reference(args.reference) if args.reference else None)
    curves = report.read_curves(args.curves)
    panels = report.plot_curves(curves, args.out, png=args.png, settings=args.setting, experiment=args.experiment,
                                algorithms=args.algorithm, title=args.title, marks=marks)
    print(f"curves: {len(panels)} panel(s) ({', '.join(panels)}) -> {args.out}" + (f", {args.png}" if args.png else ""))


def _cmd_rounds(args: argparse.Namespace) -> None:
    from fedgmh import report

    table = report.write_rounds_to_target(args.curves, args.experiment, args.setting, args.target, args.out, out_csv=args.csv,
                                          paper=_paper_rounds(args.paper, args.target), title=args.title)
    print(f"rounds: {table['algorithm'].nunique()} methods x {len(args.target)} targets -> {args.out}")


def _cmd_compare(args: argparse.Namespace) -> None:
    from fedgmh import report
    from fedgmh.report.compare import STATUSES

    tests = {name: value for name, value in (("margin", args.margin), ("alpha", args.alpha)) if value is not None}
    comparison = report.write_comparison(args.results, args.reference, args.out, out_tex=args.tex, out_csv=args.csv, reading=args.reading,
                                         other_paths=args.other, out_other_csv=args.other_csv, **tests)
    counts = comparison["status"].value_counts()
    tally = ", ".join(f"{counts.get(status, 0)} {status}" for status in STATUSES)
    print(f"compare: {len(comparison)} paper cells ({args.reading} reading): {tally} -> {args.out}"
          + (f"; other documents' values from {', '.join(args.other)}" if args.other else ""))


def _cmd_claims(args: argparse.Namespace) -> None:
    from fedgmh.errors import UserError
    from fedgmh.report.claims_readings import write_claims
    from fedgmh.report.claims_report import READING_NAMES, counts_text

    if bool(args.official_csv) != bool(args.official_results or args.official_curves):
        raise UserError("--official-csv goes with --official-results / --official-curves (the runs of PFLlib's reading)")
    _check_datasets(args.unavailable)
    readings = {"paper": (args.results, args.curves)}
    csvs = {"paper": args.csv}
    if args.official_csv:
        readings["official"] = (args.official_results, args.official_curves)
        csvs["official"] = args.official_csv
    frames = write_claims(args.claims, readings, args.out, csvs, title=args.title, datasets_unavailable=args.unavailable,
                          costs=args.costs)
    for reading, frame in frames.items():
        print(f"claims, {READING_NAMES[reading]}: {counts_text(frame)} -> {args.out}, {csvs[reading]}")


def _check_datasets(names: list[str]) -> None:
    """--unavailable: known datasets (a misspelt one would leave its claims 'not run' without a word)."""
    from fedgmh.datasets import DATASETS
    from fedgmh.errors import UserError, did_you_mean

    for name in names:
        if name not in DATASETS:
            raise UserError(f"--unavailable {name!r}: unknown dataset{did_you_mean(name, DATASETS)}; datasets: {', '.join(DATASETS)}")


def _cmd_seeds(args: argparse.Namespace) -> None:
    from fedgmh import report
    from fedgmh.errors import UserError
    from fedgmh.report.paper import read_reference
    from fedgmh.report.seed_rows import plot_seed_rows

    names = args.name or ([""] if len(args.results) == 1 else [])
    if len(names) != len(args.results):
        raise UserError(f"--name needs one name per --results file ({len(args.results)}), got {len(names)}")
    sources = [(name, report.read_results(path)) for name, path in zip(names, args.results)]
    drawn = plot_seed_rows(sources, read_reference(args.reference), args.experiment, args.setting, args.algorithm, args.out,
                           png=args.png, accuracy=args.accuracy, title=args.title)
    print(f"seeds: {drawn} seeds of {', '.join(args.algorithm)} on {', '.join(args.setting)} -> {args.out}")


def _cmd_artifact(args: argparse.Namespace) -> None:
    import json

    from fedgmh.errors import UserError
    from fedgmh.report.artifacts import artifacts

    declared = artifacts()
    if args.name not in declared:
        raise UserError(f"no artifact {args.name!r}; artifacts: {', '.join(declared)}")
    try:
        job = json.loads(args.job)
    except json.JSONDecodeError as err:
        raise UserError(f"--job is not JSON ({err})") from err
    inputs, outputs, params = _job_parts(job)
    print(declared[args.name].run(inputs, outputs, _JobParams(params)))


def _job_parts(job) -> tuple[dict, dict, dict]:
    """--job's input, output (each name -> an array of paths) and params, checked for their types."""
    from fedgmh.errors import UserError

    if not isinstance(job, dict):
        raise UserError(f'--job is {JSON_KINDS[type(job)]}, not an object {{"input": {{...}}, "output": {{...}}, "params": {{...}}}}')
    for key in ("input", "output", "params"):
        if not isinstance(job.get(key), dict):
            raise UserError(f"--job's {key!r} is " + (f"{JSON_KINDS[type(job[key])]}, not an object" if key in job else "missing"))
    for key in ("input", "output"):
        for name, paths in job[key].items():
            if not (isinstance(paths, list) and all(isinstance(path, str) for path in paths)):
                raise UserError(f"--job's {key}.{name} is not an array of paths")
    return job["input"], job["output"], job["params"]


class _JobParams(dict):
    """--job's params: one the artifact needs but the job lacks is a UserError naming it, not a KeyError."""

    def __missing__(self, key: str):
        from fedgmh.errors import UserError

        raise UserError(f"--job's params lack {key!r}")


def register(sub: argparse._SubParsersAction) -> None:
    """Add the report subcommands to the `fedgmh` parser."""
    from fedgmh.cli_report_args import add_report_parsers

    add_report_parsers(sub, {"aggregate": _cmd_aggregate, "curves": _cmd_curves, "rounds": _cmd_rounds, "compare": _cmd_compare,
                             "claims": _cmd_claims, "seeds": _cmd_seeds, "artifact": _cmd_artifact})
