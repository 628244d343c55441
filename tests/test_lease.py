"""A GPU lease, rehearsed on the CPU: `fedgmh lease prepare` here, its calls on a stand-in for the device
(a fresh copy of the tree each call, what the call carries, the device's limits), `fedgmh lease
collect` back here; and the checks of prepare's input. Also `fedgmh plan --commands`."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fedgmh.campaign import load_campaign
from fedgmh.lease import MIB, QUICK_S, Clock, lease_overrides, schedule, tree_bytes
from fedgmh.lease_device import MAX_AT_ONCE

REPO = Path(__file__).resolve().parents[1]
RUNS = ["table2/digits_c2_a0.5/fedavg/seed0", "table2/digits_c2_a0.5/fedgmh/seed0"]
#: the device's limits (/work/.library/device/README.md)
CARRY_LIMIT, CALL_LIMIT_S, BACK_FILES, BACK_FILE, BACK_ALL = 64 * MIB, 600, 8, 16 * MIB, 64 * MIB


def _checkout(tmp_path: Path, rounds: int = 3, rate: float = 1.0) -> Path:
    """A git checkout of the repository's workflow, configs and code, with a 3-round digits config."""
    root = tmp_path / "repo"
    root.mkdir()
    for name in ("Snakefile", "workflow", "config", "reference", "src", ".gitignore"):
        source = REPO / name
        (shutil.copytree if source.is_dir() else shutil.copy)(source, root / name, **(
            {"ignore": shutil.ignore_patterns("__pycache__", "*.egg-info")} if source.is_dir() else {}))
    (root / "profiles").symlink_to("workflow/profiles")
    config = yaml.safe_load((REPO / "config" / "smoke.yaml").read_text())
    config.update(name="lease", rounds=rounds, figures={}, uploads_to_target=None, layer_weights=None, rounds_to_target=None,
                  official_reading={})
    config["experiments"] = {"table2": {**config["experiments"]["table2"], "algorithms": ["fedavg", "fedgmh"], "seeds": [0, 1]}}
    (root / "config" / "lease.yaml").write_text(yaml.safe_dump(config))
    (root / "config" / "lease_campaign.yaml").write_text(yaml.safe_dump({"config": "config/lease.yaml",
                                                                        "groups": [{"title": "digits", "runs": RUNS}]}))
    (root / "benchmarks").mkdir()
    (root / "benchmarks" / "gpu_throughput.csv").write_text(
        "date,device,dataset,setting,runs_at_once,rounds_per_s,useful_share,levers,source\n"
        f"2026-12-01,a stand-in,digits,a made-up rate for the rehearsal,2,{rate},,none,tests/test_lease.py\n")
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    return root


def _env(**extra: str) -> dict:
    return dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}", **extra)


def _fedgmh(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fedgmh.cli", *args], cwd=root, capture_output=True, text=True,
                          env=_env(PYTHONPATH=str(REPO / "src")))


def _device(root: Path, scratch: Path, number: int, carry: list[str], command: str, timeout_s: int, rc: int = 0,
            attempt: str = "") -> tuple[str, Path]:
    """The device tool, stood in for: the call is refused over the carry or time limit; the tree (git's
    tracked and untracked, not ignored files) and the carried paths are copied fresh; the command runs
    there with $OUT; KEEP lasts from call to call as the machine's /tmp does; what comes back is checked."""
    assert timeout_s <= CALL_LIMIT_S, f"call {number}: timeout_s {timeout_s} over the device's {CALL_LIMIT_S} s"
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                            capture_output=True, check=True).stdout.decode().split("\0")
    carried = [p for c in carry for p in ([root / c] if (root / c).is_file() else (root / c).rglob("*")) if p.is_file()]
    size = tree_bytes(root) + sum(p.stat().st_size for p in carried)
    assert size <= CARRY_LIMIT, f"call {number} carries {size / MIB:.1f} MiB, over the device's 64 MiB"
    there = scratch / f"call{number}{attempt}"
    for path in [root / name for name in listed if name] + carried:
        if path.is_file():
            (there / path.relative_to(root)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, there / path.relative_to(root))
    out = scratch / f"out{number}{attempt}"
    out.mkdir()
    env = _env(OUT=str(out), FEDGMH_LEASE_KEEP=str(scratch / "keep"))
    if os.environ.get(DEVICE_PYTHON):  # the device image's stack, e.g. a venv of its torch and numpy
        env["PATH"] = f"{Path(os.environ[DEVICE_PYTHON]).parent}{os.pathsep}{env['PATH']}"
    done = subprocess.run(["bash", "-c", command], cwd=there, capture_output=True, text=True, timeout=timeout_s, env=env)
    assert done.returncode == rc, done.stdout + done.stderr
    back = list(out.rglob("*"))
    assert len(back) <= BACK_FILES and all(p.stat().st_size <= BACK_FILE for p in back)
    assert sum(p.stat().st_size for p in back) <= BACK_ALL
    return done.stdout, out


#: a python3 for the stand-in's calls instead of this one (the lease's own `python3`)
DEVICE_PYTHON = "FEDGMH_REHEARSAL_PYTHON3"

CALL = re.compile(r"call (\d+) \(.*\): carry (.*); timeout_s (\d+); command: (.*)")


CLOCK = ["--clock", "lease_s=400", "start_s=0", "gap_s=0", "transfer_s=0", "check_s=20", "levers_s=4", "launch_s=5",
         "stop_s=30", "correct_after_s=10"]


def _lease(root: Path, tmp_path: Path, *extra: str) -> tuple[list[str], Path]:
    """Prepare a lease of RUNS and make its calls on the stand-in: each call's output, the last one's files."""
    prepared = _fedgmh(root, "lease", "prepare", "--file", "config/lease_campaign.yaml", "--config", "device=cpu", *CLOCK, *extra)
    assert prepared.returncode == 0, prepared.stderr
    calls = [CALL.fullmatch(line).groups() for line in (root / ".lease" / "calls.txt").read_text().splitlines()]
    assert 1 <= len(calls) <= 3 and calls[0][1].split()[0] == ".lease/meta"
    lease = json.loads((root / ".lease" / "meta" / "lease.json").read_text())
    assert [r["name"] for r in lease["runs"]] == RUNS[: len(lease["runs"])]  # the campaign's order
    said = []
    for number, carry, timeout_s, command in calls:
        output, out = _device(root, tmp_path / "device", int(number), carry.split(), command, int(timeout_s))
        said.append(output)
    return said, out


def _merged(root: Path, out: Path) -> None:
    """What the last call brought back merges here: records into the store, snapshots resumable."""
    back = json.loads((out / "lease.json").read_text())
    ends = back["runs"]
    assert set(ends.values()) <= {"finished", "cut off", "not started", "spare"}, ends  # none failed or was killed
    assert back["levers"]["choice"] in [{}, {"memory_format": "channels_last"}, {"conv": "unfold"},
                                        {"memory_format": "channels_last", "conv": "unfold"}]
    collected = _fedgmh(root, "lease", "collect", str(out), "--into", "paper_artifacts/lease/runs")
    assert collected.returncode == 0, collected.stderr
    finished = [name for name, end in ends.items() if end == "finished"]
    assert f"records: {len(finished)} added, 0 already present, 0 conflict(s), 0 invalid" in collected.stdout, collected.stdout
    for name in finished:
        assert (root / "paper_artifacts" / "lease" / "runs" / name / "run.json").is_file()
    for name in (name for name, end in ends.items() if end == "cut off"):  # cut off: resumable here
        assert (root / "results" / "lease" / "runs" / name / "checkpoint.pt").is_file()
    assert json.loads((root / "benchmarks" / "levers.json").read_text())["device"] == "cpu"
    if back["measured_rate"]:  # measured once every run had played a round: the rate goes on file
        assert (root / "benchmarks" / "gpu_throughput.csv").read_text().splitlines()[-1].endswith("fedgmh lease collect")


def test_a_prepared_lease_runs_end_to_end_on_a_stand_in_device_and_its_records_merge(tmp_path: Path) -> None:
    root = _checkout(tmp_path)
    said, out = _lease(root, tmp_path)
    said = "".join(said)
    assert "check: every module imports; no CUDA test failed" in said and "levers: " in said and "started: " in said, said
    _merged(root, out)


def test_the_check_and_the_levers_run_while_the_other_parts_travel(tmp_path: Path) -> None:
    """Data in two parts (calls made small): call 1 brings the first, starts the check and the levers in
    the background and returns at once; call 2 brings the last part, waits for them and starts the runs."""
    root = _checkout(tmp_path)
    assert _fedgmh(root, "lease", "prepare", "--file", "config/lease_campaign.yaml", "--config", "device=cpu", *CLOCK).returncode == 0
    data = next((root / ".lease" / "cache").glob("data-*.tar.xz")).stat().st_size
    meta = sum(p.stat().st_size for p in (root / ".lease" / "meta" / "files").rglob("*") if p.is_file())
    call_mib = (tree_bytes(root) + meta + 0.6 * data) / MIB  # the first call has room for 60 % of the data
    said, out = _lease(root, tmp_path, "--call-mib", f"{call_mib:.6f}", "--clock", "transfer_s=20")  # slack for a busy machine
    lease = json.loads((root / ".lease" / "meta" / "lease.json").read_text())
    assert lease["parts"] == 2 and [c["starts"] for c in lease["calls"]][:2] == [False, True]
    assert "check and levers: running for" in said[0] and "started: " not in said[0], said[0]
    assert "check: every module imports; no CUDA test failed" in said[1] and "levers: " in said[1] and "started: " in said[1], said[1]
    _merged(root, out)


def test_a_run_the_lease_cannot_finish_comes_back_as_a_snapshot_the_campaign_resumes(tmp_path: Path) -> None:
    """A run far too long for the lease (5000 rounds), expected to finish by a made-up rate: the device
    stops it at the lease's end, its snapshot comes back, and here the campaign sees it cut off."""
    root = _checkout(tmp_path, rounds=5000, rate=1000.0)
    prepared = _fedgmh(root, "lease", "prepare", "--file", "config/lease_campaign.yaml", "--config", "device=cpu",
                       "--clock", "lease_s=110", "start_s=0", "gap_s=0", "transfer_s=0", "check_s=20", "levers_s=0",
                       "launch_s=5", "stop_s=30", "correct_after_s=5")
    assert prepared.returncode == 0, prepared.stderr
    (number, carry, timeout_s, command), = [CALL.fullmatch(line).groups() for line in (root / ".lease" / "calls.txt").read_text().splitlines()]
    _, out = _device(root, tmp_path / "device", int(number), carry.split(), command, int(timeout_s))
    ends = json.loads((out / "lease.json").read_text())["runs"]
    # the first stopped at the lease's end; the second too, or earlier when the rate measured said it would not finish
    assert ends[RUNS[0]] == "cut off" and ends[RUNS[1]] in ("cut off", "not started", "spare"), ends
    collected = _fedgmh(root, "lease", "collect", str(out), "--into", "paper_artifacts/lease/runs")
    assert collected.returncode == 0 and "records: " not in collected.stdout, collected.stdout + collected.stderr
    status = _fedgmh(root, "campaign", "status", "--file", "config/lease_campaign.yaml", "--config", "device=cpu")
    for name in (name for name, end in ends.items() if end == "cut off"):
        assert (root / "results" / "lease" / "runs" / name / "checkpoint.pt").is_file()
        assert re.search(rf"{re.escape(name)}.*cut off", status.stdout), status.stdout + status.stderr


def test_the_check_names_a_module_that_does_not_import_on_the_device(tmp_path: Path) -> None:
    """A machine without a package fedgmh's modules import (here scipy) fails call 1's check, naming the
    module. (A filelock without `lock_descriptor` no longer does: tests/test_locks.py.)"""
    probe = ("import sys; sys.modules['scipy'] = None; from fedgmh import lease_device; "
             "print(lease_device.check_environment({'runs': []}, 5))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True,
                          env=_env(PYTHONPATH=str(REPO / "src"), FEDGMH_LEASE_KEEP=str(tmp_path)))
    assert done.returncode == 0, done.stderr
    assert "import fedgmh.report.verdicts: ModuleNotFoundError: import of scipy halted" in done.stdout, done.stdout


def test_the_calls_fit_the_lease_and_the_device(tmp_path: Path) -> None:
    clock = Clock()
    for parts in (0, 1, 2, 3):
        calls, training = schedule(parts, clock)
        assert 1 <= len(calls) <= 3 and training > 0
        assert all(call["seconds"] <= clock.call_limit_s for call in calls)
        assert clock.start_s + sum(call["seconds"] for call in calls) + clock.gap_s * (len(calls) - 1) <= clock.lease_s
        assert [call["part"] for call in calls if call["part"] is not None] == list(range(parts))
        assert sum(call["starts"] for call in calls) == 1 and calls[-1]["last"]
    with pytest.raises(Exception, match="need 4 calls to travel, more than a lease's 3"):
        schedule(4, clock)
    with pytest.raises(Exception, match="no time to train"):
        schedule(1, Clock(lease_s=200))


def test_the_tree_may_grow_to_the_size_prepare_names_and_no_further(tmp_path: Path) -> None:
    """Calls sized so that the data fill three of them once the tree has grown by 4 KiB: prepare names
    that limit and goes on; 8 KiB more of tree and the data would need a fourth call, which it refuses."""
    root = _checkout(tmp_path)
    words = ["lease", "prepare", "--file", "config/lease_campaign.yaml", "--config", "device=cpu", *CLOCK]
    assert _fedgmh(root, *words).returncode == 0
    data = next((root / ".lease" / "cache").glob("data-*.tar.xz")).stat().st_size
    meta = sum(p.stat().st_size for p in (root / ".lease" / "meta" / "files").rglob("*") if p.is_file())
    limit = tree_bytes(root) + 4096
    call_mib = (limit + (data + meta) / 3) / MIB
    named = _fedgmh(root, *words, "--call-mib", f"{call_mib:.9f}")
    assert named.returncode == 0, named.stderr
    assert f"while it stays under {limit / MIB:.1f} MiB" in named.stdout, named.stdout
    assert json.loads((root / ".lease" / "meta" / "lease.json").read_text())["parts"] == 3
    (root / "grown.bin").write_bytes(b"\0" * 8192)  # untracked, not ignored: it travels with the tree
    refused = _fedgmh(root, *words, "--call-mib", f"{call_mib:.9f}")
    assert refused.returncode == 2 and "need 4 calls to travel, more than a lease's 3" in refused.stderr, refused.stderr


def test_the_check_and_the_levers_cost_no_training_while_parts_still_travel() -> None:
    """They run in the background from call 1: with three parts, a longer measurement that still ends
    before the last part has come and been joined leaves the training time as it was; with the data in
    one call, the runs wait for it."""
    quick, slow = Clock(levers_s=10), Clock(levers_s=60)
    assert schedule(3, slow)[1] == schedule(3, quick)[1]
    assert schedule(1, slow)[1] == schedule(1, quick)[1] - 50
    assert [call["seconds"] for call in schedule(3, slow)[0]][:2] == [slow.transfer_s + QUICK_S] * 2


def test_a_failed_check_trains_nothing_and_every_later_call_says_so(tmp_path: Path) -> None:
    """A module that does not import on the device: the background check fails, the call that would start
    the runs returns 1 with the check's line, and so does the next call, at once."""
    root = _checkout(tmp_path)
    (root / "src" / "fedgmh" / "broken_here.py").write_text('raise ImportError("not on this machine")\n')
    prepared = _fedgmh(root, "lease", "prepare", "--file", "config/lease_campaign.yaml", "--config", "device=cpu", *CLOCK)
    assert prepared.returncode == 0, prepared.stderr
    calls = [CALL.fullmatch(line).groups() for line in (root / ".lease" / "calls.txt").read_text().splitlines()]
    said = [_device(root, tmp_path / "device", int(number), carry.split(), command, int(timeout_s), rc=1)[0]
            for number, carry, timeout_s, command in calls]
    number, carry, timeout_s, command = calls[-1]  # the last call again, as after a broken transfer
    said.append(_device(root, tmp_path / "device", int(number), carry.split(), command, int(timeout_s), rc=1, attempt="b")[0])
    for output in said:
        assert "nothing trains" in output and "started: " not in output, output
    assert "check: import fedgmh.broken_here: ImportError: not on this machine" in (tmp_path / "device" / "out1" / "lease.log").read_text()
    assert not (tmp_path / "device" / "keep" / "state.json").exists()


@pytest.mark.parametrize(("words", "error"), [
    (["--file", "config/nothing.yaml"], "campaign file config/nothing.yaml not found"),
    (["--clock", "lease=900"], "--clock lease=900: expected KEY=SECONDS with KEY one of"),
    (["--clock", "lease_s=ten"], "--clock lease_s=ten: 'ten' is not a whole number of seconds"),
    (["--clock", "start_s=-1"], "lease clock: start_s must be a whole number of seconds >= 0, not -1"),
    (["--rates", "benchmarks/none.csv"], "no GPU rate on file for digits (benchmarks/none.csv)"),
])
def test_prepare_refuses_bad_input_in_one_line_before_it_removes_anything(tmp_path: Path, words: list[str], error: str) -> None:
    root = _checkout(tmp_path)
    earlier = root / ".lease" / "meta" / "lease.json"
    earlier.parent.mkdir(parents=True)
    earlier.write_text("{}")
    done = _fedgmh(root, "lease", "prepare", "--file", "config/lease_campaign.yaml", "--config", "device=cpu", *words)
    assert done.returncode == 2 and error in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert earlier.read_text() == "{}"  # the earlier lease is still there


def test_collect_refuses_what_is_not_a_lease_brought_back(tmp_path: Path) -> None:
    (tmp_path / "back").mkdir()
    done = _fedgmh(tmp_path, "lease", "collect", str(tmp_path / "back"))
    assert done.returncode == 2 and "lease.json not found: give the folder the lease's last call brought back" in done.stderr
    (tmp_path / "back" / "lease.json").write_text(json.dumps({"dataset": "digits", "runs": {}}))
    (tmp_path / "back" / "records.tar.gz").write_bytes(b"not an archive")
    done = _fedgmh(tmp_path, "lease", "collect", str(tmp_path / "back"))
    assert done.returncode == 2 and "records.tar.gz cannot be read" in done.stderr, done.stderr


#: a lease.json as fedgmh.lease_device.pack writes it, levers measured
BROUGHT_BACK = {"levers": {"engine": "e" * 64, "device": "a stand-in", "date": "2026-12-08", "choice": {"conv": "unfold"},
                           "rates": {"unfold": {"options": {"conv": "unfold"}, "rounds_per_s": 3.0}}, "measured": True},
                "measured_rate": 2.5, "rate_on_file": {"rate": 1.0}, "runs": {RUNS[0]: "finished", RUNS[1]: "spare"},
                "dataset": "digits"}
LEVERS_BEFORE, RATES_BEFORE = '{"device": "before"}\n', "date,device,dataset,setting,runs_at_once,rounds_per_s,useful_share,levers,source\n"


def _brought_back(tmp_path: Path, lease: object, snapshots: bytes | None = None) -> tuple[Path, Path]:
    """A repository root with benchmarks/ and a folder brought back: `lease` as its lease.json (Infinity and
    NaN as JSON spells them), a records archive and a snapshot piece (`snapshots`, else a whole one)."""
    import io
    import tarfile

    root, back = tmp_path / "repo", tmp_path / "back"
    (root / "benchmarks").mkdir(parents=True)
    (root / "benchmarks" / "levers.json").write_text(LEVERS_BEFORE)
    (root / "benchmarks" / "gpu_throughput.csv").write_text(RATES_BEFORE)
    back.mkdir()
    (back / "lease.json").write_text(json.dumps(lease))
    for name, member in (("records.tar.gz", f"{RUNS[0]}/run.json"), ("snapshots.tar.00", f"results/lease/runs/{RUNS[1]}/checkpoint.pt")):
        packed = io.BytesIO()
        with tarfile.open(fileobj=packed, mode="w:gz" if name.endswith("gz") else "w") as archive:
            archive.addfile(tarfile.TarInfo(member), io.BytesIO())
        (back / name).write_bytes(packed.getvalue() if snapshots is None or name.endswith("gz") else snapshots)
    return root, back


def _edited(path: str | tuple[str, ...], value: object) -> dict:
    """BROUGHT_BACK with the field at `path` (dotted, or its keys) set to `value` (removed when value is ...)."""
    lease = json.loads(json.dumps(BROUGHT_BACK))
    *parents, last = path if isinstance(path, tuple) else path.split(".")
    held = lease
    for key in parents:
        held = held[key]
    if value is ...:
        del held[last]
    else:
        held[last] = value
    return lease


def _unwritten(root: Path) -> None:
    assert (root / "benchmarks" / "levers.json").read_text() == LEVERS_BEFORE
    assert (root / "benchmarks" / "gpu_throughput.csv").read_text() == RATES_BEFORE
    assert not (root / "store").exists() and not (root / "results").exists()


@pytest.mark.parametrize(("lease", "error"), [
    ([], "lease.json is malformed (not a JSON object)"),
    (_edited("runs", ...), "lease.json is malformed (no runs)"),
    (_edited("levers", [1]), "lease.json: levers must be an object, not [1]"),
    (_edited("levers", {"measured": True}), "lease.json: levers measured without levers.engine, levers.device, levers.choice"),
    (_edited("levers.measured", "yes"), 'lease.json: levers.measured must be true or false, not "yes"'),
    (_edited("levers.device", 7), "lease.json: levers.device must be a one-line name, not 7"),
    (_edited("levers.device", "a\nb"), 'lease.json: levers.device must be a one-line name, not "a\\nb"'),
    (_edited("levers.engine", None), "lease.json: levers.engine must be a one-line name, not null"),
    (_edited("levers.date", "yesterday"), 'lease.json: levers.date must be a date YYYY-MM-DD, not "yesterday"'),
    (_edited("levers.choice", {"conv": 1}), "lease.json: levers.choice must be an object of option -> value (text)"),
    (_edited("levers.rates.unfold.rounds_per_s", float("inf")),
     "lease.json: levers.rates.unfold.rounds_per_s must be a finite number > 0, not Infinity"),
    (_edited("measured_rate", float("inf")), "lease.json: measured_rate must be a finite number > 0, not Infinity"),
    (_edited("measured_rate", float("nan")), "lease.json: measured_rate must be a finite number > 0, not NaN"),
    (_edited("measured_rate", True), "lease.json: measured_rate must be a finite number > 0, not true"),
    (_edited("measured_rate", -2.5), "lease.json: measured_rate must be a finite number > 0, not -2.5"),
    (_edited("measured_rate", "2.5"), 'lease.json: measured_rate must be a finite number > 0, not "2.5"'),
    (_edited("levers", {}), "lease.json: measured_rate 2.5 without levers.device, the device it was measured on"),
    (_edited("runs", {RUNS[0]: "spare"}), "lease.json: measured_rate 2.5 with no run but spares to have measured it"),
    (_edited("runs", [RUNS[0]]), "lease.json: runs must be an object of run -> state"),
    (_edited(("runs", RUNS[0]), 3), f"lease.json: runs.{RUNS[0]} must be a one-line name, not 3"),
    (_edited("dataset", ""), 'lease.json: dataset must be a one-line name, not ""'),
])
def test_collect_refuses_a_bad_lease_json_in_one_line_before_it_writes_anything(tmp_path: Path, lease: object, error: str) -> None:
    root, back = _brought_back(tmp_path, lease)
    done = _fedgmh(root, "lease", "collect", str(back), "--into", "store")
    assert done.returncode == 2 and error in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    _unwritten(root)


def test_collect_writes_nothing_when_a_snapshot_piece_cannot_be_read(tmp_path: Path) -> None:
    root, back = _brought_back(tmp_path, BROUGHT_BACK, snapshots=b"not an archive")
    done = _fedgmh(root, "lease", "collect", str(back), "--into", "store")
    assert done.returncode == 2 and "snapshots.tar cannot be read" in done.stderr, done.stderr
    _unwritten(root)


def test_collect_files_the_levers_and_the_rate_of_a_good_lease_json(tmp_path: Path) -> None:
    root, back = _brought_back(tmp_path, BROUGHT_BACK)
    done = _fedgmh(root, "lease", "collect", str(back), "--into", "store")
    assert done.returncode == 0, done.stderr
    assert json.loads((root / "benchmarks" / "levers.json").read_text()) == {
        k: v for k, v in BROUGHT_BACK["levers"].items() if k != "measured"}
    assert (root / "benchmarks" / "gpu_throughput.csv").read_text() == RATES_BEFORE + (
        "2026-12-08,a stand-in,digits,\"lease: the campaign's runs, rate after the first minute\",1,2.50,,"
        '"{""conv"": ""unfold""}",fedgmh lease collect\n')
    assert (root / "results" / "lease" / "runs" / RUNS[1] / "checkpoint.pt").is_file()


@pytest.mark.parametrize("rate", [None, 0])
def test_collect_files_no_rate_where_the_device_measured_none(tmp_path: Path, rate: object) -> None:
    """null, or 0 when every run ended before the device measured a round: no row, and no error."""
    root, back = _brought_back(tmp_path, {**_edited("measured_rate", rate), "levers": {**BROUGHT_BACK["levers"], "measured": False}})
    done = _fedgmh(root, "lease", "collect", str(back), "--into", "store")
    assert done.returncode == 0 and "rate: " not in done.stdout, done.stdout + done.stderr
    assert (root / "benchmarks" / "levers.json").read_text() == LEVERS_BEFORE
    assert (root / "benchmarks" / "gpu_throughput.csv").read_text() == RATES_BEFORE


def _planned_and_printed(root: Path, runs: list[str], settings: list[str], start: str) -> tuple[list, list, dict]:
    """(`fedgmh plan --commands` rows of `runs`, the dry run's shell commands starting with `start`, the env)."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    planned = subprocess.run([sys.executable, "-m", "fedgmh.cli", "plan", *settings, "--commands", *runs], cwd=root,
                             capture_output=True, text=True, env=env)
    assert planned.returncode == 0, planned.stderr
    dry = subprocess.run([sys.executable, "-m", "snakemake", "-n", "-p", *(f"{run.rstrip('/')}/run.json" for run in runs), *settings,
                          "--cores", "1"], cwd=root, capture_output=True, text=True, env=env)
    printed = [line.removeprefix("Shell command: ") for line in (dry.stdout + dry.stderr).splitlines()
               if line.removeprefix("Shell command: ").startswith(start)]
    return [line.split("\t") for line in planned.stdout.splitlines()], printed, env


def test_the_plans_commands_are_the_train_jobs_word_for_word(tmp_path: Path) -> None:
    """`fedgmh plan --commands` prints the command the workflow's
    train job runs (its dry run prints it), with the run's folder, log, partition and dataset beside it."""
    root = _checkout(tmp_path)
    (root / "config" / "lease.yaml").write_text(yaml.safe_dump({**yaml.safe_load((root / "config" / "lease.yaml").read_text()),
                                                                "data_root": "my data"}))
    runs = ["results/lease/runs/table2/digits_c2_a0.5/fedgmh/seed1", "results/lease/runs/table2/digits_c2_a0.5/fedavg/seed0/"]
    settings = ["--configfile", "config/lease.yaml", "--config", "device=cpu", "jobs_per_gpu=3"]
    rows, printed, env = _planned_and_printed(root, runs, settings, "fedgmh train ")
    assert sorted(row[4] for row in rows) == sorted(printed) and len(printed) == 2, printed
    assert rows[0][:4] == [runs[0], "logs/lease/train/table2/digits_c2_a0.5/fedgmh/seed1.log",
                           "results/lease/partitions/digits_c2_a0.5.npz", "digits"]
    assert "--root 'my data'" in rows[0][4] and rows[0][4].endswith(" > logs/lease/train/table2/digits_c2_a0.5/fedgmh/seed1.log 2>&1")
    other = subprocess.run([sys.executable, "-m", "fedgmh.cli", "plan", *settings, "--commands", "results/lease/runs/table9/x/fedavg/seed0"],
                           cwd=root, capture_output=True, text=True, env=env)
    assert other.returncode == 2 and "is not a run that config 'lease' trains" in other.stderr


def test_the_plans_batch_command_is_the_batch_jobs_word_for_word(tmp_path: Path) -> None:
    """With runs_per_job, `fedgmh plan --commands` gives a batch's runs the command of the workflow's
    batch job (`fedgmh train-group` on its runs file), on the first run's line; the other's line has none."""
    root = _checkout(tmp_path)
    runs = ["results/lease/runs/table2/digits_c2_a0.5/fedavg/seed0", "results/lease/runs/table2/digits_c2_a0.5/fedavg/seed1"]
    settings = ["--configfile", "config/lease.yaml", "--config", "device=cpu", "runs_per_job=2"]
    rows, printed, _ = _planned_and_printed(root, runs, settings, "printf ")
    assert printed == [rows[0][4]] and "fedgmh train-group " in rows[0][4], printed
    assert rows[1][4] == "" and rows[0][1] == rows[1][1] and rows[0][1].endswith(".log")


def test_every_run_the_device_starts_at_once_has_a_gpu_slot_of_its_own() -> None:
    """The paper config's `jobs_per_gpu` is 1: a lease's runs, all on the device's one GPU, would wait for its
    one slot (fedgmh.gpu_slots) but for the lease's `jobs_per_gpu`; what the caller gives is kept."""
    entry = load_campaign(REPO / "config" / "campaign.yaml", REPO, REPO / "Snakefile", lease_overrides([]))[0]
    words = entry.plan.train_words(entry.run, entry.partition, 1)
    assert words[words.index("--device") + 1] == "cuda:auto"
    assert int(words[words.index("--jobs-per-gpu") + 1]) >= MAX_AT_ONCE
    assert lease_overrides(["device=cpu", "jobs_per_gpu=2"]) == ["device=cpu", "jobs_per_gpu=2"]


def test_a_partition_that_cannot_be_drawn_names_the_log_that_says_why(tmp_path: Path) -> None:
    """The failure came as Snakemake's last lines; the download's own log, which says why, went unnamed."""
    from types import SimpleNamespace

    from fedgmh.errors import UserError
    from fedgmh.lease import _draw_partitions

    (tmp_path / "Snakefile").write_text('rule draw:\n    output: "parts/p.npz"\n    log: "logs/draw.log"\n'
                                        '    shell: "echo no mirror > {log}; exit 1"\n')
    (tmp_path / "c.yaml").write_text("{}\n")
    with pytest.raises(UserError, match=r"drawing the partitions parts/p.npz failed \(see logs/draw.log\): "):
        _draw_partitions([SimpleNamespace(partition="parts/p.npz")], "c.yaml", [], tmp_path)
