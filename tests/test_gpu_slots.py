"""GPU slots (fedgmh.gpu_slots): a GPU slot per concurrent training job, without a GPU.

The number of GPUs is injected (`num_gpus`), so every test runs on a CPU machine; concurrency is
tested with real processes that start together at a multiprocessing Barrier.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedgmh import gpu_slots
from fedgmh.errors import UserError
from fedgmh.gpu_slots import GpuSlotTimeout, acquire_gpu

REPO = Path(__file__).resolve().parents[1]
CTX = multiprocessing.get_context("spawn")  # no fork of a (possibly multi-threaded) pytest process
NO_CVD: dict[str, str] = {}  # an environment without CUDA_VISIBLE_DEVICES


def _worker(name, lock_dir, num_gpus, barrier, results, stop, timeout_s, jobs_per_gpu=1):
    """Wait at the barrier, take a slot, report (name, index), hold it until `stop` is set."""
    barrier.wait()
    index, release = acquire_gpu(num_gpus, lock_dir, timeout_s, jobs_per_gpu=jobs_per_gpu, env={}, poll_s=0.02)
    results.put((name, index))
    stop.wait(30)
    release()


def _start(count, lock_dir, num_gpus, timeout_s=20.0, jobs_per_gpu=1):
    barrier, results = CTX.Barrier(count), CTX.Queue()
    stops = [CTX.Event() for _ in range(count)]
    procs = [
        CTX.Process(target=_worker, args=(i, str(lock_dir), num_gpus, barrier, results, stops[i], timeout_s, jobs_per_gpu), daemon=True)
        for i in range(count)
    ]
    for proc in procs:
        proc.start()
    # Process.start() drops its args: the caller keeps the barrier alive until the children have it
    return procs, results, stops, barrier


def _finish(procs, stops):
    for stop in stops:
        stop.set()
    for proc in procs:
        proc.join(10)
        if proc.is_alive():
            proc.kill()


def test_in_process_allocation_order_release_and_timeout(tmp_path: Path) -> None:
    taken = [acquire_gpu(3, tmp_path, 0, env=NO_CVD) for _ in range(3)]
    assert [index for index, _ in taken] == [0, 1, 2]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpu-0.lock", "gpu-1.lock", "gpu-2.lock"]
    assert f"pid {os.getpid()}" in (tmp_path / "gpu-1.lock").read_text()
    start = time.monotonic()
    with pytest.raises(GpuSlotTimeout) as err:
        acquire_gpu(3, tmp_path, 0.3, env=NO_CVD, poll_s=0.05)
    assert time.monotonic() - start >= 0.3
    message = str(err.value)
    assert "no free GPU after waiting 0.3 s" in message and "all 3 GPU slot(s)" in message
    assert "--resources gpu=3" in message and "FEDGMH_GPU_WAIT_S" in message and f"pid {os.getpid()}" in message
    assert isinstance(err.value, UserError)  # the CLI prints it as one line, exit status 2
    taken[1][1]()
    taken[1][1]()  # release is idempotent
    assert acquire_gpu(3, tmp_path, 0, env=NO_CVD)[0] == 1
    with pytest.raises(UserError, match="no GPU is visible"):
        acquire_gpu(0, tmp_path, 0, env=NO_CVD)


def test_processes_starting_together_get_distinct_gpus(tmp_path: Path) -> None:
    procs, results, stops, _barrier = _start(4, tmp_path, num_gpus=4)
    try:
        got = dict(results.get(timeout=30) for _ in procs)
        assert sorted(got.values()) == [0, 1, 2, 3], got
    finally:
        _finish(procs, stops)


def test_extra_job_waits_for_the_gpu_a_finished_job_frees(tmp_path: Path) -> None:
    procs, results, stops, _barrier = _start(3, tmp_path, num_gpus=2)
    try:
        first = dict(results.get(timeout=30) for _ in range(2))
        assert sorted(first.values()) == [0, 1]
        with pytest.raises(queue.Empty):
            results.get(timeout=0.5)  # the third job is waiting, not sharing a GPU
        waiting = ({0, 1, 2} - set(first)).pop()
        done = next(name for name, index in first.items() if index == 1)
        stops[done].set()  # that job finishes and frees GPU 1
        assert results.get(timeout=10) == (waiting, 1)
    finally:
        _finish(procs, stops)


def _hold_forever(lock_dir, ready, jobs_per_gpu=1):
    acquire_gpu(1, lock_dir, 5, jobs_per_gpu=jobs_per_gpu, env={})
    ready.set()
    time.sleep(60)


def test_slot_of_a_killed_process_is_reusable(tmp_path: Path) -> None:
    ready = CTX.Event()
    proc = CTX.Process(target=_hold_forever, args=(str(tmp_path), ready), daemon=True)
    proc.start()
    try:
        assert ready.wait(30)
        with pytest.raises(GpuSlotTimeout, match=f"pid {proc.pid} on"):
            acquire_gpu(1, tmp_path, 0, env=NO_CVD)
    finally:
        proc.kill()  # SIGKILL: no clean-up code runs, the kernel drops the lock
        proc.join(10)
    index, release = acquire_gpu(1, tmp_path, 0, env=NO_CVD)
    assert index == 0
    release()


def test_several_slots_per_gpu_spread_over_the_gpus_first(tmp_path: Path) -> None:
    taken = [acquire_gpu(3, tmp_path, 0, jobs_per_gpu=2, env=NO_CVD) for _ in range(6)]
    assert [index for index, _ in taken] == [0, 1, 2, 0, 1, 2]  # every GPU gets a job before any gets two
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "gpu-0+slot1.lock", "gpu-0.lock", "gpu-1+slot1.lock", "gpu-1.lock", "gpu-2+slot1.lock", "gpu-2.lock"]
    with pytest.raises(GpuSlotTimeout) as err:
        acquire_gpu(3, tmp_path, 0.1, jobs_per_gpu=2, env=NO_CVD, poll_s=0.02)
    message = str(err.value)
    assert "all 6 GPU slot(s) (3 GPU(s) x 2 jobs per GPU)" in message and "--resources gpu=6" in message
    assert "GPU 2 (2) slot 1: pid" in message
    taken[4][1]()  # GPU 1's second job ends: a new job goes there, not to a third slot anywhere
    assert acquire_gpu(3, tmp_path, 0, jobs_per_gpu=2, env=NO_CVD)[0] == 1
    with pytest.raises(UserError, match="at least 1"):
        acquire_gpu(3, tmp_path, 0, jobs_per_gpu=0, env=NO_CVD)


def test_a_new_job_goes_to_the_gpu_with_the_fewest_jobs(tmp_path: Path) -> None:
    """Not simply the first free slot: GPU 0 has its slot 0 free but two jobs, GPU 1 only one."""
    import fcntl

    held = []
    for name in ("gpu-0+slot1.lock", "gpu-0+slot2.lock", "gpu-1.lock"):  # held by "other jobs"
        fd = os.open(tmp_path / name, os.O_RDWR | os.O_CREAT)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.append(fd)
    try:
        first = acquire_gpu(2, tmp_path, 0, jobs_per_gpu=3, env=NO_CVD)
        assert first[0] == 1
        assert acquire_gpu(2, tmp_path, 0, jobs_per_gpu=3, env=NO_CVD)[0] == 0  # 2 jobs each now: lowest index
        assert acquire_gpu(2, tmp_path, 0, jobs_per_gpu=3, env=NO_CVD)[0] == 1
        with pytest.raises(GpuSlotTimeout):
            acquire_gpu(2, tmp_path, 0, jobs_per_gpu=3, env=NO_CVD)
        for fd in held:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the probe left the other jobs' locks alone
    finally:
        for fd in held:
            os.close(fd)


def test_processes_starting_together_share_each_gpu_evenly(tmp_path: Path) -> None:
    procs, results, stops, _barrier = _start(5, tmp_path, num_gpus=2, jobs_per_gpu=2)
    try:
        got = dict(results.get(timeout=30) for _ in range(4))
        assert sorted(got.values()) == [0, 0, 1, 1], got  # two jobs on each GPU, never three on one
        with pytest.raises(queue.Empty):
            results.get(timeout=0.5)  # the fifth job waits for a slot
        waiting = (set(range(5)) - set(got)).pop()
        done = next(name for name, index in got.items() if index == 1)
        stops[done].set()
        assert results.get(timeout=10) == (waiting, 1)
    finally:
        _finish(procs, stops)


def test_slot_of_a_killed_process_is_reusable_with_several_jobs_per_gpu(tmp_path: Path) -> None:
    holders = []
    try:
        for _ in range(2):
            ready = CTX.Event()
            proc = CTX.Process(target=_hold_forever, args=(str(tmp_path), ready, 2), daemon=True)
            proc.start()
            holders.append(proc)
            assert ready.wait(30)
        with pytest.raises(GpuSlotTimeout, match="all 2 GPU slot"):
            acquire_gpu(1, tmp_path, 0, jobs_per_gpu=2, env=NO_CVD)
        holders[1].kill()  # SIGKILL: the kernel drops its lock
        holders[1].join(10)
        index, release = acquire_gpu(1, tmp_path, 0, jobs_per_gpu=2, env=NO_CVD)
        assert index == 0
        release()
    finally:
        for proc in holders:
            proc.kill()
            proc.join(10)


def test_cuda_visible_devices(tmp_path: Path) -> None:
    assert gpu_slots.visible_devices({}) is None
    assert gpu_slots.visible_devices({"CUDA_VISIBLE_DEVICES": ""}) == []
    assert gpu_slots.visible_devices({"CUDA_VISIBLE_DEVICES": " 2, 5"}) == ["2", "5"]
    assert gpu_slots.visible_devices({"CUDA_VISIBLE_DEVICES": "0,-1,3"}) == ["0"]  # CUDA stops at -1

    # one visible device (a scheduler such as SLURM gave the job its GPU): used as is, no lock
    locks = tmp_path / "single"
    assert acquire_gpu(1, locks, 0, env={"CUDA_VISIBLE_DEVICES": "3"})[0] == 0
    assert acquire_gpu(1, locks, 0, env={"CUDA_VISIBLE_DEVICES": "3"})[0] == 0
    assert not locks.exists()

    # several: the lock files are named after the physical devices, so different visible sets agree
    locks = tmp_path / "multi"
    assert acquire_gpu(2, locks, 0, env={"CUDA_VISIBLE_DEVICES": "2,5"})[0] == 0  # physical 2
    assert acquire_gpu(2, locks, 0, env={"CUDA_VISIBLE_DEVICES": "5,GPU-8a1f/x"})[0] == 0  # physical 5
    assert acquire_gpu(2, locks, 0, env={"CUDA_VISIBLE_DEVICES": "5,GPU-8a1f/x"})[0] == 1  # the UUID one
    assert sorted(p.name for p in locks.iterdir()) == ["gpu-2.lock", "gpu-5.lock", "gpu-GPU-8a1f_x.lock"]
    with pytest.raises(GpuSlotTimeout):
        acquire_gpu(2, locks, 0, env={"CUDA_VISIBLE_DEVICES": "2,5"})


def test_lock_folder_and_wait_from_the_environment(tmp_path: Path) -> None:
    assert gpu_slots.default_lock_dir({"FEDGMH_GPU_LOCK_DIR": str(tmp_path)}) == tmp_path
    default = gpu_slots.default_lock_dir({})
    assert default.name.startswith("fedgmh-gpu-slots-")
    assert gpu_slots.default_lock_dir({"SLURM_JOB_ID": "42"}).name == default.name + "-slurm42"
    assert gpu_slots.default_timeout({}) == gpu_slots.DEFAULT_TIMEOUT_S
    assert gpu_slots.default_timeout({"FEDGMH_GPU_WAIT_S": "2.5"}) == 2.5
    with pytest.raises(UserError, match="FEDGMH_GPU_WAIT_S"):
        gpu_slots.default_timeout({"FEDGMH_GPU_WAIT_S": "soon"})


def test_pick_device_cuda_auto_holds_a_slot_per_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from fedgmh.train import pick_device

    monkeypatch.setenv("FEDGMH_GPU_LOCK_DIR", str(tmp_path))
    monkeypatch.setenv("FEDGMH_GPU_WAIT_S", "0")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UserError, match="'cuda:auto' requested but CUDA is not available"):
        pick_device("cuda:auto")
    chosen = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    try:
        assert pick_device("cuda:auto") == torch.device("cuda", 0)
        assert pick_device("cuda:auto") == torch.device("cuda", 1)  # e.g. a second job on the machine
        assert chosen == [0, 1]
        with pytest.raises(GpuSlotTimeout):
            pick_device("cuda:auto")
    finally:
        gpu_slots.release_held()
    assert pick_device("cuda:auto") == torch.device("cuda", 0)  # released: free again
    gpu_slots.release_held()
    try:  # two jobs per GPU: four jobs fit on the two GPUs, spread over both first
        assert [pick_device("cuda:auto", jobs_per_gpu=2).index for _ in range(4)] == [0, 1, 0, 1]
        with pytest.raises(GpuSlotTimeout, match="2 jobs per GPU"):
            pick_device("cuda:auto", jobs_per_gpu=2)
    finally:
        gpu_slots.release_held()


def test_workflow_gives_gpu_jobs_a_slot(tmp_path: Path) -> None:
    """device cuda (or auto on a GPU machine) -> `fedgmh train --device cuda:auto --jobs-per-gpu J`
    with J = config jobs_per_gpu and one unit of `gpu` per job; cuda:N stays as is, without slots;
    cpu declares no gpu resource."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    devices, resources = {}, {}
    for device, jobs_per_gpu in (("cuda", 1), ("cuda", 4), ("cuda:1", 4), ("cpu", 4)):
        result = subprocess.run(
            [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path),
             "-n", "-p", "all_runs", "--cores", "2", "--resources", "gpu=8", "--configfile", str(REPO / "config" / "smoke.yaml"),
             "--config", f"device={device}", f"jobs_per_gpu={jobs_per_gpu}"],
            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
        )
        out = result.stdout + result.stderr
        assert result.returncode == 0, out[-3000:]
        devices[device, jobs_per_gpu] = set(re.findall(r"fedgmh train .*?--device (\S+(?: --jobs-per-gpu \d+)?)\s+--threads", out))
        resources[device, jobs_per_gpu] = set(re.findall(r"resources: .*?\b(gpu=\d+)", out))
    assert devices == {
        ("cuda", 1): {"cuda:auto --jobs-per-gpu 1"},
        ("cuda", 4): {"cuda:auto --jobs-per-gpu 4"},
        ("cuda:1", 4): {"cuda:1"},
        ("cpu", 4): {"cpu"},
    }
    assert resources == {("cuda", 1): {"gpu=1"}, ("cuda", 4): {"gpu=1"}, ("cuda:1", 4): {"gpu=1"}, ("cpu", 4): set()}


def test_train_cli_refuses_zero_jobs_per_gpu(capsys: pytest.CaptureFixture) -> None:
    from fedgmh.cli import main

    assert main(["train", "--dataset", "digits", "--root", "nowhere", "--partition", "none.npz", "--algorithm", "fedavg",
                 "--rounds", "1", "--device", "cuda:auto", "--jobs-per-gpu", "0", "--out", "nowhere"]) == 2
    assert "--jobs-per-gpu 0: at least 1 job per GPU" in capsys.readouterr().err
