"""The SLURM profile on a real cluster (issue 41): a one-node SLURM runs the workflow through
workflow/profiles/slurm with the command line of docs/running.md, "SLURM".

The cluster: Debian's slurm-wlm 22.05 and munge, installed with apt where they are missing (root and
apt-get are needed: skipped, with the reason, without them), a one-node slurm.conf (select/cons_tres,
proctrack/linuxproc, task/none: no cgroups, no systemd; MinJobAge=600, so that squeue still shows
finished jobs; one partition, `debug`), and munged, slurmctld and slurmd started by the test as its own
child processes, with their key, socket, state, logs and ports in a fresh temporary folder. They are
stopped when the tests end, whatever happens (and die with the test process if it is killed).
The configuration is written to /etc/slurm/slurm.conf, the one place the jobs' inner `srun` can read
it (the jobstep plugin drops SLURM_CONF from its environment); a machine with a slurm.conf of its
own is left alone (skipped), and the file is removed afterwards. Every snakemake call runs under
`timeout -k 30`.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pandas as pd
import pytest
import yaml
from conftest import SNAKEFILE, job_counts, tiny_config

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[1]
PROFILE = REPO / "workflow" / "profiles" / "slurm"

PACKAGES = ["slurm-wlm", "slurm-client", "munge"]
COMMANDS = ["munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo"]
SLURM_CONF = Path("/etc/slurm/slurm.conf")
MARK = "# written by fedgmh-repro's tests/test_slurm_cluster.py for its one-node cluster; removed when it ends\n"
PARTITION = "debug"
NAME = "slurm"  # the config's name: results/slurm/, paper_artifacts/slurm/
RUNS = Path("results") / NAME / "runs" / "table2" / "digits_c2_a0.5"

# docs/running.md, "SLURM": the tested command line is the target, then these (the partition fills the
# profile's placeholder; no account: this cluster has no accounting). The two status-check intervals
# only make the test faster (the plugin's defaults: first check after 40 s).
SLURM_ARGS = ["--profile", str(PROFILE), "--default-resources", f"slurm_partition={PARTITION}"]
FAST = ["--slurm-init-seconds-before-status-checks", "2", "--seconds-between-status-checks", "2"]


def cluster_config() -> dict:
    """The smoke config cut to one table of two runs (FedAvg, FedGMH) on digits: 6 clients, 8 rounds,
    a snapshot every round (so that a cancelled job has one to resume from)."""
    return tiny_config(NAME, ["fedavg", "fedgmh"], title="Table 2 (one-node SLURM)", clients=6, rounds=8, seeds=[0],
                       warm_train=False, checkpoint_every=1)


# ----------------------------------------------------------------------------- the one-node cluster


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the test process ends, even by SIGKILL (prctl PR_SET_PDEATHSIG)."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _tail(path: Path, lines: int = 15) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else f"({path} missing)"


def install_or_skip() -> None:
    """The SLURM and munge commands, installed with apt where missing; a skip saying why where that cannot be done."""
    if not sys.platform.startswith("linux"):
        pytest.skip("a one-node SLURM needs Linux")
    missing = [name for name in COMMANDS if not shutil.which(name)]
    if os.geteuid() != 0:
        pytest.skip("needs root: it installs SLURM with apt where missing, writes /etc/slurm/slurm.conf and runs the daemons")
    if not missing:
        return
    if not shutil.which("apt-get"):
        pytest.skip(f"SLURM is not installed ({', '.join(missing)} missing) and there is no apt-get to install it")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    lock = ["-o", "DPkg::Lock::Timeout=120"]
    for command in (["apt-get", *lock, "update", "-qq"],
                    ["apt-get", *lock, "install", "-y", "-qq", "--no-install-recommends", *PACKAGES]):
        try:
            done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
        except subprocess.TimeoutExpired:
            pytest.skip(f"`{' '.join(command)}` did not finish in 600 s")
        if done.returncode != 0:
            pytest.skip(f"`{' '.join(command)}` failed (exit {done.returncode}): {(done.stdout + done.stderr).strip()[-500:]}")
    missing = [name for name in COMMANDS if not shutil.which(name)]
    assert not missing, f"installed {' '.join(PACKAGES)}, yet {', '.join(missing)} missing"


class Cluster:
    """munged, slurmctld and slurmd of a one-node cluster, everything of theirs under `folder`."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.host = socket.gethostname().split(".")[0]
        self.processes: list[tuple[str, subprocess.Popen]] = []
        self.env = dict(os.environ, SLURM_CONF=str(SLURM_CONF),
                        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
        for name in list(self.env):
            if name.startswith(("SLURM_JOB", "SLURM_STEP", "SBATCH_", "SRUN_", "SQUEUE_")):
                del self.env[name]  # a test started inside a SLURM job: not that job's settings

    def slurm_conf(self, node: str) -> str:
        f = self.folder
        return MARK + "\n".join([
            "ClusterName=fedgmhtest",
            f"SlurmctldHost={self.host}(127.0.0.1)",
            f"SlurmctldPort={_free_port()}",
            f"SlurmdPort={_free_port()}",
            "AuthType=auth/munge",
            f"AuthInfo=socket={f / 'munge' / 'munge.socket'}",
            "CredType=cred/munge",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"StateSaveLocation={f / 'state'}",
            f"SlurmdSpoolDir={f / 'spool'}",
            f"SlurmctldPidFile={f / 'slurmctld.pid'}",
            f"SlurmdPidFile={f / 'slurmd.pid'}",
            f"SlurmctldLogFile={f / 'slurmctld.log'}",
            f"SlurmdLogFile={f / 'slurmd.log'}",
            "ProctrackType=proctrack/linuxproc",  # no cgroups
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",  # no slurmdbd: sacct cannot answer, squeue must
            "MpiDefault=none",
            "ReturnToService=2",
            "MinJobAge=600",  # finished jobs stay visible to squeue (the plugin wants >= 120 s)
            "KillWait=10",
            f"{node} NodeAddr=127.0.0.1 State=UNKNOWN",
            f"PartitionName={PARTITION} Nodes={self.host} Default=YES MaxTime=INFINITE State=UP",
        ]) + "\n"

    def start(self) -> None:
        for sub in ("munge", "state", "spool"):
            (self.folder / sub).mkdir(mode=0o755)
        # the node as slurmd sees it (CPUs, sockets, memory), under this host's name
        probe = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, timeout=60, env=self.env)
        node = next((line for line in probe.stdout.splitlines() if line.startswith("NodeName=")), None)
        assert node, f"slurmd -C: {probe.stdout}{probe.stderr}"
        node = re.sub(r"^NodeName=\S+", f"NodeName={self.host}", node)
        memory = int(re.search(r"RealMemory=(\d+)", node).group(1))
        from fedgmh.plan import TRAIN_MEM_MB

        if memory < TRAIN_MEM_MB:
            pytest.skip(f"this machine has {memory} MB of memory; a training job asks SLURM for {TRAIN_MEM_MB} MB")

        key = self.folder / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        munge = self.folder / "munge"
        self.spawn("munged", "-F", "--force", f"--key-file={key}", f"--socket={munge / 'munge.socket'}",
                   f"--pid-file={munge / 'munged.pid'}", f"--log-file={munge / 'munged.log'}",
                   f"--seed-file={munge / 'munged.seed'}")
        self.wait(lambda: (munge / "munge.socket").exists(), 30, "munged made no socket", munge / "munged.log")

        SLURM_CONF.parent.mkdir(parents=True, exist_ok=True)
        SLURM_CONF.write_text(self.slurm_conf(node))
        self.spawn("slurmctld", "-D", "-i")
        self.spawn("slurmd", "-D", "-N", self.host)

        def node_idle() -> bool:
            state = subprocess.run(["sinfo", "-h", "-n", self.host, "-o", "%t"], capture_output=True, text=True,
                                   env=self.env, timeout=30)
            return state.stdout.strip() == "idle"

        self.wait(node_idle, 60, "the node did not come up idle", self.folder / "slurmctld.log", self.folder / "slurmd.log")

    def spawn(self, name: str, *args: str) -> None:
        with open(self.folder / f"{name}.out", "w") as out:
            process = subprocess.Popen([name, *args], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       env=self.env, preexec_fn=_die_with_parent)
        self.processes.append((name, process))

    def wait(self, ready, seconds: float, problem: str, *logs: Path) -> None:
        deadline = time.monotonic() + seconds
        while not ready():
            dead = [name for name, process in self.processes if process.poll() is not None]
            if dead or time.monotonic() > deadline:
                details = "\n".join(f"--- {log}\n{_tail(log)}" for log in [*logs, *(self.folder / f"{n}.out" for n in dead)])
                pytest.fail(f"one-node SLURM: {problem}{' (' + ', '.join(dead) + ' ended)' if dead else ''}\n{details}")
            time.sleep(0.5)

    def stop(self) -> None:
        """Cancel what is left in the queue, stop the daemons (slurmd, slurmctld, munged), remove the slurm.conf."""
        if any(name == "slurmctld" and process.poll() is None for name, process in self.processes):
            with contextlib.suppress(Exception):
                jobs = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True, env=self.env,
                                      timeout=30).stdout.split()
                if jobs:
                    subprocess.run(["scancel", *jobs], env=self.env, timeout=30)
                    deadline = time.monotonic() + 20
                    while time.monotonic() < deadline and subprocess.run(
                            ["squeue", "-h", "-t", "RUNNING,COMPLETING,PENDING", "-o", "%i"], capture_output=True,
                            text=True, env=self.env, timeout=30).stdout.strip():
                        time.sleep(0.5)
        for name, process in reversed(self.processes):
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        if SLURM_CONF.exists() and SLURM_CONF.read_text().startswith(MARK):
            SLURM_CONF.unlink()


@contextlib.contextmanager
def one_user_at_a_time(path: Path, seconds: float) -> Iterator[None]:
    """An exclusive lock on `path` (two test runs at once would share /etc/slurm/slurm.conf): waits up to `seconds`."""
    with open(path, "a") as handle:
        deadline = time.monotonic() + seconds
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    pytest.skip(f"another run of this test holds the one-node cluster ({path})")
                time.sleep(1)
        yield


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    pytest.importorskip("snakemake_executor_plugin_slurm",
                        reason="snakemake-executor-plugin-slurm is not installed (pip install -e '.[test]')")
    install_or_skip()
    with one_user_at_a_time(Path("/tmp/fedgmh-slurm-test.lock"), 900):
        if SLURM_CONF.exists() and not SLURM_CONF.read_text().startswith(MARK):
            pytest.skip(f"{SLURM_CONF} exists: this machine has SLURM settings of its own, which the test does not touch")
        one = Cluster(tmp_path_factory.mktemp("slurm"))
        # SIGTERM (a CI job's time limit) or SIGHUP: stop the cluster on the way out, as Ctrl-C does
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}

        def interrupt(signum, frame):
            raise KeyboardInterrupt(f"signal {signum}")

        for sig in previous:
            signal.signal(sig, interrupt)
        try:
            one.start()
            yield one
        finally:
            one.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)


# ----------------------------------------------------------------------------- the workflow on it


def snakemake(workdir: Path, *args: str, limit: int = 300) -> list[str]:
    """A snakemake call in `workdir`, under `timeout -k 30`: SIGTERM after `limit` s, SIGKILL 30 s later."""
    return ["timeout", "-k", "30", str(limit), sys.executable, "-m", "snakemake", "--snakefile", str(SNAKEFILE),
            "--directory", str(workdir), *args]


def run(workdir: Path, env: dict, *args: str, limit: int = 300) -> tuple[int, str]:
    """snakemake(workdir, *args) run to its end: (exit status, output)."""
    workdir.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(snakemake(workdir, *args, limit=limit), capture_output=True, text=True, env=env, cwd=workdir,
                          timeout=limit + 60)
    return done.returncode, done.stdout + done.stderr


class Background(subprocess.Popen):
    log: Path


@contextlib.contextmanager
def background(workdir: Path, env: dict, log: Path, *args: str, limit: int = 300) -> Iterator[Background]:
    """snakemake(workdir, *args) started, its output going to `log`; killed (its process group) if still running at the end."""
    workdir.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as output:
        process = Background(snakemake(workdir, *args, limit=limit), stdout=output, stderr=subprocess.STDOUT, env=env,
                             cwd=workdir, start_new_session=True)
    process.log = log
    try:
        yield process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


#: what differs between two trainings of the same run: when, how long, whether it was resumed, the evaluation's
#: sample passes (a resumed run starts with an empty evaluation cache, so it evaluates more) and its peak RSS
#: (memory.peak_rss_bytes)
VOLATILE = ("started_utc", "wall_time_s", "resumed_from_round", "evaluation_sample_passes")


def numbers(record: dict) -> dict:
    memory = {k: v for k, v in record["memory"].items() if k != "peak_rss_bytes"}
    return {**{k: v for k, v in record.items() if k not in VOLATILE}, "memory": memory}


def same_records(ours: Path, theirs: Path) -> None:
    """The records of a run trained twice hold the same numbers: metrics.csv (but its timings), clients.csv, run.json."""
    pd.testing.assert_frame_equal(pd.read_csv(ours / "metrics.csv").drop(columns="seconds"),
                                  pd.read_csv(theirs / "metrics.csv").drop(columns="seconds"), check_exact=True)
    assert (ours / "clients.csv").read_text() == (theirs / "clients.csv").read_text()
    record, reference = (json.loads((folder / "run.json").read_text()) for folder in (ours, theirs))
    assert numbers(record) == numbers(reference)


def wait_for(path: Path, process: Background, seconds: float = 300) -> None:
    """Until `path` exists; a failure if `process` ends first or it takes more than `seconds`."""
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert process.poll() is None, f"snakemake ended (exit {process.returncode}) before {path} was written\n" \
                                       f"{process.log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"no {path} after {seconds} s\n{process.log.read_text()[-3000:]}"
        time.sleep(0.1)


def child_of(pid: int) -> int:
    """The process whose parent is `pid` (the command that `timeout` runs)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                return int(stat.parent.name)
    raise AssertionError(f"process {pid} has no child")


def slurm_jobid(process: Background, algorithm: str) -> str:
    """The SLURM job id of the training job of `algorithm`, as Snakemake's output says when it submits it."""
    return re.search(rf"SLURM jobid (\d+) \(log: \S*_{algorithm}_0/", process.log.read_text()).group(1)


def test_the_profile_on_a_one_node_cluster_trains_what_a_local_run_trains_and_resumes_a_cancelled_job(
        cluster: Cluster, tmp_path: Path) -> None:
    """all_tables through the SLURM profile: one training job is cancelled with scancel once it has a
    snapshot; Snakemake reports it (exit 1); the same command again resumes it from its snapshot.
    Then every record and table equals that of a local run of the same config (run meanwhile)."""
    config = tmp_path / "slurm.yaml"
    config.write_text(yaml.safe_dump(cluster_config()))
    local, on_slurm = tmp_path / "local", tmp_path / "on_slurm"
    through_slurm = ["all_tables", *SLURM_ARGS, "--configfile", str(config), *FAST]
    snapshot = on_slurm / RUNS / "fedgmh" / "seed0" / "checkpoint.pt"
    with background(local, cluster.env, tmp_path / "local.log", "all_tables", "--cores", "2", "--configfile", str(config),
                    limit=400) as local_run, \
            background(on_slurm, cluster.env, tmp_path / "first_call.log", *through_slurm, limit=400) as first:
        wait_for(snapshot, first)
        jobid = slurm_jobid(first, "fedgmh")
        subprocess.run(["scancel", jobid], env=cluster.env, check=True, timeout=30)
        first.wait(timeout=430)
        text = first.log.read_text()
        assert first.returncode == 1, text[-3000:]
        assert f"SLURM-job '{jobid}' failed, SLURM status is: 'CANCELLED'" in text, text[-3000:]
        assert snapshot.exists() and not (snapshot.parent / "run.json").exists()

        # the same command again: the cancelled run resumes from its snapshot, the tables follow
        rc, out = run(on_slurm, cluster.env, *through_slurm)
        assert rc == 0, out[-3000:]
        assert job_counts(out).get("train", 0) >= 1
        record = json.loads((on_slurm / RUNS / "fedgmh" / "seed0" / "run.json").read_text())
        assert record["resumed_from_round"] >= 1, record["resumed_from_round"]
        train_log = on_slurm / "logs" / NAME / "train" / "table2" / "digits_c2_a0.5" / "fedgmh" / "seed0.log"
        assert "resuming from" in train_log.read_text(), train_log.read_text()[-2000:]
        assert not snapshot.exists()  # a finished run leaves no snapshot

        local_run.wait(timeout=430)
        assert local_run.returncode == 0, local_run.log.read_text()[-3000:]

    # the same numbers as the local run: records, and every table of the config
    for algorithm in ("fedavg", "fedgmh"):
        same_records(on_slurm / RUNS / algorithm / "seed0", local / RUNS / algorithm / "seed0")
    tables = sorted(path.name for path in (local / "paper_artifacts" / NAME).iterdir() if path.is_file())
    assert "table2.csv" in tables and "table2.tex" in tables
    for name in tables:
        assert (on_slurm / "paper_artifacts" / NAME / name).read_bytes() == (local / "paper_artifacts" / NAME / name).read_bytes(), name


def test_refused_failed_and_interrupted_jobs_are_reported_and_nothing_hangs(cluster: Cluster, tmp_path: Path) -> None:
    """Three calls at once, in three folders, each training one run:
    - device=cuda on this cluster without GPUs: the job asks SLURM for a GPU, sbatch refuses, Snakemake
      stops (exit 1) with sbatch's reason;
    - the same without the GPU (`--set-resources train:gpu=0`): the job runs and fails on the node; exit 1,
      and the training log's last line (the reason) is in Snakemake's output;
    - Ctrl-C (SIGINT) once the job has a snapshot: Snakemake cancels the SLURM job, and the same command
      again resumes the run from its snapshot."""
    config = tmp_path / "slurm.yaml"
    config.write_text(yaml.safe_dump(cluster_config()))
    env = dict(cluster.env, CUDA_VISIBLE_DEVICES="")  # no GPU here, nor in the jobs (sbatch --export=ALL)

    def target(algorithm: str) -> str:
        return str(Path("results") / NAME / "stored" / "table2" / "digits_c2_a0.5" / algorithm / "seed0.done")

    settings = [*SLURM_ARGS, "--configfile", str(config), *FAST]
    cuda = [*settings, "--config", "device=cuda"]
    interrupted = tmp_path / "interrupted"
    snapshot = interrupted / RUNS / "fedgmh" / "seed0" / "checkpoint.pt"
    with background(tmp_path / "gpu", env, tmp_path / "gpu.log", target("fedavg"), *cuda) as asks_a_gpu, \
            background(tmp_path / "no_gpu", env, tmp_path / "no_gpu.log", target("fedavg"), *cuda,
                       "--set-resources", "train:gpu=0") as fails, \
            background(interrupted, env, tmp_path / "interrupted.log", target("fedgmh"), *settings) as ctrl_c:
        wait_for(snapshot, ctrl_c)
        jobid = slurm_jobid(ctrl_c, "fedgmh")
        os.kill(child_of(ctrl_c.pid), signal.SIGINT)  # Ctrl-C, once, to snakemake (`timeout` would signal its whole group)
        ctrl_c.wait(timeout=120)
        text = ctrl_c.log.read_text()
        assert ctrl_c.returncode != 0, text[-3000:]
        deadline = time.monotonic() + 60
        while (state := subprocess.run(["squeue", "-h", "--states=all", "-j", jobid, "-o", "%T"], capture_output=True,
                                       text=True, env=env, timeout=30).stdout.strip()) != "CANCELLED":
            assert time.monotonic() < deadline, f"SLURM job {jobid} is {state!r} 60 s after Ctrl-C\n{text[-3000:]}"
            time.sleep(0.5)
        assert snapshot.exists()
        rc, out = run(interrupted, env, target("fedgmh"), *settings)
        assert rc == 0, out[-3000:]
        record = json.loads((interrupted / RUNS / "fedgmh" / "seed0" / "run.json").read_text())
        assert record["resumed_from_round"] >= 1, record["resumed_from_round"]

        asks_a_gpu.wait(timeout=360)
        fails.wait(timeout=360)
    out = asks_a_gpu.log.read_text()
    assert asks_a_gpu.returncode == 1, out[-3000:]
    assert re.search(r"resources: .*gpu=1", out) and "Invalid generic resource (gres) specification" in out, out[-3000:]

    out = fails.log.read_text()
    assert fails.returncode == 1, out[-3000:]
    assert re.search(r"SLURM-job '\d+' failed, SLURM status is: 'FAILED'", out), out[-3000:]
    assert "fedgmh train: error: device 'cuda:auto' requested but CUDA is not available; use --device cpu" in out, out[-3000:]
