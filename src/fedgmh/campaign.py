"""A campaign: a committed priority list of full-protocol runs and the loop that trains the next ones.

Each entry names one run of a workflow config (`experiment/setting/algorithm/seedN`, checked against
the config's plan). An entry is *done* when its record is in the store (paper_artifacts/<name>/runs/,
where the workflow's train job puts it), *running* while a campaign process trains it,
*cut off* when its run folder holds a snapshot (resumed before anything new is started), and *to do*
otherwise. `run_campaign` keeps `jobs` runs going, each one Snakemake process that trains the run
and stores its record; the workflow itself decides reuse and resumption, the campaign only chooses
what to ask for next. Nothing here imports torch.

What the campaign trusts: a run is running only while a live process of this checkout trains it
(`training_process`: a pid file alone is no proof, its process may have ended and its number been
reused); one campaign per folder holds its lock (`campaign_lock`), which `run --background` hands to
the process it starts; a stop (SIGTERM, Ctrl-C) ends the campaign with a non-zero status, and keeps a
finished run's outputs (Snakemake runs with --keep-incomplete: every file fedgmh writes is complete or
absent, so nothing half-written is kept).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import yaml

from fedgmh.errors import Interrupted, UserError
from fedgmh.plan import Plan, Run
from fedgmh.plan_cost import load_plan
from fedgmh.record import load_record
from fedgmh.partition import load_partition
from fedgmh.runspec import RunSpec

#: where the campaign keeps its processes' logs and the pid files of the runs it is training
CAMPAIGN_LOGS = Path("logs") / "campaign"


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
        return Path(self.run.run_dir) / "checkpoint.pt"

    @property
    def target(self) -> str:
        """The Snakemake target that trains the run (or reuses its record) and stores the record."""
        return f"{self.plan.results}/stored/{self.name}.done"

    @property
    def partition(self) -> str:
        return f"{self.plan.results}/partitions/{self.run.partition}.npz"

    @property
    def slug(self) -> str:
        return f"{self.plan.name}--{self.name.replace('/', '--')}"


def _plan(config_path: str, base: Path, workflow_dir: Path, overrides: list[str]) -> Plan:
    """The config's plan as the workflow builds it (`load_plan`: a mapping, valid against the schema)."""
    if not (base / config_path).is_file():
        raise UserError(f"campaign: config {config_path} not found in {base}")
    return load_plan([config_path], overrides, base, workflow_dir)


def load_campaign(path: Path | str, base: Path | str = ".", snakefile: Path | str = "Snakefile",
                  overrides: list[str] = ()) -> list[Entry]:
    """The campaign file's entries in priority order, each checked against its config's plan (config
    paths are relative to `base`, the folder the workflow runs in), with the `--config` overrides the
    runs will get applied: an override that changes a run (rounds, lr, ...) changes what counts as done."""
    base, path, workflow_dir = Path(base), Path(path), Path(snakefile).resolve().parent
    try:
        spec = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise UserError(f"campaign file {path} cannot be read: {err}") from None
    if not isinstance(spec, dict) or not isinstance(spec.get("groups"), list) or not spec["groups"]:
        raise UserError(f"campaign file {path}: expected a mapping with a non-empty list `groups`")
    plans: dict[str, Plan] = {}
    entries, seen = [], set()
    for index, group in enumerate(spec["groups"]):
        where = f"campaign file {path}: groups[{index}]"
        if not isinstance(group, dict) or set(group) - {"title", "config", "runs"} or not {"config", "runs"} <= set(group):
            raise UserError(f"{where} must have `config`, `runs` and optionally `title`")
        if not isinstance(group["runs"], list) or not all(isinstance(run, str) for run in group["runs"]):
            raise UserError(f"{where}.runs must be a list of experiment/setting/algorithm/seedN")
        config = str(group["config"])
        if config not in plans:
            plans[config] = _plan(config, base, workflow_dir, list(overrides))
        plan = plans[config]
        for name in group["runs"]:
            parts = name.split("/")
            if len(parts) != 4 or not parts[3].startswith("seed"):
                raise UserError(f"{where}: {name!r} is not experiment/setting/algorithm/seedN")
            run = plan.train_job(parts[0], parts[1], parts[2], parts[3][4:])  # ConfigError (a UserError) if not a run
            if (plan.name, run.run_dir) in seen:
                raise UserError(f"{where}: {name} is listed twice")
            seen.add((plan.name, run.run_dir))
            entries.append(Entry(str(group.get("title", config)), config, run, plan))
    return entries


def training_process(pid: int, entry: Entry, base: Path) -> bool:
    """Whether process `pid` is the Snakemake process of a campaign (of this code or an earlier one)
    training `entry` in the folder `base`: its command line (Linux's /proc) names the run's target and
    `--directory base`. Any other process, one that has ended, or a pid of 1 or less is not."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0") if pid > 1 else []
    except OSError:
        return False
    folders = [argv[i + 1] for i, word in enumerate(argv[:-1]) if word == "--directory"]
    return "snakemake" in argv and entry.target in argv and any(Path(folder).resolve() == base.resolve() for folder in folders)


def _running_pid(entry: Entry, base: Path) -> int | None:
    """The pid of the process training `entry`, from its pid file, when that process is one (`training_process`)."""
    pid_file = base / CAMPAIGN_LOGS / "running" / f"{entry.slug}.pid"
    try:
        pid = int(pid_file.read_text())
    except (OSError, ValueError):
        return None
    return pid if training_process(pid, entry, base) else None


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


def state(entry: Entry, base: Path | str = ".") -> str:
    """done | running | cut off | to do."""
    base = Path(base)
    if record_problem(entry, base) is None:
        return "done"
    if _running_pid(entry, base) is not None:
        return "running"
    return "cut off" if (base / entry.snapshot).is_file() else "to do"


def next_runs(entries: list[Entry], base: Path | str = ".") -> list[Entry]:
    """The entries still to train, in the order the campaign takes them: cut-off runs first (their
    snapshots hold hours of work), then the rest in priority order."""
    states = {entry.slug: state(entry, base) for entry in entries}
    return [e for e in entries if states[e.slug] == "cut off"] + [e for e in entries if states[e.slug] == "to do"]


def snakemake_command(targets: list[str], config: str, overrides: list[str], cores: int, snakefile: Path,
                      base: Path, nolock: bool) -> list[str]:
    # --keep-incomplete: a job stopped after its run finished (its record filed) keeps the run's outputs
    command = [sys.executable, "-m", "snakemake", *targets, "--snakefile", str(snakefile), "--directory", str(base),
               "--cores", str(cores), "--configfile", str(base / config), "--rerun-incomplete", "--keep-incomplete"]
    if nolock:  # several processes, each making its own run's outputs (the shared inputs are made beforehand)
        command.append("--nolock")
    return command + (["--config", *overrides] if overrides else [])


def _environment() -> dict[str, str]:
    """The rules call `fedgmh`: the one of this interpreter's environment."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def prepare(entries: list[Entry], overrides: list[str], snakefile: Path, base: Path, say: Callable[[str], None]) -> None:
    """Download the data and make the partitions of `entries` (one Snakemake call per config), so the
    runs' own processes find their shared inputs made and never write them at the same time."""
    by_config: dict[str, list[str]] = {}
    for entry in entries:
        by_config.setdefault(entry.config, []).append(entry.partition)
    for config, partitions in by_config.items():
        log = base / CAMPAIGN_LOGS / "prepare.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        say(f"campaign: data and partitions of {config} (log: {log})")
        with open(log, "a") as out:
            done = subprocess.run(snakemake_command(sorted(set(partitions)), config, overrides, 1, snakefile, base, False),
                                  stdout=out, stderr=subprocess.STDOUT, env=_environment(), cwd=base)
        if done.returncode != 0:
            raise UserError(f"campaign: preparing the data of {config} failed (see {log})")


def check_limits(jobs: int, max_runs: int | None) -> None:
    """At least one run at a time, and at least one run to start when a number is given."""
    if jobs < 1:
        raise UserError(f"--jobs {jobs}: at least 1")
    if max_runs is not None and max_runs < 1:
        raise UserError(f"--max-runs {max_runs}: at least 1 (leave it out for every run)")


def campaign_lock(base: Path | str, inherited: int | None = None) -> IO[str]:
    """The lock of the folder's one campaign, held (an exclusive flock on logs/campaign/campaign.lock,
    the file every campaign takes): a second campaign would start the same runs (each Snakemake runs
    with --nolock), two trainers in one run folder. `inherited`: the descriptor of that file handed
    down by `run --background`, whose lock this process holds already."""
    path = Path(base) / CAMPAIGN_LOGS / "campaign.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = inherited if inherited is not None else os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    lock = os.fdopen(fd, "a+")
    if inherited is not None and os.fstat(lock.fileno()).st_ino != os.stat(path).st_ino:
        lock.close()
        raise UserError(f"descriptor {inherited} is not {path}")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        raise UserError(f"a campaign is already running in {Path(base).resolve()} (it holds {path}); "
                        "`fedgmh campaign status` shows its runs") from None
    return lock


def run_campaign(entries: list[Entry], jobs: int, overrides: list[str], snakefile: Path | str, base: Path | str = ".",
                 max_runs: int | None = None, poll_s: float = 5.0, say: Callable[[str], None] = print,
                 lock_fd: int | None = None) -> dict[str, list[str]]:
    """Train the campaign's next runs, `jobs` at a time, until none is left (or `max_runs` were
    started); each run is one Snakemake process (its log under logs/campaign/). SIGTERM or Ctrl-C
    stops the runs in progress (they snapshot at the end of their round) and raises `Interrupted`.
    `lock_fd`: the campaign's lock, held already (`campaign_lock`)."""
    check_limits(jobs, max_runs)
    base, snakefile = Path(base).resolve(), Path(snakefile).resolve()
    (base / CAMPAIGN_LOGS / "running").mkdir(parents=True, exist_ok=True)
    with campaign_lock(base, lock_fd):
        return _run(entries, jobs, overrides, snakefile, base, max_runs, poll_s, say)


def stopped_line(entry: Entry, base: Path) -> str:
    """What became of a run whose process the campaign stopped."""
    if record_problem(entry, base) is None:
        return f"campaign: {entry.plan.name}/{entry.name} stopped after its record was filed: done ({entry.record})"
    resumes = (base / entry.snapshot).is_file()
    return (f"campaign: {entry.plan.name}/{entry.name} stopped; the next `campaign run` "
            + ("resumes it from its snapshot" if resumes else "starts it again (no snapshot yet)"))


def _run(entries: list[Entry], jobs: int, overrides: list[str], snakefile: Path, base: Path, max_runs: int | None,
         poll_s: float, say: Callable[[str], None]) -> dict[str, list[str]]:
    queue = next_runs(entries, base)[:max_runs]
    outcome: dict[str, list[str]] = {"finished": [], "failed": []}
    if not queue:
        say("campaign: nothing to train (every run is done or running)")
        return outcome
    prepare(queue, overrides, snakefile, base, say)
    running: dict[str, tuple[Entry, subprocess.Popen]] = {}
    stop = {"signal": None}

    def on_signal(signum, frame):
        stop["signal"] = signum

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        while (queue or running) and stop["signal"] is None:
            while queue and len(running) < jobs:
                entry = queue.pop(0)
                if state(entry, base) in ("done", "running"):  # since the queue was made (e.g. by hand)
                    continue
                how = "resumes from its snapshot" if (base / entry.snapshot).is_file() else "starts"
                log = base / CAMPAIGN_LOGS / f"{entry.slug}.log"
                with open(log, "w") as out:
                    process = subprocess.Popen(snakemake_command([entry.target], entry.config, overrides, 1, snakefile, base, True),
                                               stdout=out, stderr=subprocess.STDOUT, env=_environment(), cwd=base,
                                               start_new_session=True)  # its own group: a stop reaches `fedgmh train`
                (base / CAMPAIGN_LOGS / "running" / f"{entry.slug}.pid").write_text(str(process.pid))
                running[entry.slug] = (entry, process)
                say(f"campaign: {entry.plan.name}/{entry.name} {how} (pid {process.pid}, log {log})")
            time.sleep(poll_s)
            for slug, (entry, process) in list(running.items()):
                if process.poll() is None:
                    continue
                del running[slug]
                (base / CAMPAIGN_LOGS / "running" / f"{slug}.pid").unlink(missing_ok=True)
                if process.returncode == 0:  # trained (or reused) and stored by the workflow's train job
                    outcome["finished"].append(entry.name)
                    where = entry.record if record_problem(entry, base) is None else \
                        f"beside {entry.record} (which holds a record of other settings)"
                    say(f"campaign: {entry.plan.name}/{entry.name} finished; its record: {where}")
                else:
                    outcome["failed"].append(entry.name)
                    say(f"campaign: {entry.plan.name}/{entry.name} failed (exit {process.returncode}; "
                        f"log {base / CAMPAIGN_LOGS / (slug + '.log')})")
    finally:
        for slug, (entry, process) in running.items():  # asked to stop: the runs snapshot at the end of their round
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)  # Snakemake alone would wait for its job to finish
        for slug, (entry, process) in running.items():
            process.wait()
            (base / CAMPAIGN_LOGS / "running" / f"{slug}.pid").unlink(missing_ok=True)
            say(stopped_line(entry, base))
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if stop["signal"] is not None:
        raise Interrupted(stop["signal"], f"campaign stopped by {signal.Signals(stop['signal']).name} "
                          f"({len(outcome['finished'])} finished, {len(outcome['failed'])} failed); "
                          "`fedgmh campaign run` goes on from where it stopped")
    return outcome
