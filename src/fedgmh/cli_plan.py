"""CLI subcommand `fedgmh plan`: a dry run that tells cost (fedgmh.plan_cost)."""

from __future__ import annotations

import argparse


def _cmd_plan(args: argparse.Namespace) -> None:
    from fedgmh.plan_cost import cost_lines, load_plan, plan_cost

    plan = load_plan(args.configfile, args.config)
    if args.commands:
        for line in train_commands(plan, args.commands):
            print(line)
        return
    for line in cost_lines(plan, plan_cost(plan), listed=args.list):
        print(line)


def train_commands(plan, run_dirs: list[str]) -> list[str]:
    """The training job of each run folder as the workflow's train rule runs it, one tab-separated
    line each: run folder, log, partition, dataset, and the shell command (tools/lease/direct.sh runs
    it where there is no Snakemake). A folder that is not a run the config trains is a UserError."""
    import os
    import shlex

    from fedgmh.errors import UserError

    lines = []
    for run_dir in run_dirs:
        run = plan.train_jobs.get(os.path.normpath(run_dir))
        if run is None:
            raise UserError(f"{run_dir} is not a run that config {plan.name!r} trains")
        log = f"{plan.logs}/train/{os.path.relpath(run.run_dir, f'{plan.results}/runs')}.log"
        partition = f"{plan.results}/partitions/{run.partition}.npz"
        words = ["fedgmh", "train", *plan.train_arguments(run, partition, plan.config["threads_per_job"]),
                 "--put-record", plan.record_destination(run)]
        lines.append("\t".join([run.run_dir, log, partition, run.dataset, f"{shlex.join(words)} > {shlex.quote(log)} 2>&1"]))
    return lines


def register(sub: argparse._SubParsersAction) -> None:
    """Add `plan` to the `fedgmh` parser."""
    p = sub.add_parser("plan", help="a dry run that tells cost: how many of a config's runs will train, how many reuse a "
                                    "record, and the estimated training time on a CPU and a GPU (run in the repository root)")
    p.add_argument("--configfile", nargs="+", default=[], metavar="FILE",
                   help="the workflow's config file(s), as for snakemake (default: config/config.yaml)")
    p.add_argument("--config", nargs="+", default=[], metavar="KEY=VALUE", help="overrides, as snakemake's --config")
    p.add_argument("--list", action="store_true", help="also list the run folders to train")
    p.add_argument("--commands", nargs="+", default=[], metavar="RUN_DIR",
                   help="instead, the training jobs of these run folders as the workflow runs them, one tab-separated "
                        "line each: run folder, log, partition, dataset, shell command (tools/lease/prepare_direct.sh)")
    p.set_defaults(func=_cmd_plan)
