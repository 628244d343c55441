"""The CNN's max pooling in channels_last on the CPU (`model.ChannelsLastMaxPool2d`): bit for bit
what torch's NCHW pooling gives, ties and NaN included, from one layer up to whole runs."""

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from conftest import make_federation

from fedgmh import model
from fedgmh.algorithms import get_algorithm
from fedgmh.engine import run_rounds
from fedgmh.model import ChannelsLastMaxPool2d, FedAvgCNN
from fedgmh.train import resolve_options

pytestmark = pytest.mark.usefixtures("one_thread")

SHAPE = (6, 32, 24, 24)  # the first pooling of the MNIST model (batch shortened)


def _tied(kind: str, shape=SHAPE) -> torch.Tensor:
    """Inputs whose 2x2 windows often hold several maxima (or NaN, or zeros of both signs)."""
    gen = torch.Generator().manual_seed(0)

    def coin(p: float) -> torch.Tensor:
        return torch.rand(shape, generator=gen) < p

    small = torch.randint(0, 3, shape, generator=gen).float()
    return {
        "relu": torch.randn(shape, generator=gen).relu(),  # zeros everywhere, as after the CNN's ReLU
        "integers": small,
        "zeros": torch.zeros(shape),
        "signed_zeros": torch.where(coin(0.5), -0.0, 0.0),
        "nan": torch.where(coin(0.4), float("nan"), small),  # windows of several NaN: the last one is picked
        "inf": torch.where(coin(0.3), float("inf"), torch.where(coin(0.1), -float("inf"), small)),
    }[kind]


def _pool_both(x: torch.Tensor, grad_out_seed: int = 1):
    """(output, input gradient) of nn.MaxPool2d and of ChannelsLastMaxPool2d for the same input."""
    results = []
    for layer in (torch.nn.MaxPool2d(2), ChannelsLastMaxPool2d(2)):
        leaf = x.detach().clone().requires_grad_(True)
        out = layer(leaf)
        grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(grad_out_seed), dtype=x.dtype)
        out.backward(grad)
        results.append((out.detach(), leaf.grad))
    return results


def _identical(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal bit for bit (NaN where NaN, zeros of the same sign), both contiguous NCHW."""
    bits = {4: torch.int32, 8: torch.int64}[a.element_size()]
    return (a.dtype == b.dtype and a.shape == b.shape and a.is_contiguous() and b.is_contiguous()
            and torch.equal(a.view(bits), b.view(bits)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kind", ["relu", "integers", "zeros", "signed_zeros", "nan", "inf"])
def test_pooling_in_channels_last_routes_tied_maxima_as_torch_does(kind, dtype):
    (out, grad), (out_cl, grad_cl) = _pool_both(_tied(kind).to(dtype))
    assert _identical(out, out_cl)
    assert _identical(grad, grad_cl)  # the gradient of a tied window goes to the same element


@pytest.mark.parametrize("shape", [(3, 64, 8, 8), (2, 5, 9, 7), (4, 1, 6, 6), (1, 3, 2, 2)])
def test_pooling_in_channels_last_on_other_shapes(shape):
    (out, grad), (out_cl, grad_cl) = _pool_both(_tied("integers", shape))
    assert _identical(out, out_cl) and _identical(grad, grad_cl)


@pytest.mark.parametrize("kind", ["relu", "integers", "zeros", "nan", "inf", "signed_zeros"])
@pytest.mark.parametrize("shape", [SHAPE, (2, 5, 9, 7), (1, 3, 2, 2)])
def test_pooling_without_gradients_gives_torchs_values(kind, shape):
    """Without gradients (evaluation) the pooling takes elementwise maxima: torch's values bit for bit,
    but for the sign of a window's maximum that is a zero of both signs."""
    x = _tied(kind, shape)
    expected = F.max_pool2d(x, 2)
    with torch.no_grad():
        pooled = ChannelsLastMaxPool2d(2)(x)
    for result in (pooled, ChannelsLastMaxPool2d(2)(x)):  # the second: no gradient asked for either
        if kind == "signed_zeros":
            assert torch.equal(result, expected) and result.is_contiguous()
        else:
            assert _identical(result, expected)


def test_the_pooled_gradient_is_nchw_and_input_layouts_are_kept():
    """The backward hands NCHW gradients on (the ReLU's and convolution's backward stay on their
    NCHW kernels); channels_last input pools as nn.MaxPool2d does and stays channels_last."""
    x = _tied("relu").requires_grad_(True)
    ChannelsLastMaxPool2d(2)(x).sum().backward()
    assert x.grad.is_contiguous()
    cl = _tied("relu").contiguous(memory_format=torch.channels_last)
    out = ChannelsLastMaxPool2d(2)(cl)
    assert out.is_contiguous(memory_format=torch.channels_last) and torch.equal(out, F.max_pool2d(cl, 2))


@pytest.mark.parametrize(("channels", "classes", "side"), [(1, 10, 28), (3, 100, 32)])
@pytest.mark.parametrize("batch", [100, 37, 1])
def test_the_cnn_computes_the_same_outputs_and_gradients(channels, classes, side, batch, monkeypatch):
    torch.manual_seed(0)
    net = FedAvgCNN(channels, classes, side)
    x, y = torch.randn(batch, channels, side, side), torch.randint(0, classes, (batch,))
    results = []
    for channels_last in (False, True):
        monkeypatch.setattr(model, "POOL_CHANNELS_LAST", channels_last)
        net.zero_grad()
        out = net(x)
        F.cross_entropy(out, y).backward()
        results.append([out.detach()] + [p.grad.clone() for p in net.parameters()])
    assert all(_identical(a, b) for a, b in zip(*results))
    with torch.no_grad():  # evaluation's pooling (elementwise maxima) gives the same outputs too
        assert _identical(net(x), results[0][0])


PAPER = ["fedavg", "fedprox", "ditto", "fedamp", "fedcp", "fedfomo", "fedgh", "fedper", "fedrep", "fedrod", "lgfedavg",
         "fedgmh"]


@pytest.mark.parametrize("name", PAPER)
def test_a_short_run_gives_the_same_metrics_bit_for_bit(name, monkeypatch):
    runs, calls, apply = [], [], model._ChannelsLastMaxPool.apply
    monkeypatch.setattr(model._ChannelsLastMaxPool, "apply", lambda *args: calls.append(1) or apply(*args))
    for channels_last in (False, True):
        monkeypatch.setattr(model, "POOL_CHANNELS_LAST", channels_last)
        options, engine = resolve_options(name, {})
        fed = make_federation([[0, 1, 0, 1, 2, 2, 1, 0, 1], [1, 2, 2], [0, 2, 2, 1, 0, 0, 1], [2, 0, 1, 1], [0, 0, 2, 1, 1]],
                              num_classes=3, batch_size=3, local_epochs=2, lr=0.1, lr_decay=engine.lr_decay)
        algorithm = get_algorithm(name)(fed, options)
        runs.append(pd.DataFrame(run_rounds(fed, algorithm, rounds=3, join_ratio=0.6)).drop(columns="seconds"))
        assert bool(calls) == channels_last  # the switch selects the path
    pd.testing.assert_frame_equal(runs[0], runs[1], check_exact=True)
