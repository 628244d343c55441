"""The float arithmetic of a run on CUDA (engine options `numerics` and `tf32`), set once before training."""

from __future__ import annotations

import torch

from fedgmh.config import EngineOptions


def cuda_flags(engine: EngineOptions) -> dict[str, bool]:
    """torch.backends' flags for the run: cuDNN deterministic and not benchmarking (same config and
    seed, same numbers), TF32 for cuDNN convolutions under numerics=pytorch (PyTorch's default, the
    authors' runs) or tf32, for matrix products under tf32 only (PyTorch's default keeps them fp32)."""
    return {"cudnn_deterministic": True, "cudnn_benchmark": False,
            "cudnn_tf32": engine.tf32 or engine.numerics == "pytorch", "matmul_tf32": engine.tf32}


def set_numerics(engine: EngineOptions, device: torch.device) -> None:
    """Set `cuda_flags(engine)` for a run on `device` (nothing on CPU, where they change nothing)."""
    if device.type != "cuda":
        return
    flags = cuda_flags(engine)
    torch.backends.cudnn.deterministic = flags["cudnn_deterministic"]
    torch.backends.cudnn.benchmark = flags["cudnn_benchmark"]
    torch.backends.cudnn.allow_tf32 = flags["cudnn_tf32"]
    torch.backends.cuda.matmul.allow_tf32 = flags["matmul_tf32"]
