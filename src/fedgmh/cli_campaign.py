"""`fedgmh campaign status | run`: the committed priority list of full-protocol runs (fedgmh.campaign)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

DEFAULT_FILE = "config/campaign.yaml"
CLAIMS = "reference/fedgmh_paper_claims.yaml"


def _entries(args: argparse.Namespace):
    from fedgmh.campaign import load_campaign

    return load_campaign(args.file, args.directory, args.snakefile, args.config)


def _cmd_status(args: argparse.Namespace) -> None:
    from fedgmh import campaign_outlook as outlook
    from fedgmh.campaign import check_limits, record_problem, running_runs, state
    from fedgmh.report.claim_file import read_claims

    check_limits(args.jobs, None)
    entries = _entries(args)
    base, plan = Path(args.directory), entries[0].plan
    claims = read_claims(base / CLAIMS) if (base / CLAIMS).is_file() else []
    artifacts = base / plan.artifacts
    verdicts = outlook.read_verdicts(artifacts / "so_far")
    official = outlook.official_sources(plan)
    seeds = outlook.stored_seeds(plan.runs, outlook.stored_computations([base / store for store in plan.config["stores"]]), official)
    cpu_seconds, rates = outlook.cpu_run_seconds(artifacts / "runs"), outlook.gpu_rates(base / outlook.GPU_RATES)
    groups: dict[str, list] = {}
    for entry in entries:
        groups.setdefault(entry.group, []).append(entry)
    decided = outlook.decided_by_group([(title, outlook.entry_cells([e.run for e in members], plan.runs, official))
                                        for title, members in groups.items()], claims, verdicts, seeds)
    counts: dict[str, int] = {}
    index, remaining, running = 0, [], running_runs(base)
    for group, members in groups.items():
        lines, left = [], []
        for entry in members:
            index += 1
            now = state(entry, args.directory, running)
            counts[now] = counts.get(now, 0) + 1
            left += [entry] if now in ("to do", "cut off") else []
            problem = record_problem(entry, args.directory) if now != "done" else None
            where = f"  {entry.record}" if now == "done" else f"  {entry.snapshot}" if now == "cut off" else ""
            where += f"  ({entry.record}: {problem})" if problem and problem != "no record" else ""
            lines.append(f"{index:3d}. {entry.name:55s} {now}{where}")
        print(f"# {group} ({members[0].config})")
        print(f"#   {outlook.worth(decided[group], left, cpu_seconds, rates, args.jobs)}")
        print("\n".join(lines))
        remaining += left
    print("campaign: " + ", ".join(f"{counts.get(k, 0)} {k}" for k in ("done", "running", "cut off", "to do"))
          + (f"; the rest: {outlook.estimate(remaining, cpu_seconds, rates, args.jobs)}" if remaining else ""))
    print(f"campaign: once every group is done, {outlook.claims_text([c for found in decided.values() for c in found])} "
          "more have every run they need")


def _background(args: argparse.Namespace) -> None:
    """Start the campaign in a process of its own, which takes over the campaign's lock held here
    (a second `run --background` is refused at once, not in the first one's log)."""
    from fedgmh.campaign import CAMPAIGN_LOGS, campaign_lock

    log = Path(args.directory) / CAMPAIGN_LOGS / "campaign.log"
    with campaign_lock(args.directory) as lock, open(log, "a") as out:
        argv = ["campaign", "run", "--file", args.file, "--directory", args.directory, "--jobs", str(args.jobs),
                "--snakefile", args.snakefile, *(["--max-runs", str(args.max_runs)] if args.max_runs is not None else []),
                "--lock-fd", str(lock.fileno()), *(["--config", *args.config] if args.config else [])]
        process = subprocess.Popen([sys.executable, "-m", "fedgmh.cli", *argv], stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True, pass_fds=(lock.fileno(),))
    print(f"campaign: running in the background (pid {process.pid}); progress: {log}; "
          f"`fedgmh campaign status` shows each run; `kill {process.pid}` stops it (runs resume from their snapshots)")


def _cmd_run(args: argparse.Namespace) -> None:
    from fedgmh.campaign import check_limits, run_campaign

    entries = _entries(args)  # checked before anything starts, also with --background
    check_limits(args.jobs, args.max_runs)
    if args.background:
        _background(args)
        return
    outcome = run_campaign(args.file, entries, args.jobs, args.config, args.snakefile, args.directory, max_runs=args.max_runs,
                           say=lambda line: print(line, flush=True), lock_fd=args.lock_fd)
    print(f"campaign: {len(outcome['finished'])} finished, {len(outcome['left'])} not", flush=True)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("campaign", help="the full-protocol campaign: which runs are done, and train the next ones")
    verbs = p.add_subparsers(dest="verb", required=True)
    for name, func, text in (("status", _cmd_status, "each run of the campaign: done, running, cut off (a snapshot) or to do"),
                             ("run", _cmd_run, "train the runs still to do (cut-off ones first) in one Snakemake call, --jobs at a time")):
        v = verbs.add_parser(name, help=text)
        v.add_argument("--file", default=DEFAULT_FILE, help=f"the campaign's priority list (default {DEFAULT_FILE})")
        v.add_argument("--directory", default=".", help="the repository root: where results/ and paper_artifacts/ are (default .)")
        v.add_argument("--snakefile", default="Snakefile", help="the workflow (default Snakefile)")
        v.add_argument("--config", nargs="*", default=[], metavar="KEY=VALUE",
                       help="Snakemake --config overrides for every run, e.g. device=cpu mirror=../shared/data; "
                       "one that changes a run (rounds=2) changes which records count as done")
        v.set_defaults(func=func)
        v.add_argument("--jobs", type=int, default=2, help="runs at once (default 2: one per core of a 2-core CPU)"
                       + ("; status: the CPU time estimates assume as many" if name == "status" else ""))
        if name == "run":
            v.add_argument("--max-runs", type=int, default=None, help="train only the first this many runs still to do")
            v.add_argument("--background", action="store_true", help="detach and return at once; progress goes to logs/campaign/campaign.log")
            v.add_argument("--lock-fd", type=int, default=None, help=argparse.SUPPRESS)  # the lock `--background` hands down
