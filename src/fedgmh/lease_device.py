"""One call of a prepared GPU lease, on the device (fedgmh.lease prepared it; docs/running.md, "A GPU lease").

    PYTHONPATH=src python3 -m fedgmh.lease_device --call N

Every call keeps what it carried (`.lease/meta`, `.lease/part-NN`) in KEEP, which lasts while the
machine is held. Call 1 starts, in a process session of its own that lives on between calls (as the
runs do), the environment check (every module of fedgmh imports; on CUDA the tests of the vectorised
and batched paths) and then the choice of the levers (fedgmh.lease_levers), on a copy of its tree; a
call that only brings a part returns at once, saying how far they got. The call that brings the last
part joins the data (its checksum compared), waits for the check and the levers, and starts the runs
in a supervisor of their own (a new process session, so that they train on between calls) with the
chosen execution options; the
supervisor corrects the rate on file by the rate it measures after `correct_after_s` (it stops the
last runs when not all would finish, and starts spares when more would), and stops every run still
training at the lease's end (SIGTERM: the round is finished and snapshotted). The last call waits for
that and writes to $OUT: `records.tar.gz` (the finished runs' records, paths below the store's
runs/ folder), `snapshots.tar.NN` (the cut-off runs' snapshots, in pieces the device returns),
`lease.json` (levers, rates, each run's end) and `lease.log`.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import pkgutil
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from fedgmh import lease_data

#: where the device keeps what the calls bring and what the runs make, while the machine is held
KEEP = Path(os.environ.get("FEDGMH_LEASE_KEEP", "/tmp/fedgmh-lease")).resolve()
#: what comes back from a call: files of at most 16 MiB, 8 of them, 64 MiB in all
RETURN_FILE_BYTES, RETURN_FILES, RETURN_BYTES = 16 * 2**20 - 4096, 8, 64 * 2**20 - 2**20
#: the CUDA tests of the paths the runs take (vectorised clients, batched evaluation, grouped runs)
CUDA_TESTS = ("tests/test_vectorised.py", "tests/test_batched_evaluation.py", "tests/test_group.py")
#: the most processes training at once (the device has 16 cores; a GPU run keeps about one busy)
MAX_AT_ONCE = 16
ROUND_LINE = re.compile(r"\] round (\d+)/(\d+) ")


def say(line: str) -> None:
    print(line, flush=True)
    with open(KEEP / "lease.log", "a") as log:
        log.write(f"{time.strftime('%H:%M:%S')} {line}\n")


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())


def write_json(path: Path, value: dict) -> None:
    partial = path.with_suffix(".part")
    partial.write_text(json.dumps(value, indent=1) + "\n")
    partial.replace(path)


# ---------------------------------------------------------------------------------- what calls carry


def keep_carried() -> None:
    """Keep `.lease/meta` and `.lease/part-*` of this call's tree in KEEP (a part already kept stays)."""
    (KEEP / "parts").mkdir(parents=True, exist_ok=True)
    if Path(".lease/meta/lease.json").is_file() and not (KEEP / "meta" / "lease.json").is_file():
        shutil.copytree(".lease/meta", KEEP / "meta", dirs_exist_ok=True)
    for part in sorted(Path(".lease").glob("part-*")):
        if not (KEEP / "parts" / part.name).is_file():
            shutil.copy2(part, KEEP / "parts" / f"{part.name}.copying")
            (KEEP / "parts" / f"{part.name}.copying").rename(KEEP / "parts" / part.name)
    if not (KEEP / "meta" / "lease.json").is_file():
        raise SystemExit("lease: no .lease/meta here or kept from an earlier call: call 1 carries it (fedgmh lease prepare)")


def join_data(lease: dict, work: Path) -> None:
    """The dataset files from the kept parts, checked whole against the prepared checksum, their images
    decoded (`fedgmh.lease_data`, each array checked against its sha256)."""
    parts = [KEEP / "parts" / f"part-{index:02d}" for index in range(lease["parts"])]
    missing = [p.name for p in parts if not p.is_file()]
    if missing:
        raise SystemExit(f"lease: data part(s) {', '.join(missing)} not here: carry them in their calls")
    digest = hashlib.sha256()
    joined = KEEP / "data.tar.xz"
    with open(joined, "wb") as out:
        for part in parts:
            data = part.read_bytes()
            digest.update(data)
            out.write(data)
    if digest.hexdigest() != lease["data_sha256"]:
        raise SystemExit("lease: the joined data parts do not match their checksum: one was damaged on the way")
    if lease["parts"]:
        with tarfile.open(joined, "r:xz") as archive:
            archive.extractall(work, filter="data")
            travelled = [work / name for name in archive.getnames() if name.endswith(lease_data.SUFFIX)]
        for path in travelled:
            try:
                lease_data.decode_file(path, path.with_name(path.name[: -len(lease_data.SUFFIX)]))
            except ValueError as err:
                raise SystemExit(f"lease: {err}") from err
            path.unlink()
    joined.unlink()


# ------------------------------------------------------------------------------------------ check


def engine_hash(root: Path = Path("src/fedgmh")) -> str:
    """sha256 of the engine's and the model's source: the levers' choice holds while it is unchanged."""
    digest = hashlib.sha256()
    for path in sorted([*(root / "engine").glob("*.py"), root / "model.py"]):
        digest.update(f"{path.relative_to(root)}\0".encode() + path.read_bytes() + b"\0")
    return digest.hexdigest()


def check_environment(lease: dict, seconds: float) -> list[str]:
    """Problems that would make every run fail: a module of fedgmh that does not import (e.g. a package
    the image lacks), runs on CUDA without CUDA, a CUDA test of the runs' paths that fails."""
    import fedgmh

    problems = []
    for module in pkgutil.walk_packages(fedgmh.__path__, "fedgmh."):
        if module.name in ("fedgmh.lease_device", "fedgmh.__main__"):
            continue
        try:
            importlib.import_module(module.name)
        except Exception as err:  # noqa: BLE001 - each one is a line of the check
            problems.append(f"import {module.name}: {type(err).__name__}: {err}")
    import torch

    wants_cuda = any("--device" in r["words"] and r["words"][r["words"].index("--device") + 1].startswith("cuda") for r in lease["runs"])
    if wants_cuda and not torch.cuda.is_available():
        problems.append("the runs train on CUDA, and torch here sees no CUDA device")
    if torch.cuda.is_available():
        try:
            done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-o", "addopts=",
                                   "-k", "cuda", *CUDA_TESTS], capture_output=True, text=True, timeout=seconds)
            with open(KEEP / "lease.log", "a") as log:
                log.write(done.stdout[-4000:] + done.stderr[-2000:])
            if done.returncode != 0:
                problems.append(f"the CUDA tests failed: {done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-200:]}")
        except subprocess.TimeoutExpired:  # slow, not broken: the runs start; the lease's log says so
            say(f"check: the CUDA tests did not end within {seconds:.0f} s; training starts without their verdict")
    return problems


def device_name() -> str:
    import torch

    return torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"


def choose_levers(lease: dict, seconds: float) -> dict:
    """The execution options the runs start with: benchmarks/levers.json's choice when it was measured
    on this device with this engine, else measured now (fedgmh.lease_levers)."""
    device = device_name()
    current = engine_hash()
    recorded = Path("benchmarks/levers.json")
    if recorded.is_file():
        known = read_json(recorded)
        if known.get("engine") == current and known.get("device") == device:
            say(f"levers: {known['choice']} as measured on {known.get('date')} (same engine {current[:12]}, same device): not measured again")
            return {**known, "measured": False}
    if seconds <= 0:
        say("levers: not measured (no time for it in the lease's clock); the default options")
        return {"engine": current, "device": device, "choice": {}, "measured": False}
    from fedgmh.lease_levers import measure

    rates = measure(lease["runs"][0], KEEP / "meta" / "files", seconds)
    choice = max(rates, key=lambda name: rates[name]["rounds_per_s"])
    say("levers: " + ", ".join(f"{name} {r['rounds_per_s']:.2f} rounds/s" for name, r in rates.items()) + f"; chosen: {choice}")
    return {"engine": current, "device": device, "date": time.strftime("%Y-%m-%d"), "rates": rates,
            "choice": rates[choice]["options"], "measured": True}


def start_readiness() -> None:
    """The check and the levers, in the background, on a copy of this call's tree (the next call's tree
    may replace this one while they run); once: a later call 1 (a retry) finds them started."""
    if (KEEP / "ready.started").exists():
        return
    tree = KEEP / "check"
    shutil.rmtree(tree, ignore_errors=True)
    shutil.copytree(".", tree, ignore=shutil.ignore_patterns(".lease", ".git", "__pycache__", "results", "paper_artifacts"))
    began = time.time()
    child = subprocess.Popen([sys.executable, "-m", "fedgmh.lease_device", "--ready"], cwd=tree, env=dict(os.environ, PYTHONPATH=str(tree / "src")),
                             stdin=subprocess.DEVNULL, stdout=open(KEEP / "ready.log", "ab"), stderr=subprocess.STDOUT,
                             start_new_session=True)
    write_json(KEEP / "ready.started", {"at": began, "pid": child.pid})


def alive(pid: int) -> bool:
    """Whether process `pid` still runs (a zombie, ended but not yet reaped, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        return not Path("/proc").is_dir()  # no /proc: a signal is all there is to ask


def get_ready() -> int:
    """The background step of call 1: the check, then the levers; ends in KEEP/ready or KEEP/failed
    whatever breaks (a call waits on it)."""
    try:
        return _check_then_levers()
    except BaseException as err:
        say(f"check: {type(err).__name__}: {err}")
        (KEEP / "failed").touch()
        return 1


def _check_then_levers() -> int:
    lease = read_json(KEEP / "meta" / "lease.json")
    problems = check_environment(lease, lease["clock"]["check_s"])
    if problems:
        for line in problems:
            say(f"check: {line}")
        (KEEP / "failed").touch()
        return 1
    say("check: every module imports; no CUDA test failed (none run without CUDA)")
    try:
        levers = choose_levers(lease, lease["clock"]["levers_s"])
    except Exception as err:  # noqa: BLE001 - a measurement that breaks costs the levers, not the lease
        say(f"levers: not measured ({type(err).__name__}: {err}); the default options")
        levers = {"engine": engine_hash(), "device": device_name(), "choice": {}, "measured": False}
    write_json(KEEP / "levers.json", levers)
    (KEEP / "ready").touch()
    return 0


def readiness() -> str:
    """Where the check and the levers stand, in one line (their own lines are in lease.log)."""
    if (KEEP / "failed").exists():
        return "failed"
    if (KEEP / "ready").exists():
        return "done"
    if (KEEP / "ready.started").exists():
        started = read_json(KEEP / "ready.started")
        if not alive(started["pid"]) and not (KEEP / "ready").exists():  # a marker may land as it ends
            return "ended without a verdict (ready.log)"
        return f"running for {time.time() - started['at']:.0f} s"
    return "not started (call 1 starts them)"


def wait_until_ready(until: float) -> bool:
    """Wait for the check and the levers; False (and KEEP/failed: no later call waits again) unless done."""
    while time.time() < until and readiness().startswith("running"):
        time.sleep(0.5)
    if readiness() == "done":
        return True
    say(f"check and levers: {readiness()}")
    (KEEP / "failed").touch()
    return False


# ------------------------------------------------------------------------------------- supervisor


def rounds_played(log: Path) -> int:
    """Rounds a run's log shows played in this lease (its progress lines' first to last round)."""
    try:
        numbers = [int(m.group(1)) for m in ROUND_LINE.finditer(log.read_text(errors="replace"))]
    except OSError:
        return 0
    return numbers[-1] - numbers[0] + 1 if numbers else 0


def fits(runs: list[dict], rate: float, seconds_left: float, work: Path) -> bool:
    """Whether `runs` (running or to start) finish in `seconds_left` at `rate` rounds/s in all."""
    return sum(r["rounds"] - rounds_played(work / r["log"]) for r in runs) <= rate * seconds_left


class Supervisor:
    """Keeps the chosen runs training, at most MAX_AT_ONCE at a time, until they end or the lease does."""

    def __init__(self, lease: dict, options: dict, work: Path, deadline: float) -> None:
        self.lease, self.work, self.deadline = lease, work, deadline
        self.extra = [f"--set={k}={v}" for k, v in sorted(options.items())]
        self.started_at = time.time()
        self.runs = {r["name"]: {**r, "state": "waiting" if not r["spare"] else "spare"} for r in lease["runs"]}
        self.processes: dict[str, subprocess.Popen] = {}
        self.corrected = False

    def save(self) -> None:
        write_json(KEEP / "state.json", {"runs": {n: {k: r.get(k) for k in ("state", "rounds", "log", "run_dir", "record")}
                                                  for n, r in self.runs.items()},
                                         "measured_rate": getattr(self, "measured_rate", None), "started_at": self.started_at})

    def start(self, name: str) -> None:
        run = self.runs[name]
        (self.work / run["log"]).parent.mkdir(parents=True, exist_ok=True)
        (self.work / run["run_dir"]).parent.mkdir(parents=True, exist_ok=True)  # runs started together share parents
        env = dict(os.environ, PYTHONPATH=str(self.work / "src"), PYTHONUNBUFFERED="1")
        with open(self.work / run["log"], "ab") as log:
            self.processes[name] = subprocess.Popen([sys.executable, "-m", "fedgmh.cli", "train", *run["words"], *self.extra],
                                                    cwd=self.work, env=env, stdout=log, stderr=subprocess.STDOUT,
                                                    stdin=subprocess.DEVNULL, start_new_session=True)
        run["state"] = "running"

    def reap(self) -> None:
        for name, process in list(self.processes.items()):
            if process.poll() is not None:
                run = self.runs[name]
                if process.returncode == 0 and (self.work / run["record"]).is_file():
                    run["state"] = "finished"
                elif run["state"] == "stopping":  # SIGTERM: the round is finished and snapshotted, if one was played
                    run["state"] = "cut off" if (self.work / run["run_dir"] / "checkpoint.pt").is_file() else "not started"
                else:
                    run["state"] = "failed"
                del self.processes[name]

    def stop(self, name: str) -> None:
        if name in self.processes:
            os.killpg(self.processes[name].pid, signal.SIGTERM)
            self.runs[name]["state"] = "stopping"

    def correct(self) -> bool:
        """After the first minute: the rate measured replaces the rate on file."""
        elapsed = time.time() - self.started_at
        played = sum(rounds_played(self.work / r["log"]) for r in self.runs.values() if r["state"] in ("running", "finished"))
        if played < len(self.processes):  # not every run has played a round yet: measured later
            return False
        self.measured_rate = rate = played / elapsed
        left = self.deadline - time.time()
        active = [r for r in self.runs.values() if r["state"] in ("running", "waiting")]
        while len(active) > 1 and not fits(active, rate, left, self.work):
            last = active.pop()
            if last["state"] == "running":
                self.stop(last["name"])
            else:
                last["state"] = "not started"
        spares = [r for r in self.runs.values() if r["state"] == "spare"]
        while spares and fits([*active, spares[0]], rate, left, self.work):
            spares[0]["state"] = "waiting"
            active.append(spares.pop(0))
        say(f"rate measured after {elapsed:.0f} s: {rate:.2f} rounds/s (on file: {self.lease['rate']['rate']:.2f}); "
            f"{len(active)} runs kept to finish in the {left:.0f} s left")
        return True

    def loop(self) -> None:
        while True:
            self.reap()
            now = time.time()
            if now >= self.deadline or (KEEP / "stop").exists():
                break
            if not self.corrected and now - self.started_at >= self.lease["clock"]["correct_after_s"]:
                self.corrected = self.correct()
            waiting = [n for n, r in self.runs.items() if r["state"] == "waiting"]
            for name in waiting[: max(0, MAX_AT_ONCE - len(self.processes))]:
                self.start(name)
            self.save()
            if not self.processes and not waiting:
                break
            time.sleep(1)
        for name in list(self.processes):
            self.stop(name)
        end = time.time() + self.lease["clock"]["stop_s"] - 15
        while self.processes and time.time() < end:
            self.reap()
            time.sleep(0.5)
        for name, process in self.processes.items():
            os.killpg(process.pid, signal.SIGKILL)
            self.runs[name]["state"] = "killed"
        self.processes.clear()
        self.save()
        (KEEP / "ended").touch()


def start_supervisor(lease: dict, levers: dict, work: Path, deadline: float) -> None:
    write_json(KEEP / "levers.json", levers)
    subprocess.Popen([sys.executable, "-m", "fedgmh.lease_device", "--supervise", str(deadline)], cwd=work,
                     env=dict(os.environ, PYTHONPATH=str(work / "src")), stdin=subprocess.DEVNULL,
                     stdout=open(KEEP / "supervisor.log", "ab"), stderr=subprocess.STDOUT, start_new_session=True)


# ----------------------------------------------------------------------------------- the way back


def pack(lease: dict, work: Path, out: Path) -> None:
    """Records, snapshots that fit what a call returns, and the lease's account, into `out`."""
    state = read_json(KEEP / "state.json")["runs"] if (KEEP / "state.json").is_file() else {}
    finished = [n for n, r in state.items() if r["state"] == "finished"]
    runs_root = f"paper_artifacts/{lease['name']}/runs"
    if finished:
        with tarfile.open(out / "records.tar.gz", "w:gz") as archive:
            for name in finished:
                folder = work / Path(state[name]["record"]).parent
                for path in sorted(folder.iterdir()):
                    if path.name == "run.json" or path.suffix == ".csv":
                        archive.add(path, arcname=str(path.relative_to(work / runs_root)))
    used = sum(p.stat().st_size for p in out.iterdir())
    room = min(RETURN_BYTES - used - 2**20, (RETURN_FILES - 3 - len(list(out.iterdir()))) * RETURN_FILE_BYTES)
    kept, lost, size = [], [], 0
    for name, run in state.items():
        snapshot = work / run["run_dir"] / "checkpoint.pt"
        if run["state"] != "finished" and snapshot.is_file():
            if size + snapshot.stat().st_size + 4096 <= room:
                kept.append(snapshot)
                size += snapshot.stat().st_size + 4096
            else:
                lost.append(f"{name} ({snapshot.stat().st_size / 2**20:.1f} MiB)")
    if kept:
        whole = KEEP / "snapshots.tar"
        with tarfile.open(whole, "w") as archive:
            for snapshot in kept:
                archive.add(snapshot, arcname=str(snapshot.relative_to(work)))
        with open(whole, "rb") as source:
            for index in range(RETURN_FILES):
                piece = source.read(RETURN_FILE_BYTES)
                if not piece:
                    break
                (out / f"snapshots.tar.{index:02d}").write_bytes(piece)
        whole.unlink()
    ends = ", ".join(f"{name} {run['state']}" for name, run in state.items())
    for line in [f"runs: {ends}",
                 f"records back: {len(finished)}; snapshots back: {len(kept)}"] + ([f"snapshots too large to come back: {', '.join(lost)}"] if lost else []):
        say(line)
    levers = read_json(KEEP / "levers.json") if (KEEP / "levers.json").is_file() else {}
    measured = read_json(KEEP / "state.json").get("measured_rate") if (KEEP / "state.json").is_file() else None
    write_json(out / "lease.json", {"levers": levers, "measured_rate": measured, "rate_on_file": lease["rate"],
                                    "runs": {n: r["state"] for n, r in state.items()}, "dataset": lease["runs"][0]["dataset"]})
    shutil.copy2(KEEP / "lease.log", out / "lease.log")


# ------------------------------------------------------------------------------------------ a call


def wait_for_runs(until: float) -> None:
    while time.time() < until and not (KEEP / "ended").exists():
        time.sleep(1)


def failed(out: Path) -> int:
    """The check failed (or never ended): nothing trains; its lines come back in lease.log."""
    say("lease: the environment check failed or did not end; nothing trains (lease.log)")
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy2(KEEP / "lease.log", out / "lease.log")
    return 1


def call(number: int, out: Path) -> int:
    began = time.time()
    keep_carried()
    lease = read_json(KEEP / "meta" / "lease.json")
    if not 1 <= number <= len(lease["calls"]):
        raise SystemExit(f"lease: --call {number}: this lease has calls 1 to {len(lease['calls'])}")
    this, clock = lease["calls"][number - 1], lease["clock"]
    ends = began + this["seconds"] - 10
    work = KEEP / "work"
    say(f"call {number} of {len(lease['calls'])}: parts here {len(list((KEEP / 'parts').glob('part-??')))} of {lease['parts']}")
    if number == 1:
        start_readiness()
    if this["starts"] and not (KEEP / "started").exists():
        work.mkdir(parents=True, exist_ok=True)
        join_data(lease, work)  # while the check and the levers run
        shutil.copytree(KEEP / "meta" / "files", work, dirs_exist_ok=True)
        shutil.copytree("src", work / "src", dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
        if not wait_until_ready(ends - clock["stop_s"]):
            return failed(out)
        print((KEEP / "ready.log").read_text().rstrip(), flush=True)  # the check's and the levers' lines
        if shutil.which("nvidia-cuda-mps-control"):
            subprocess.run(["nvidia-cuda-mps-control", "-d"], check=False)
        start_supervisor(lease, read_json(KEEP / "levers.json"), work, began + this["stop_after_s"])
        (KEEP / "started").touch()
        say(f"started: {sum(not r['spare'] for r in lease['runs'])} runs (and {sum(r['spare'] for r in lease['runs'])} spares) "
            f"with {read_json(KEEP / 'levers.json')['choice'] or 'the default options'}")
    if readiness().startswith("ended"):  # the background step died without a verdict
        (KEEP / "failed").touch()
    if (KEEP / "failed").exists():
        return failed(out)
    if not (KEEP / "levers.json").exists():
        say(f"check and levers: {readiness()}")
    if (KEEP / "started").exists():
        if this["last"]:
            wait_for_runs(ends - clock["stop_s"])
            (KEEP / "stop").touch()
            wait_for_runs(ends)
            out.mkdir(parents=True, exist_ok=True)
            pack(lease, work, out)
        else:
            wait_for_runs(ends)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--call", type=int, help="this call's number (calls.txt)")
    parser.add_argument("--supervise", type=float, help=argparse.SUPPRESS)  # the supervisor: its deadline
    parser.add_argument("--ready", action="store_true", help=argparse.SUPPRESS)  # call 1's background check and levers
    args = parser.parse_args(argv)
    if args.ready:
        return get_ready()
    if args.supervise is not None:
        lease = read_json(KEEP / "meta" / "lease.json")
        Supervisor(lease, read_json(KEEP / "levers.json")["choice"], Path.cwd(), args.supervise).loop()
        return 0
    if args.call is None:
        parser.error("--call N is required")
    return call(args.call, Path(os.environ.get("OUT", KEEP / "out")))


if __name__ == "__main__":
    sys.exit(main())
