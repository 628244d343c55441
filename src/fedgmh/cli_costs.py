"""CLI subcommand `fedgmh costs`: the section 2.3 cost table (analytic, and measured from runs)."""

from __future__ import annotations

import argparse


def _cmd_costs(args: argparse.Namespace) -> None:
    from fedgmh import costs
    from fedgmh.errors import UserError
    from fedgmh.io import write_csv, write_text
    from fedgmh.report.cost_tables import costs_latex, costs_line
    from fedgmh.report.outputs import check_outputs

    repeated = [name for i, name in enumerate(args.dataset) if name in args.dataset[:i]]
    if repeated:
        raise UserError(f"--dataset {repeated[0]} is given twice; give each dataset once")
    check_outputs(args.out, args.tex)
    table = costs.cost_table(args.dataset, labels=args.labels, runs=args.runs or ())
    write_csv(table, args.out)
    if args.tex:
        write_text(costs_latex(table), args.tex)
    print(costs_line(table, args.out, args.tex))


def write_artifact(inputs, outputs, params) -> str:
    """The `costs` report artifact (fedgmh.report.artifacts.tables): the table of `fedgmh costs` with the runs of
    config `costs_runs` (their run.json records), as CSV and LaTeX."""
    import os

    from fedgmh import costs
    from fedgmh.datasets import COST_DATASETS
    from fedgmh.io import write_csv, write_text
    from fedgmh.report.artifact import every, need
    from fedgmh.report.cost_tables import costs_latex, costs_line
    from fedgmh.report.outputs import check_outputs

    out, tex = need(outputs, "csv"), need(outputs, "tex")
    check_outputs(out, tex)
    table = costs.cost_table(list(COST_DATASETS), runs=[os.path.dirname(record) for record in every(inputs, "records")] or ())
    write_csv(table, out)
    write_text(costs_latex(table), tex)
    return costs_line(table, out, tex)


def register(sub: argparse._SubParsersAction) -> None:
    """Add `costs` to the `fedgmh` parser."""
    from fedgmh.datasets import COST_DATASETS

    p = sub.add_parser("costs", help="section 2.3 storage / communication costs: analytic from the actual models, measured from runs")
    p.add_argument("--out", required=True, help="CSV: model figures vs the paper's, KB per round per algorithm, and per run analytic vs measured")
    p.add_argument("--tex", help="the same as LaTeX (booktabs) tables")
    p.add_argument("--runs", nargs="+", metavar="RUNDIR", help="finished run directories (metrics.csv with bytes_up / bytes_down, run.json)")
    p.add_argument("--dataset", nargs="+", default=list(COST_DATASETS), help=f"datasets whose models are tabulated (default: {' '.join(COST_DATASETS)})")
    p.add_argument("--labels", type=int, help="|S_m| of a FedGMH-family client in the per-algorithm rows (default: all the dataset's classes)")
    p.set_defaults(func=_cmd_costs)
