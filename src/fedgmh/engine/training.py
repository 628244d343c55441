"""Local training: the one SGD routine every algorithm runs (`local_train`), its phases as data
(`Phase`), the losses and gradient hooks algorithms plug in, and the check that a trained client
did not diverge."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.nn.functional as F

from fedgmh.engine.federation import Draw, Extra, Federation, GradHook, LocalResult, LossFn, Params
from fedgmh.errors import UserError

def proximal_hook(coef: float) -> GradHook:
    """g -> g + coef * (p - anchor): adds the gradient of (coef / 2) * ||p - anchor||^2, the anchor
    being the client's extra["anchor"] (a model)."""
    return lambda name, p, g, extra: g + coef * (p - extra["anchor"][name])


def batch_mean(values: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """The mean of per-sample `values` over the batch's real samples: all of them (mask None) or
    those marked 1 (`where`, not a product: a padded sample's value may be inf)."""
    if mask is None:
        return values.mean()
    return torch.where(mask > 0, values, 0.0).sum() / mask.sum().clamp(min=1.0)


def cross_entropy(logits: torch.Tensor, y: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean cross-entropy over the batch's real samples (mask None: exactly F.cross_entropy)."""
    if mask is None:
        return F.cross_entropy(logits, y)
    return batch_mean(F.cross_entropy(logits, y, reduction="none"), mask)


def cross_entropy_loss(fed: Federation) -> LossFn:
    return lambda params, x, y, mask, extra: cross_entropy(fed.forward(params, x), y, mask)


@dataclass
class Phase:
    """One `local_train` call of a client's local training, described as data, so that
    `vectorised.train_phases_many` can run it for all selected clients at once.

    `params`: where it starts (None: where the client's previous phase ended); `epochs`,
    `trainable`, `loss_fn`, `grad_hook`, `draw` as in `local_train`. The functions must be the same
    for every client (the batched path runs one for all of them): what differs between clients goes
    in `extra`.
    """

    params: Params | None
    epochs: int | None = None
    trainable: Callable[[str], bool] | None = None
    loss_fn: LossFn | None = None
    grad_hook: GradHook | None = None
    extra: Extra = field(default_factory=dict)
    draw: Draw | None = None

    def seams(self) -> dict[str, Any]:
        return {"epochs": self.epochs, "trainable": self.trainable, "loss_fn": self.loss_fn, "grad_hook": self.grad_hook,
                "extra": self.extra, "draw": self.draw}


def local_train(
    fed: Federation,
    params: Params,
    client: int,
    *,
    epochs: int | None = None,
    lr: float | None = None,
    trainable: Callable[[str], bool] | None = None,
    loss_fn: LossFn | None = None,
    grad_hook: GradHook | None = None,
    extra: Extra | None = None,
    draw: Draw | None = None,
) -> LocalResult:
    """Plain SGD (as torch.optim.SGD: p <- p - lr * g) on the client's train split.

    `trainable` selects the parameters that move (others are frozen but still used), `loss_fn`
    replaces cross-entropy, `grad_hook(name, param, grad, extra)` may change a gradient before the
    step (e.g. a proximal term), `extra` holds the client's tensors that both read, `draw(batch)`
    the random numbers each batch's loss needs (`Phase`). Returns NEW tensors; `params` is not
    modified. `vectorised.train_phases_many` is the batched counterpart. The loss is summed on the
    device and left there (LocalResult reads it when asked): no host sync in the loop.
    """
    epochs = fed.local_epochs if epochs is None else epochs
    lr = fed.client_lr(client) if lr is None else lr
    loss_fn = loss_fn or cross_entropy_loss(fed)
    extra = {} if extra is None else extra
    params = {k: v.detach().clone() for k, v in params.items()}
    names = [k for k in params if trainable is None or trainable(k)]
    for k in names:
        params[k].requires_grad_(True)
    # float64 on the device: the same sum as adding float(loss) * len(batch) in Python, without a sync
    loss_sum, seen = torch.zeros((), dtype=torch.float64, device=fed.device), 0
    for _ in range(epochs):
        for batch in fed.shuffled_batches(client):
            x, y = fed.images[batch], fed.labels[batch]
            loss = loss_fn(params, x, y, None, extra if draw is None else {**extra, "noise": draw(batch)})
            grads = torch.autograd.grad(loss, [params[k] for k in names])
            with torch.no_grad():
                for k, g in zip(names, grads):
                    if grad_hook is not None:
                        g = grad_hook(k, params[k], g, extra)
                    params[k].add_(g, alpha=-lr)
            loss_sum += loss.detach().double() * len(batch)
            seen += len(batch)
    fed.sample_passes.add(useful=seen, executed=seen)
    return LocalResult({k: v.detach() for k, v in params.items()}, loss_sum, seen)


def train_phases(fed: Federation, phases: list[Phase], client: int) -> list[LocalResult]:
    """A client's local training phases, one `local_train` call after the other."""
    results: list[LocalResult] = []
    for phase in phases:
        start = results[-1].params if phase.params is None else phase.params
        results.append(local_train(fed, start, client, **phase.seams()))
    return results


class Diverged(UserError):
    """A run's model diverged: it cannot produce meaningful numbers, so it stops."""


def divergence(result: LocalResult, all_finite: bool | None = None) -> str | None:
    """What shows that a client's local training diverged: a NaN loss or a parameter that is no
    longer finite. An infinite loss alone is not divergence: FedRoD's Balanced Softmax gives +inf,
    with finite gradients, for a sample of a class its counted epoch lacked (PFLlib does the same).
    `all_finite`: whether every parameter is known to be finite already (see `check_trained`)."""
    if math.isnan(result.loss_sum):
        return "the training loss is nan"
    if all_finite:
        return None
    for name, tensor in result.params.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            return f"its parameter {name} is no longer finite (training loss {result.loss_sum})"
    return None


def check_trained(results: list[LocalResult]) -> list[str | None]:
    """`divergence` of each result, reading from the device once for all of them: the losses still
    on the device and, per client, whether all its parameters are finite (instead of a host sync
    per client and per parameter)."""
    flags, pending = [], []
    for result in results:
        floating = [t.reshape(-1) for t in result.params.values() if t.is_floating_point()]
        flags.append(torch.isfinite(torch.cat(floating)).all().double() if floating else None)
        if isinstance(result._loss, torch.Tensor):
            pending.append(result)
    values = [f for f in flags if f is not None] + [r._loss.double() for r in pending]
    read = iter(torch.stack(values).tolist() if values else [])
    finite = [None if f is None else bool(next(read)) for f in flags]
    for result in pending:
        result.loss_sum = next(read)  # the float the device holds, as float(tensor) would give
    return [divergence(result, ok if ok is not None else True) for result, ok in zip(results, finite)]

