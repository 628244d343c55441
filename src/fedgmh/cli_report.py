"""CLI subcommands that turn run directories into tables and figures (see fedgmh.report)."""

from __future__ import annotations

import argparse

from fedgmh.cards import PRESETS

# `--accuracy` values are checked by fedgmh.report.summary (ACCURACIES), not here: importing it
# would load pandas for every `fedgmh` command
ACCURACY_HELP = ("each run's accuracy: best (over all evaluated rounds: the paper's, default), last (the last round) or "
                 "last10 (mean of the last 10 evaluated rounds)")


def _cmd_aggregate(args: argparse.Namespace) -> None:
    from fedgmh import report

    results = report.write_aggregate(args.runs, args.out, curves_out=args.curves, experiment=args.experiment,
                                     variants=args.variant, default_clients=args.clients,
                                     preset_evaluation=args.preset_evaluation, best_of_last=args.best_of_last)
    print(f"aggregate: {len(results)} runs, {results['setting'].nunique()} settings, "
          f"{results['algorithm'].nunique()} algorithms -> {args.out}")
    for line in _summary_lines(results):
        print(line)


#: the most cells `fedgmh aggregate` prints (the rest are in its CSV)
SHOWN_CELLS = 30


def _summary_lines(results) -> list[str]:
    """The best accuracy of each (experiment, setting, method), mean ± std over its seeds, as lines."""
    from fedgmh.errors import UserError
    from fedgmh.report.summary import summarize

    lines = []
    for experiment in dict.fromkeys(results["experiment"].fillna("")):
        try:
            cells, _ = summarize(results.fillna({"experiment": ""}), experiment)
        except UserError as err:  # e.g. one seed twice with other settings: the CSV is still written
            lines.append(f"  {experiment or '(no experiment)'}: no summary ({err})")
            continue
        for cell in cells.itertuples():
            where = f"{experiment}: " if experiment else ""
            spread = f"{cell.mean:.2f} %" if cell.n_seeds == 1 else f"{cell.mean:.2f} ± {cell.std:.2f} %"
            seeds = f"seed {cell.seeds}" if cell.n_seeds == 1 else f"{cell.n_seeds} seeds: {cell.seeds}"
            lines.append(f"  {where}{cell.row_name} on {cell.setting}: best test accuracy {spread} ({seeds})")
    if len(lines) > SHOWN_CELLS:
        lines = lines[:SHOWN_CELLS] + [f"  ... {len(lines) - SHOWN_CELLS} more: see the CSV"]
    return lines


def _cmd_table(args: argparse.Namespace) -> None:
    from fedgmh import report

    table = report.write_table(args.results, args.experiment, args.out, out_csv=args.csv, cells_csv=args.cells,
                               title=args.title, reference_path=args.reference, accuracy=args.accuracy, beside_tex=args.beside)
    cells = table["cells"]
    print(f"table {args.experiment}: {cells['algorithm'].nunique()} methods x {len(table['settings'])} settings -> {args.out}")


def _paper_rounds(text: str | None) -> dict | None:
    import json

    from fedgmh.errors import UserError

    try:
        return json.loads(text) if text else None
    except json.JSONDecodeError as err:
        raise UserError(f"--paper is not JSON ({err}); e.g. '{{\"fedgmh\": [68, 185]}}'") from err


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
    marks = Marks(targets=args.target, paper_rounds=_paper_rounds(args.paper) or {}, overlay=overlay,
                  overlay_name=args.overlay_name, labels=dict(text.split("=", 1) for text in args.label),
                  reference=read_reference(args.reference) if args.reference else None)
    curves = report.read_curves(args.curves)
    panels = report.plot_curves(curves, args.out, png=args.png, settings=args.setting, experiment=args.experiment,
                                algorithms=args.algorithm, title=args.title, marks=marks)
    print(f"curves: {len(panels)} panel(s) ({', '.join(panels)}) -> {args.out}" + (f", {args.png}" if args.png else ""))


def _cmd_rounds(args: argparse.Namespace) -> None:
    from fedgmh import report

    table = report.write_rounds_to_target(args.curves, args.experiment, args.setting, args.target, args.out, out_csv=args.csv,
                                          paper=_paper_rounds(args.paper), title=args.title)
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
    readings = {"paper": (args.results, args.curves)}
    csvs = {"paper": args.csv}
    if args.official_csv:
        readings["official"] = (args.official_results, args.official_curves)
        csvs["official"] = args.official_csv
    frames = write_claims(args.claims, readings, args.out, csvs, title=args.title, datasets_unavailable=args.unavailable,
                          costs=args.costs)
    for reading, frame in frames.items():
        print(f"claims, {READING_NAMES[reading]}: {counts_text(frame)} -> {args.out}, {csvs[reading]}")


def _cmd_uploads(args: argparse.Namespace) -> None:
    import json

    from fedgmh.errors import UserError
    from fedgmh.report.to_target import write_uploads_to_target

    try:
        paper = json.loads(args.paper) if args.paper else None
    except json.JSONDecodeError as err:
        raise UserError(f"--paper is not JSON ({err}); e.g. '{{\"fedavg\": [80, 220, 660]}}'") from err
    table = write_uploads_to_target(args.curves, args.experiment, args.setting, args.target, args.out, out_csv=args.csv,
                                    metric=args.metric, paper=paper, title=args.title)
    print(f"uploads: {table['algorithm'].nunique()} methods x {len(args.target)} targets -> {args.out}")


def _cmd_layer_weights(args: argparse.Namespace) -> None:
    from fedgmh import report
    from fedgmh.report.layer_weights import plot_layer_weights

    panels = plot_layer_weights(report.read_results(args.results), args.experiment, args.setting, args.algorithm, args.out,
                                png=args.png, csv=args.csv, layer=args.layer, seed=args.seed, title=args.title)
    print(f"layer-weights: {len(panels)} heat-map(s) -> {args.out}" + (f", {args.png}" if args.png else ""))


def _cmd_controls(args: argparse.Namespace) -> None:
    from pathlib import Path

    from fedgmh.report.controls import write_control_summary

    summary = write_control_summary(Path(args.results), [Path(p) for p in args.stats], Path(args.out), Path(args.csv), args.title)
    print(f"controls: {summary['method'].nunique()} methods x {summary['setting'].nunique()} settings -> {args.out}")
def _cmd_clients(args: argparse.Namespace) -> None:
    from fedgmh import report
    from fedgmh.report.clients import plot_client_accuracy

    drawn, missing = plot_client_accuracy(report.read_results(args.results), args.out, png=args.png, csv=args.csv,
                                          experiment=args.experiment, round_=args.round, title=args.title)
    print(f"clients: per-client accuracy of {drawn} runs ({missing} without clients.csv) -> {args.out}")


def _cmd_dots(args: argparse.Namespace) -> None:
    from fedgmh import report
    from fedgmh.report.dots import plot_final_accuracy
    from fedgmh.report.paper import read_reference
    from fedgmh.report.summary import summarize
    from fedgmh.report.sweeps import plot_sweep, swept_parameter

    results, reference = report.read_results(args.results), read_reference(args.reference)
    cells, dims = summarize(results, args.experiment, args.accuracy)
    draw = plot_sweep if swept_parameter(dims, cells) else plot_final_accuracy
    matched = draw(results, reference, args.experiment, args.out, png=args.png, accuracy=args.accuracy, title=args.title)
    kind = "one line per method over the swept parameter" if draw is plot_sweep else "a panel per cell"
    print(f"dots: {args.experiment} ({kind}), {matched} cell(s) with the paper's value -> {args.out}")


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


def _cmd_document(args: argparse.Namespace) -> None:
    import json
    from pathlib import Path

    from fedgmh.errors import UserError
    from fedgmh.report.document import build_document, compile_pdf

    def mapping(flag: str, text: str | None) -> dict:
        try:
            value = json.loads(text) if text else {}
        except json.JSONDecodeError as err:
            raise UserError(f"{flag} is not JSON ({err}); e.g. '{{\"table2\": \"Table 2\"}}'") from err
        if not isinstance(value, dict):
            raise UserError(f"{flag} must be a JSON object, e.g. '{{\"table2\": \"Table 2\"}}'")
        return value

    titles, captions = mapping("--titles", args.titles), mapping("--captions", args.captions)
    build_document(args.out, args.title, args.results, titles=titles, reference=args.reference, accuracy=args.accuracy,
                   inputs=args.input, figures=[(path, captions.get(Path(path).stem, "")) for path in args.figure],
                   claims=args.claims)
    if args.pdf:
        compile_pdf(args.out, args.pdf, log=args.log)
    print(f"document: {len(args.results)} results files, {len(args.input)} tables, {len(args.figure)} figures -> {args.out}"
          + (f", {args.pdf}" if args.pdf else ""))


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
    print(declared[args.name].write(job.get("input", {}), job.get("output", {}), job.get("params", {})))


def register(sub: argparse._SubParsersAction) -> None:
    """Add the reporting subcommands to the `fedgmh` parser."""
    p = sub.add_parser("artifact", help="write one report artifact (fedgmh.report.artifacts) as the workflow's rule of it does")
    p.add_argument("name", help="the artifact, e.g. table, curves, compare")
    p.add_argument("--job", required=True, help='its inputs, outputs and params as JSON: {"input": {...}, "output": {...}, "params": {...}}')
    p.set_defaults(func=_cmd_artifact)

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
    p.set_defaults(func=_cmd_aggregate)

    p = sub.add_parser("table", help="LaTeX table (booktabs) of mean ± std best accuracy per algorithm and setting")
    p.add_argument("--results", required=True, help="results CSV from `fedgmh aggregate`")
    p.add_argument("--experiment", required=True, help="which experiment of the results to tabulate, e.g. table2")
    p.add_argument("--out", required=True, help="LaTeX file (.tex)")
    p.add_argument("--csv", help="the same table as CSV (rows = methods, columns = settings, cells 'mean ± std')")
    p.add_argument("--cells", help="tidy CSV, one row per cell: mean, std, n_seeds, best flag (and the paper's value with --reference)")
    p.add_argument("--title", help="caption's first words (default: the experiment id)")
    p.add_argument("--reference", help="the paper's numbers (reference/fedgmh_paper_tables.csv) to put next to ours in --cells")
    p.add_argument("--accuracy", default="best", help=ACCURACY_HELP)
    p.add_argument("--beside", help="with --reference: also this LaTeX file, the table with the paper's value beside ours")
    p.set_defaults(func=_cmd_table)

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
    p.set_defaults(func=_cmd_curves)

    p = sub.add_parser("rounds", help="table: first round at which each method's accuracy curve reaches target accuracies")
    p.add_argument("--curves", required=True, help="curves CSV from `fedgmh aggregate --curves`")
    p.add_argument("--experiment", required=True, help="experiment whose runs to use, e.g. table2")
    p.add_argument("--setting", required=True, help="setting id, e.g. cifar100_c5_a0.5")
    p.add_argument("--target", nargs="+", type=float, required=True, help="target accuracies in percent, e.g. 70 75")
    p.add_argument("--paper", help='the paper\'s rounds per algorithm, aligned with --target, as JSON: {"fedgmh": [68, 185]}')
    p.add_argument("--out", required=True, help="LaTeX file (.tex)")
    p.add_argument("--csv", help="the same table as CSV")
    p.add_argument("--title", default="Rounds to target", help="caption's first words")
    p.set_defaults(func=_cmd_rounds)

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
    p.set_defaults(func=_cmd_compare)

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
    p.set_defaults(func=_cmd_claims)

    p = sub.add_parser("uploads", help="table: cumulative client uploads until each method's accuracy reaches target accuracies")
    p.add_argument("--curves", required=True, help="curves CSV from `fedgmh aggregate --curves` (its runs need the clients_up column)")
    p.add_argument("--experiment", required=True, help="experiment whose runs to use")
    p.add_argument("--setting", required=True, help="setting id, e.g. cifar10_c5_a1000000_n20")
    p.add_argument("--target", nargs="+", type=float, required=True, help="target accuracies in percent, e.g. 40 50 60")
    p.add_argument("--metric", default="test_acc_mean", help="test_acc_mean (mean client accuracy, default) or test_acc (pooled)")
    p.add_argument("--paper", help='the paper\'s uploads per algorithm, aligned with --target, as JSON (null: never reached): '
                   '{"fedavg": [80, 220, 660]}')
    p.add_argument("--out", required=True, help="LaTeX file (.tex)")
    p.add_argument("--csv", help="the same table as CSV")
    p.add_argument("--title", default="Client uploads to target", help="caption's first words")
    p.set_defaults(func=_cmd_uploads)

    p = sub.add_parser("layer-weights", help="figure: per-layer aggregation weights (runs' layer_weights.csv) as clients x clients heat-maps")
    p.add_argument("--results", required=True, help="results CSV from `fedgmh aggregate` (its run_dir column locates the runs)")
    p.add_argument("--experiment", required=True, help="experiment whose runs to use")
    p.add_argument("--setting", required=True, help="setting id")
    p.add_argument("--algorithm", nargs="+", required=True, help="algorithms to draw (one row of heat-maps each)")
    p.add_argument("--layer", help="only this layer (default: every layer, one column each)")
    p.add_argument("--seed", type=int, help="the run of this seed (default: each algorithm's lowest)")
    p.add_argument("--out", required=True, help="figure file (PDF, or any format matplotlib knows by suffix)")
    p.add_argument("--png", help="also write this PNG")
    p.add_argument("--csv", help="the weights drawn (long format, with algorithm, seed and run_dir)")
    p.add_argument("--title", help="figure title")
    p.set_defaults(func=_cmd_layer_weights)

    p = sub.add_parser("controls", help="how much of each method's gain over FedAvg the label set explains (the controls experiment)")
    p.add_argument("--results", required=True, help="results CSV of the controls experiment from `fedgmh aggregate`")
    p.add_argument("--stats", nargs="+", required=True, help="the partitions' statistics CSVs (`fedgmh partition --stats`)")
    p.add_argument("--out", required=True, help="Markdown report (.md)")
    p.add_argument("--csv", required=True, help="the same as CSV")
    p.add_argument("--title", default="Controls: the label prior and local-only training", help="report title")
    p.set_defaults(func=_cmd_controls)
    p = sub.add_parser("clients", help="figure: per-client test accuracy per method (box plots), from the runs' clients.csv")
    p.add_argument("--results", required=True, help="results CSV from `fedgmh aggregate` (its run_dir column locates the runs)")
    p.add_argument("--out", required=True, help="figure file (PDF, or any format matplotlib knows by suffix)")
    p.add_argument("--png", help="also write this PNG")
    p.add_argument("--csv", help="the per-client accuracies drawn, one row per run and client")
    p.add_argument("--experiment", help="only this experiment's runs")
    p.add_argument("--round", choices=["best", "last"], default="best", help="the best round of each run (default) or the last")
    p.add_argument("--title", help="figure title")
    p.set_defaults(func=_cmd_clients)

    p = sub.add_parser("dots", help="figure: each seed's final accuracy per cell next to the paper's mean ± std "
                       "(an experiment sweeping one parameter: one line per method over it)")
    p.add_argument("--results", required=True, help="results CSV from `fedgmh aggregate`")
    p.add_argument("--reference", required=True, help="the paper's numbers (reference/fedgmh_paper_tables.csv)")
    p.add_argument("--experiment", required=True, help="the experiment whose cells are drawn")
    p.add_argument("--out", required=True, help="figure file (PDF, or any format matplotlib knows by suffix)")
    p.add_argument("--png", help="also write this PNG")
    p.add_argument("--accuracy", default="best", help=ACCURACY_HELP)
    p.add_argument("--title", help="the figure title's first words (what is drawn is said after them)")
    p.set_defaults(func=_cmd_dots)

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
    p.set_defaults(func=_cmd_seeds)

    p = sub.add_parser("document", help="every table and figure in one LaTeX document (and its PDF, with latexmk)")
    p.add_argument("--out", required=True, help="LaTeX document (.tex); figures are referenced relative to its folder")
    p.add_argument("--title", default="FedGMH reproduction: tables and figures", help="the document's title")
    p.add_argument("--results", nargs="*", default=[], help="results CSVs from `fedgmh aggregate`: one table per experiment")
    p.add_argument("--titles", help='table titles per experiment as JSON: {"table2": "Table 2"}')
    p.add_argument("--reference", help="the paper's numbers: tables show the paper's value beside ours")
    p.add_argument("--accuracy", default="best", help=ACCURACY_HELP)
    p.add_argument("--claims", help="claims.csv of `fedgmh claims`: a section with every claim's verdict")
    p.add_argument("--input", nargs="*", default=[], help="LaTeX tables to paste in (rounds_to_target.tex, costs.tex, comparison.tex)")
    p.add_argument("--figure", nargs="*", default=[], help="figure files (PDF or PNG)")
    p.add_argument("--captions", help='figure captions by file name without suffix, as JSON: {"figure3": "Figure 3 ..."}')
    p.add_argument("--pdf", help="compile the document to this PDF with latexmk")
    p.add_argument("--log", help="latexmk's output (with --pdf)")
    p.set_defaults(func=_cmd_document)
