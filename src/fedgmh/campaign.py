"""A campaign: a committed priority list of full-protocol runs, trained by one Snakemake call.

The campaign file names one workflow config and groups of its runs (`experiment/setting/algorithm/seedN`,
each checked against the config's plan). An entry is *done* when its record is in the store
(paper_artifacts/<name>/runs/, where the workflow's train job puts it), *running* while a live
`fedgmh train` (or `train-group`) process of this checkout trains its folder, *cut off* when its run folder holds a
snapshot, and *to do* otherwise. `run_campaign` hands the runs still to train, as targets, to one
Snakemake call (`--cores jobs`, `--keep-going`, `--rerun-incomplete`) with `--config campaign=FILE`:
the train rule's priority then starts runs with a snapshot first and the others in the campaign's
order (workflow/rules/common.smk). The workflow decides reuse and resumption; nothing here imports torch.

Locks: the campaign's own (`campaign_lock`, fedgmh.locks: one campaign per folder, refused at once,
also in the background, where `run --background` hands it to the process it starts) and Snakemake's
(no other Snakemake call makes the same runs meanwhile). A Snakemake lock is removed first only when
a Snakemake this campaign started left it and nothing works in the folder any more (fedgmh.snakemake_locks);
any other is kept and the campaign refuses, naming what it saw. A stop (SIGTERM, Ctrl-C) reaches Snakemake
and its jobs: each run snapshots at the end of its round and stops, to be resumed by the next call;
Snakemake runs with --keep-incomplete, so a run stopped after its record was filed keeps it.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import yaml

from fedgmh import locks, snakemake_locks
from fedgmh.errors import Interrupted, UserError
from fedgmh.partition import load_partition
from fedgmh.plan import Plan, Run
from fedgmh.plan_cost import load_plan
from fedgmh.record import load_record
from fedgmh.runspec import RunSpec

#: where the campaign keeps its lock and, in the background, its log
CAMPAIGN_LOGS = Path("logs") / "campaign"
#: a run's snapshot in its folder (`fedgmh train --checkpoint-every`)
SNAPSHOT = "checkpoint.pt"
#: the `--config` values a campaign's runs get unless given: on a CPU, 3-channel images in the faster
#: layout (an execution option: the same runs, BENCHMARKS.md)
DEFAULT_OVERRIDES = ("cpu_channels_last=True",)


@dataclass(frozen=True)
class Entry:
    """One run of the campaign: its config file, its plan's run, and the group it is listed under."""

    group: str
    config: str
    run: Run
    plan: Plan

    @property
    def name(self) -> str:
        return os.path.relpath(self.run.run_dir, f"{self.plan.results}/runs")

    @property
    def record(self) -> Path:
        return Path(self.plan.record_destination(self.run)) / "run.json"

    @property
    def snapshot(self) -> Path:
        return Path(self.run.run_dir) / SNAPSHOT

    @property
    def target(self) -> str:
        """The Snakemake target that trains the run (or reuses its record) and stores the record."""
        return f"{self.plan.results}/stored/{self.name}.done"

    @property
    def partition(self) -> str:
        return f"{self.plan.results}/partitions/{self.run.partition}.npz"

    @property
    def log(self) -> Path:
        """The training job's log (the train rule's `log:`)."""
        return Path(self.plan.logs) / "train" / f"{self.name}.log"


def read_campaign(path: Path | str) -> tuple[str, list[tuple[str, list[str]]]]:
    """The campaign file's config and its groups' (title, run names), in order, checked for shape only."""
    try:
        spec = yaml.safe_load(Path(path).read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise UserError(f"campaign file {path} cannot be read: {err}") from None
    if not isinstance(spec, dict) or not isinstance(spec.get("config"), str) or not isinstance(spec.get("groups"), list) \
            or not spec["groups"] or set(spec) - {"config", "groups"}:
        raise UserError(f"campaign file {path}: expected a mapping of a `config` file and a non-empty list `groups`, nothing else")
    groups = []
    for index, group in enumerate(spec["groups"]):
        where = f"campaign file {path}: groups[{index}]"
        if not isinstance(group, dict) or set(group) - {"title", "runs"} or "runs" not in group:
            raise UserError(f"{where} must have `runs` and optionally `title`")
        if not isinstance(group["runs"], list) or not group["runs"] or not all(isinstance(run, str) for run in group["runs"]):
            raise UserError(f"{where}.runs must be a non-empty list of experiment/setting/algorithm/seedN")
        groups.append((str(group.get("title", f"group {index + 1}")), group["runs"]))
    return spec["config"], groups


def run_order(path: Path | str | None) -> list[str]:
    """The campaign's run names in priority order (none without a file): the workflow's train priority."""
    return [name for _, names in read_campaign(path)[1] for name in names] if path else []


def load_campaign(path: Path | str, base: Path | str = ".", snakefile: Path | str = "Snakefile",
                  overrides: list[str] = ()) -> list[Entry]:
    """The campaign file's entries in priority order, each checked against its config's plan (the
    config path is relative to `base`, the folder the workflow runs in), with the `--config` overrides
    the runs will get applied: an override that changes a run (rounds, lr, ...) changes what counts as done."""
    base, workflow_dir = Path(base), Path(snakefile).resolve().parent
    config, groups = read_campaign(path)
    if not (base / config).is_file():
        raise UserError(f"campaign: config {config} not found in {base}")
    plan = load_plan([config], list(overrides), base, workflow_dir)
    entries, seen = [], set()
    for index, (title, names) in enumerate(groups):
        for name in names:
            parts = name.split("/")
            if len(parts) != 4 or not parts[3].startswith("seed"):
                raise UserError(f"campaign file {path}: groups[{index}]: {name!r} is not experiment/setting/algorithm/seedN")
            run = plan.train_job(parts[0], parts[1], parts[2], parts[3][4:])  # ConfigError (a UserError) if not a run
            if run.run_dir in seen:
                raise UserError(f"campaign file {path}: groups[{index}]: {name} is listed twice")
            seen.add(run.run_dir)
            entries.append(Entry(title, config, run, plan))
    return entries


def running_runs(base: Path | str = ".") -> set[Path]:
    """The run folders that live `fedgmh train` processes train (Linux's /proc: a process whose
    command line holds `train` and `--out FOLDER`, or `train-group RUNS` whose runs file names each
    run's `--out FOLDER`; FOLDER taken from its working folder), whoever started them: a campaign, a
    plain `snakemake`, a person."""
    found = set()
    for process in Path("/proc").glob("[0-9]*"):
        try:
            argv = (process / "cmdline").read_bytes().decode(errors="replace").split("\0")
            cwd = Path(os.readlink(process / "cwd"))
            if "train" in argv and "--out" in argv[:-1]:
                found.add((cwd / argv[argv.index("--out") + 1]).resolve())
            elif "train-group" in argv[:-1]:
                for line in (cwd / argv[argv.index("train-group") + 1]).read_text().splitlines():
                    words = shlex.split(line, comments=True)
                    if "--out" in words[:-1]:
                        found.add((cwd / words[words.index("--out") + 1]).resolve())
        except (OSError, ValueError):
            continue  # ended meanwhile, not ours to read, or not a runs file
    return found


def clear_stale_snakemake_lock(base: Path | str, unlock: list[str], say: Callable[[str], None] = print) -> None:
    """Remove Snakemake's lock of `base` where a Snakemake this campaign started was killed (a
    machine's session ended) and nothing works there any more (fedgmh.snakemake_locks); otherwise
    UserError in one line: what was seen and the `unlock` command that clears it by hand."""
    base = Path(base).resolve()
    training = sorted(run for run in running_runs(base) if base in run.parents)
    busy = f"a `fedgmh train` process still trains {training[0]}" if training else None
    try:
        removed = snakemake_locks.clear_stale_lock(base, busy)
    except UserError as err:
        raise UserError(f"campaign: {err}; if no Snakemake works in {base}, clear it with `{shlex.join(unlock)}`") from None
    if removed:
        say(f"campaign: removed Snakemake's lock of {base} (left by a campaign's Snakemake that was killed)")


def record_problem(entry: Entry, base: Path | str = ".") -> str | None:
    """Why the record at the entry's place in the store is not this run's finished record (None: it
    is): missing, invalid (record.load_record), or of another run (config edited, a trial run): its
    spec differs from the plan's, the partition's data compared once the partition file is made."""
    folder = Path(base) / entry.record.parent
    if not (folder / "run.json").is_file():
        return "no record"
    try:
        found = RunSpec.from_record(load_record(folder)[0])
    except UserError as err:
        return f"invalid record: {err}"
    made, path = None, Path(base) / entry.partition
    if path.is_file():  # made: its data (the dataset's fingerprint, the partition's digest) is compared too
        try:
            partition, meta = load_partition(path)
        except UserError as err:
            return f"its partition file cannot be read: {err}"
        made = {**meta, "digest": partition.digest()}
    wanted = RunSpec.from_run(entry.run, made)
    differences = (found if wanted.knows_data else found.without_data()).difference(wanted)
    return f"a record of other settings (record vs plan: {'; '.join(differences)})" if differences else None


def state(entry: Entry, base: Path | str = ".", running: set[Path] | None = None) -> str:
    """done | running | cut off | to do (`running`: running_runs(base), when known)."""
    base = Path(base)
    if record_problem(entry, base) is None:
        return "done"
    if (base / entry.run.run_dir).resolve() in (running_runs(base) if running is None else running):
        return "running"
    return "cut off" if (base / entry.snapshot).is_file() else "to do"


def next_runs(entries: list[Entry], base: Path | str = ".") -> list[Entry]:
    """The entries still to train, in the order the campaign takes them: cut-off runs first (their
    snapshots hold hours of work), then the rest in priority order."""
    running = running_runs(base)
    states = {entry.name: state(entry, base, running) for entry in entries}
    return [e for e in entries if states[e.name] == "cut off"] + [e for e in entries if states[e.name] == "to do"]


def with_default_overrides(overrides: list[str]) -> list[str]:
    """`overrides` after each of DEFAULT_OVERRIDES whose key they do not set."""
    given = {override.split("=", 1)[0] for override in overrides}
    return [*(d for d in DEFAULT_OVERRIDES if d.split("=", 1)[0] not in given), *overrides]


def snakemake_command(targets: list[str], config: str, overrides: list[str], cores: int, snakefile: Path,
                      base: Path) -> list[str]:
    """One Snakemake call making `targets`, at most `cores` jobs at once. --keep-incomplete: a job
    stopped after its run finished (its record filed) keeps the run's outputs (every file fedgmh
    writes is complete or absent, so nothing half-written is kept)."""
    return [sys.executable, "-m", "snakemake", *targets, "--snakefile", str(snakefile), "--directory", str(base),
            "--cores", str(cores), "--configfile", str(base / config), "--keep-going", "--rerun-incomplete",
            "--keep-incomplete", *(["--config", *overrides] if overrides else [])]


def unlock_command(command: list[str]) -> list[str]:
    """`snakemake --unlock` for the folder, Snakefile and config of a `snakemake_command`."""
    keep = {"--snakefile", "--directory", "--configfile"}
    kept = [word for index, word in enumerate(command) if word in keep or (index and command[index - 1] in keep)]
    return ["snakemake", "--unlock", *kept]


def check_limits(jobs: int, max_runs: int | None) -> None:
    """At least one run at a time, and at least one run to start when a number is given."""
    if jobs < 1:
        raise UserError(f"--jobs {jobs}: at least 1")
    if max_runs is not None and max_runs < 1:
        raise UserError(f"--max-runs {max_runs}: at least 1 (leave it out for every run)")


def campaign_lock(base: Path | str, inherited: int | None = None) -> IO[str]:
    """The lock of the folder's one campaign, held (fedgmh.locks on logs/campaign/campaign.lock): a
    second campaign would ask for the same runs. `inherited`: the descriptor of that file handed
    down by `run --background`, whose lock this process holds already."""
    path = Path(base) / CAMPAIGN_LOGS / "campaign.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    if inherited is not None:
        if os.fstat(inherited).st_ino != os.stat(path).st_ino:
            raise UserError(f"descriptor {inherited} is not {path}")
        return os.fdopen(inherited, "a+")
    fd = locks.hold(path, wait=False)
    if fd is None:
        raise UserError(f"a campaign is already running in {Path(base).resolve()} (it holds {path}); "
                        "`fedgmh campaign status` shows its runs")
    return os.fdopen(fd, "a+")


def run_campaign(file: Path | str, entries: list[Entry], jobs: int, overrides: list[str], snakefile: Path | str,
                 base: Path | str = ".", max_runs: int | None = None, say: Callable[[str], None] = print,
                 lock_fd: int | None = None) -> dict[str, list[str]]:
    """Train the campaign's runs still to do (the first `max_runs` of them) in one Snakemake call,
    `jobs` at a time (its output goes to this process's). SIGTERM or Ctrl-C stops Snakemake and its
    runs (they snapshot at the end of their round) and raises `Interrupted`. `lock_fd`: the
    campaign's lock, held already (`campaign_lock`). Returns the runs finished and those not."""
    check_limits(jobs, max_runs)
    base, snakefile = Path(base).resolve(), Path(snakefile).resolve()
    with campaign_lock(base, lock_fd):
        queue = next_runs(entries, base)[:max_runs]
        if not queue:
            say("campaign: nothing to train (every run is done or running)")
            return {"finished": [], "left": []}
        for entry in queue:
            how = "resumes from its snapshot" if (base / entry.snapshot).is_file() else "starts"
            say(f"campaign: {entry.plan.name}/{entry.name} {how} when its turn comes (log {entry.log})")
        config_words = [f"campaign={Path(file).resolve()}", *with_default_overrides(overrides)]
        command = snakemake_command([entry.target for entry in queue], entries[0].config, config_words, jobs, snakefile, base)
        clear_stale_snakemake_lock(base, unlock_command(command), say)
        env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")  # the rules' `fedgmh`
        started = time.time()
        stop: dict[str, int | None] = {"signal": None}
        # The partitions first: a run whose partition is still being drawn is not ready, and Snakemake
        # would fill its slot with a later run of the queue, whatever the priority.
        partitions = sorted({entry.partition for entry in queue if not (base / entry.partition).is_file()})
        status = 0
        if partitions:
            say(f"campaign: {len(partitions)} partition(s) first, then the runs")
            status = _run_stoppable(snakemake_command(partitions, entries[0].config, config_words, jobs, snakefile, base),
                                    base, env, stop)
        if status == 0 and stop["signal"] is None:
            say(f"campaign: {len(queue)} run(s), {jobs} at a time: one Snakemake call")
            status = _run_stoppable(command, base, env, stop)
    outcome: dict[str, list[str]] = {"finished": [], "left": []}
    for entry in queue:
        done = record_problem(entry, base) is None
        outcome["finished" if done else "left"].append(entry.name)
        if not done and (base / entry.log).is_file() and (base / entry.log).stat().st_mtime >= started:  # it started
            say(stopped_line(entry, base))
    if stop["signal"] is not None:
        raise Interrupted(stop["signal"], f"campaign stopped by {signal.Signals(stop['signal']).name} "
                          f"({len(outcome['finished'])} finished, {len(outcome['left'])} left); "
                          "`fedgmh campaign run` goes on from where it stopped")
    if status != 0:
        raise UserError(f"snakemake exited with {status}: {len(outcome['finished'])} run(s) finished, "
                        f"{len(outcome['left'])} not (their logs are named above)")
    return outcome


def _run_stoppable(command: list[str], base: Path, env: dict[str, str], stop: dict[str, int | None]) -> int:
    """Run a Snakemake call in a process group of its own and return its exit status; SIGTERM or
    Ctrl-C meanwhile go to the whole group (Snakemake alone would wait for its jobs to finish) and
    are noted in `stop`."""
    process = subprocess.Popen(command, cwd=base, env=env, start_new_session=True)

    def on_signal(signum, frame):
        stop["signal"] = signum
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        return process.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def stopped_line(entry: Entry, base: Path) -> str:
    """What became of a run that started but has no record in the store."""
    resumes = (base / entry.snapshot).is_file()
    return (f"campaign: {entry.plan.name}/{entry.name} not finished (log {entry.log}); the next `campaign run` "
            + ("resumes it from its snapshot" if resumes else "starts it again (no snapshot yet)"))
