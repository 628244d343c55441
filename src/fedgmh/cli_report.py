"""CLI subcommands that turn run directories into tables and figures (see fedgmh.report)."""

from __future__ import annotations

import argparse


def _cmd_aggregate(args: argparse.Namespace) -> None:
    from fedgmh import report

    results = report.write_aggregate(args.runs, args.out, curves_out=args.curves, experiment=args.experiment)
    print(f"aggregate: {len(results)} runs, {results['setting'].nunique()} settings, "
          f"{results['algorithm'].nunique()} algorithms -> {args.out}")


def _cmd_table(args: argparse.Namespace) -> None:
    from fedgmh import report

    table = report.write_table(args.results, args.experiment, args.out, out_csv=args.csv, cells_csv=args.cells,
                               title=args.title, reference_path=args.reference)
    cells = table["cells"]
    print(f"table {args.experiment}: {cells['algorithm'].nunique()} methods x {len(table['settings'])} settings -> {args.out}")


def _cmd_curves(args: argparse.Namespace) -> None:
    from fedgmh import report

    curves = report.read_curves(args.curves)
    panels = report.plot_curves(curves, args.out, png=args.png, settings=args.setting, experiment=args.experiment,
                                algorithms=args.algorithm, title=args.title)
    print(f"curves: {len(panels)} panel(s) ({', '.join(panels)}) -> {args.out}" + (f", {args.png}" if args.png else ""))


def register(sub: argparse._SubParsersAction) -> None:
    """Add the reporting subcommands to the `fedgmh` parser."""
    p = sub.add_parser("aggregate", help="collect run directories into a tidy results CSV (and per-round curves)")
    p.add_argument("--runs", nargs="+", required=True, metavar="RUNDIR", help="run directories written by `fedgmh train`")
    p.add_argument("--out", required=True, help="results CSV: one row per run")
    p.add_argument("--curves", help="curves CSV: one row per run and evaluated round (long format)")
    p.add_argument("--experiment", help="experiment / table id for every run (default: run_info.json's, else empty)")
    p.set_defaults(func=_cmd_aggregate)

    p = sub.add_parser("table", help="LaTeX table (booktabs) of mean ± std best accuracy per algorithm and setting")
    p.add_argument("--results", required=True, help="results CSV from `fedgmh aggregate`")
    p.add_argument("--experiment", required=True, help="which experiment of the results to tabulate, e.g. table2")
    p.add_argument("--out", required=True, help="LaTeX file (.tex)")
    p.add_argument("--csv", help="the same table as CSV (rows = methods, columns = settings, cells 'mean ± std')")
    p.add_argument("--cells", help="tidy CSV, one row per cell: mean, std, n_seeds, best flag (and the paper's value with --reference)")
    p.add_argument("--title", help="caption's first words (default: the experiment id)")
    p.add_argument("--reference", help="the paper's numbers (shared/reference/fedgmh_paper_tables.csv) to put next to ours in --cells")
    p.set_defaults(func=_cmd_table)

    p = sub.add_parser("curves", help="figure: test accuracy per round, mean over seeds with a ±1 std band")
    p.add_argument("--curves", required=True, help="curves CSV from `fedgmh aggregate --curves`")
    p.add_argument("--out", required=True, help="figure file (PDF, or any format matplotlib knows by suffix)")
    p.add_argument("--png", help="also write this PNG")
    p.add_argument("--experiment", help="only this experiment's runs")
    p.add_argument("--setting", nargs="+", help="setting id(s) to draw, e.g. cifar100_c5_a0.5 (default: all, one panel each)")
    p.add_argument("--algorithm", nargs="+", help="only these algorithms (default: all)")
    p.add_argument("--title", help="figure title")
    p.set_defaults(func=_cmd_curves)
