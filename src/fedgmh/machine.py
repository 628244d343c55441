"""Where a run was computed: the facts that decide its floating-point rounding, recorded in run.json
as `machine`. Two records of one run made with the same facts (and threads) should be
bit-identical; across machines, libraries or flags the accuracies should agree exactly and the
losses to rounding (fedgmh.difference, docs/store.md "Three kinds of difference")."""

from __future__ import annotations

import platform
import re
from pathlib import Path
from typing import Any


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux), else what the platform says."""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _built_with(pattern: str, config: str) -> str | None:
    found = re.search(pattern, config)
    return found.group(1) if found else None


def machine_facts(device) -> dict[str, Any]:
    """The run's machine: CPU model and the vector instructions torch uses, GPU name (on CUDA), the
    versions of torch, CUDA, cuDNN, MKL and oneDNN (None where this torch has none), and the flags
    that change float results: TF32, matmul precision, deterministic algorithms, cuDNN's
    deterministic and benchmark modes."""
    import torch

    config = torch.__config__.show()
    cuda = device.type == "cuda"
    return {
        "cpu": cpu_model(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "gpu": torch.cuda.get_device_name(device) if cuda else None,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "mkl": _built_with(r"Math Kernel Library Version (\S+)", config) if torch.backends.mkl.is_available() else None,
        "onednn": _built_with(r"MKL-DNN v(\S+)", config) if torch.backends.mkldnn.is_available() else None,
        "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
        "tf32_cudnn": torch.backends.cudnn.allow_tf32,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "cudnn_deterministic": torch.backends.cudnn.deterministic,
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
    }


def same_machine(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two run records were made on the same kind of machine: equal `machine` facts (both
    recorded) and the same number of threads (a CPU's reductions depend on it)."""
    return a.get("machine") is not None and a.get("machine") == b.get("machine") and a.get("threads") == b.get("threads")
