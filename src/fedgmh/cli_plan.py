"""CLI subcommand `fedgmh plan`: a dry run that tells cost (fedgmh.plan_cost)."""

from __future__ import annotations

import argparse


def _cmd_plan(args: argparse.Namespace) -> None:
    from fedgmh.plan_cost import cost_lines, load_plan, plan_cost

    from fedgmh.errors import UserError

    if args.jobs < 1:
        raise UserError(f"--jobs {args.jobs}: at least 1 run at a time")
    plan = load_plan(args.configfile, args.config)
    for line in cost_lines(plan, plan_cost(plan, jobs=args.jobs), listed=args.list):
        print(line)


def register(sub: argparse._SubParsersAction) -> None:
    """Add `plan` to the `fedgmh` parser."""
    p = sub.add_parser("plan", help="a dry run that tells cost: how many of a config's runs will train, how many reuse a "
                                    "record, and the estimated training time on a CPU and a GPU (run in the repository root)")
    p.add_argument("--configfile", nargs="+", default=[], metavar="FILE",
                   help="the workflow's config file(s), as for snakemake (default: config/config.yaml)")
    p.add_argument("--config", nargs="+", default=[], metavar="KEY=VALUE", help="overrides, as snakemake's --config")
    p.add_argument("--list", action="store_true", help="also list the run folders to train")
    p.add_argument("--jobs", type=int, default=1, metavar="N", help="runs trained at a time on CPU cores, as snakemake's --cores "
                   "or `fedgmh campaign run --jobs` (default 1: one after the other)")
    p.set_defaults(func=_cmd_plan)
