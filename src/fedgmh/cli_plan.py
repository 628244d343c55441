"""CLI subcommand `fedgmh plan`: a dry run that tells cost (fedgmh.plan_cost)."""

from __future__ import annotations

import argparse


def _cmd_plan(args: argparse.Namespace) -> None:
    from fedgmh.errors import UserError
    from fedgmh.plan_cost import cost_lines, load_plan, plan_cost

    if args.jobs < 1:
        raise UserError(f"--jobs {args.jobs}: at least 1 run at a time")
    plan = load_plan(args.configfile, args.config)
    if args.commands:
        for line in train_commands(plan, args.commands):
            print(line)
        return
    for line in cost_lines(plan, plan_cost(plan, jobs=args.jobs), listed=args.list):
        print(line)


def train_commands(plan, run_dirs: list[str]) -> list[str]:
    """The training job of each run folder as the workflow runs it, one tab-separated line each: run
    folder, log, partition, dataset, and the shell command (to run it where there is no Snakemake). With config `runs_per_job` > 1 the chosen runs of one of the plan's batches
    (`Plan.train_batches`) train in one `fedgmh train-group` command, on the line of the batch's first
    run; its other runs' lines have the batch's log and no command. A folder that is not a run the
    config trains is a UserError."""
    import os
    import shlex

    from fedgmh.errors import UserError

    runs = []
    for run_dir in dict.fromkeys(os.path.normpath(run_dir) for run_dir in run_dirs):  # each once
        run = plan.train_jobs.get(run_dir)
        if run is None:
            raise UserError(f"{run_dir} is not a run that config {plan.name!r} trains")
        runs.append(run)
    chosen = {run.run_dir for run in runs}
    batch_of = {}
    for index, batch in enumerate(plan.train_batches):
        members = [run for run in batch if run.run_dir in chosen]
        for run in members if len(members) > 1 else []:
            batch_of[run.run_dir] = (index, members)

    def partition_of(run) -> str:
        return f"{plan.results}/partitions/{run.partition}.npz"

    def arguments(run) -> list[str]:
        return plan.train_words(run, partition_of(run), plan.config["threads_per_job"])

    lines = []
    for run in runs:
        partition = partition_of(run)
        if run.run_dir in batch_of:
            index, members = batch_of[run.run_dir]
            log, runs_file = plan.batch_files(index, members)
            command = "" if run is not members[0] else (
                f"printf '%s\\n' {' '.join(shlex.quote(shlex.join(arguments(m))) for m in members)} > {shlex.quote(runs_file)}"
                f" && fedgmh train-group {shlex.quote(runs_file)} > {shlex.quote(log)} 2>&1")
        else:
            log = f"{plan.logs}/train/{os.path.relpath(run.run_dir, f'{plan.results}/runs')}.log"
            command = f"{shlex.join(['fedgmh', 'train', *arguments(run)])} > {shlex.quote(log)} 2>&1"
        lines.append("\t".join([run.run_dir, log, partition, run.dataset, command]))
    return lines


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
    p.add_argument("--commands", nargs="+", default=[], metavar="RUN_DIR",
                   help="instead, the training jobs of these run folders as the workflow runs them, one tab-separated "
                        "line each: run folder, log, partition, dataset, shell command")
    p.set_defaults(func=_cmd_plan)
