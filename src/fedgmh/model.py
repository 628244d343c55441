"""The paper's "4-layer CNN": PFLlib's FedAvgCNN, split into a body (feature extractor) and a head.

Parameter names start with `body.` or `head.`, so algorithms select what they share by prefix.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules.utils import _pair

FEATURE_DIM = 512


#: whether `ChannelsLastMaxPool2d` pools NCHW input on the CPU in channels_last (the tests switch it off
#: to show that the results are the same bit for bit)
POOL_CHANNELS_LAST = True


#: whether a tensor is one of torch.func's wrappers (under vmap or grad); a torch without the
#: query counts every tensor as wrapped, so that it pools as nn.MaxPool2d does
_WRAPPED = getattr(torch._C._functorch, "is_functorch_wrapped_tensor", lambda tensor: True)


def _pools_channels_last(input: torch.Tensor) -> bool:
    """CPU, plain batched NCHW input: inside torch.func transforms the layout cannot be queried."""
    return (POOL_CHANNELS_LAST and input.device.type == "cpu" and input.dim() == 4 and not _WRAPPED(input)
            and not input.is_contiguous(memory_format=torch.channels_last))


class _ChannelsLastMaxPool(torch.autograd.Function):
    """Max pooling of an NCHW tensor whose forward runs torch's channels_last kernel and whose
    backward is the NCHW one, fed the same indices: a gradient in channels_last would make the
    ReLU's and the convolution's backward slower than the pooling saves."""

    @staticmethod
    def forward(ctx, input, kernel_size, stride, padding, dilation, ceil_mode):
        pooled, indices = torch.ops.aten.max_pool2d_with_indices(
            input.contiguous(memory_format=torch.channels_last), kernel_size, stride, padding, dilation, ceil_mode)
        ctx.save_for_backward(input, indices)
        ctx.args = (kernel_size, stride, padding, dilation, ceil_mode)
        return pooled.contiguous()

    @staticmethod
    def backward(ctx, grad):  # differentiable again (a Hessian-vector product, Per-FedAvg's exact order)
        input, indices = ctx.saved_tensors
        grad_input = torch.ops.aten.max_pool2d_with_indices_backward(grad, input, *ctx.args, indices.contiguous())
        return grad_input, None, None, None, None, None


def _pairwise_max_pool(input: torch.Tensor) -> torch.Tensor:
    """2x2 max pooling with stride 2 as two elementwise maxima of strided views (columns, then rows),
    no layout conversion: values only, for forwards without gradients."""
    rows, cols = input.shape[-2] // 2 * 2, input.shape[-1] // 2 * 2  # floor mode drops an odd last row or column
    pairs = torch.maximum(input[..., :rows, 0:cols:2], input[..., :rows, 1:cols:2])
    return torch.maximum(pairs[..., 0::2, :], pairs[..., 1::2, :])


class ChannelsLastMaxPool2d(nn.MaxPool2d):
    """nn.MaxPool2d whose forward pools NCHW input on the CPU in channels_last, several times faster
    than torch's NCHW CPU kernel. Both kernels scan a window in the same order and pick the same
    element (the first of tied maxima, the last NaN), so values, indices and hence gradients are the
    same bit for bit (tests/test_model.py). A forward without gradients (evaluation) of a 2x2 window
    with stride 2 skips the layout conversions, which cost more than the pooling: two elementwise
    maxima, the same values (only the sign bit of a zero maximum in a window of +0 and -0, or of a
    NaN in a window of NaNs of both signs, may differ; the CNN's ReLU outputs hold no -0 unless a
    convolution gives exactly -0). Elsewhere (a
    GPU, channels_last input, under vmap) exactly nn.MaxPool2d."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if not _pools_channels_last(input) or self.return_indices:
            return super().forward(input)
        kernel, stride = _pair(self.kernel_size), _pair(self.stride if self.stride is not None else self.kernel_size)
        padding, dilation = _pair(self.padding), _pair(self.dilation)
        if (not (torch.is_grad_enabled() and input.requires_grad) and kernel == stride == (2, 2)
                and padding == (0, 0) and dilation == (1, 1) and not self.ceil_mode):
            return _pairwise_max_pool(input)
        return _ChannelsLastMaxPool.apply(input, kernel, stride, padding, dilation, self.ceil_mode)


class FedAvgCNN(nn.Module):
    """conv5x5(in->32) ReLU pool2, conv5x5(32->64) ReLU pool2, fc(->512) ReLU | head fc(512->K)."""

    def __init__(self, in_channels: int, num_classes: int, image_size: int) -> None:
        super().__init__()
        side = ((image_size - 4) // 2 - 4) // 2  # two valid 5x5 convolutions, each followed by a 2x2 pool
        self.body = nn.Sequential(
            nn.Conv2d(in_channels, 32, kernel_size=5),
            nn.ReLU(inplace=True),
            ChannelsLastMaxPool2d(2),
            nn.Conv2d(32, 64, kernel_size=5),
            nn.ReLU(inplace=True),
            ChannelsLastMaxPool2d(2),
            nn.Flatten(),
            nn.Linear(64 * side * side, FEATURE_DIM),
            nn.ReLU(inplace=True),
        )
        self.head = nn.Linear(FEATURE_DIM, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


class UnfoldConv2d(nn.Conv2d):
    """nn.Conv2d computed as im2col (`F.unfold`) and one matrix product over all samples' positions:
    the same parameters and, to float tolerance, the same results. Under `torch.func.vmap` over
    clients' models the product is one batched GEMM, [clients, out, in x kernel] times
    [clients, in x kernel, samples x positions], where torch's conv2d becomes a grouped convolution
    (engine option `conv`). Batched 4-D input only; the output is contiguous (NCHW) whatever the
    input's memory format."""

    def _conv_forward(self, input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        n, _, h, w = input.shape
        (kh, kw), (sh, sw), (ph, pw), (dh, dw) = self.kernel_size, self.stride, self.padding, self.dilation
        cols = F.unfold(input, (kh, kw), dilation=(dh, dw), padding=(ph, pw), stride=(sh, sw))  # [n, in*kh*kw, L]
        # samples and positions on one side of the product: one GEMM, not one per sample
        out = torch.einsum("ok,nkl->nol", weight.flatten(1), cols)
        if bias is not None:
            out = out + bias[:, None]
        return out.reshape(n, -1, (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1)


def use_unfold_convolutions(model: nn.Module) -> nn.Module:
    """Replace every nn.Conv2d of `model` by an `UnfoldConv2d` holding the very same parameters."""
    for parent in list(model.modules()):
        for name, conv in list(parent.named_children()):
            if type(conv) is nn.Conv2d:
                if conv.groups != 1 or conv.padding_mode != "zeros" or isinstance(conv.padding, str):
                    raise ValueError(f"{name}: only zero-padded convolutions without groups can be unfolded")
                unfolded = UnfoldConv2d(conv.in_channels, conv.out_channels, conv.kernel_size, stride=conv.stride,
                                        padding=conv.padding, dilation=conv.dilation, bias=conv.bias is not None,
                                        device="meta")
                unfolded.weight, unfolded.bias = conv.weight, conv.bias
                unfolded.train(conv.training)
                setattr(parent, name, unfolded)
    return model


def is_head(name: str) -> bool:
    return name.startswith("head.")


def is_body(name: str) -> bool:
    return name.startswith("body.")


#: the body's last layer, Linear(-> 512) + ReLU: PFLlib's `fc1` (index 7 of `FedAvgCNN.body`)
FC1_PREFIX = "body.7."


def is_fc1(name: str) -> bool:
    return name.startswith(FC1_PREFIX)
