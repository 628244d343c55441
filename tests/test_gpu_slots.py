"""GPU slots (fedgmh.gpu_slots): one GPU per concurrent training job, without a GPU.

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


def _worker(name, lock_dir, num_gpus, barrier, results, stop, timeout_s):
    """Wait at the barrier, take a slot, report (name, index), hold it until `stop` is set."""
    barrier.wait()
    index, release = acquire_gpu(num_gpus, lock_dir, timeout_s, env={}, poll_s=0.02)
    results.put((name, index))
    stop.wait(30)
    release()


def _start(count, lock_dir, num_gpus, timeout_s=20.0):
    barrier, results = CTX.Barrier(count), CTX.Queue()
    stops = [CTX.Event() for _ in range(count)]
    procs = [
        CTX.Process(target=_worker, args=(i, str(lock_dir), num_gpus, barrier, results, stops[i], timeout_s), daemon=True)
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


def _hold_forever(lock_dir, ready):
    acquire_gpu(1, lock_dir, 5, env={})
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


def test_workflow_gives_gpu_jobs_a_slot(tmp_path: Path) -> None:
    """device cuda (or auto on a GPU machine) -> `fedgmh train --device cuda:auto`; cuda:N stays as is."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    commands = {}
    for device in ("cuda", "cuda:1"):
        result = subprocess.run(
            [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path),
             "-n", "-p", "all_runs", "--cores", "2", "--resources", "gpu=2", "--configfile", str(REPO / "config" / "smoke.yaml"),
             "--config", f"device={device}"],
            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
        )
        out = result.stdout + result.stderr
        assert result.returncode == 0, out[-3000:]
        commands[device] = {m for m in re.findall(r"fedgmh train .*?--device (\S+)", out)}
    assert commands == {"cuda": {"cuda:auto"}, "cuda:1": {"cuda:1"}}
