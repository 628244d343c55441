"""All selected clients' local training in one batched step (torch.func.vmap over stacked models).

`train_phases_many` gives what `engine.train_phases` gives for each client, to float tolerance:
the same phases (`engine.Phase`: which parameters train, the loss, the gradient hook, the
client's extra tensors), the same shuffles and per-batch draws (taken from the federation's
generator in the sequential order: client by client, phase by phase, epoch by epoch), the same
batches and the same per-client learning rates. No step is padded: the clients are ordered by their
number of steps (most first), and step s trains only the leading clients that still have a batch; a
client's partial last batch is padded with masked samples that add nothing to its loss. The
federation counts the sample passes executed and the useful ones among them (`SamplePasses`).
Selected through the engine option `vectorise` (on by default for CUDA only:
on CPU the batched convolution is slower than one client after another).

A step is drawn (`prepare`: one run's `Request`) and then trained (`train_requests`); the clients of
several runs that share their data (`group.RunGroup`) train in one step, each run's results as its
own step would give them, to float tolerance.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch.func import grad_and_value, vmap
from torch.utils._pytree import tree_flatten, tree_unflatten

from fedgmh.engine.federation import Extra, Federation, LocalResult, Params, to_device
from fedgmh.engine.training import Phase, cross_entropy_loss

_SEAMS = ("trainable", "loss_fn", "grad_hook", "draw")
_PLAIN = (int, float, bool, str, type(None))


@dataclass
class _Plan:
    """One phase's batches of all clients, the clients in `order` (the most steps first): index and
    mask [steps, clients, batch], drawn noise [steps, clients, batch, ...] (zero at padded samples) or
    None, `active[s]`: how many leading clients have a batch at step s, and each client's number of
    samples in the callers' order (counted on the host: reading the mask back would wait for the device).
    `empty_batch`: whether some client has a batch without samples (known on the host)."""

    index: torch.Tensor
    mask: torch.Tensor
    noise: torch.Tensor | None
    seen: list[int]
    order: list[int]
    active: list[int]
    empty_batch: bool = False


def _step_order(plans: list[list[torch.Tensor]]) -> tuple[list[int], list[int]]:
    """The clients by their number of steps, most first (ties in the given order), and how many of
    them still have a batch at each step: the clients training at step s are a leading block."""
    order = sorted(range(len(plans)), key=lambda i: -len(plans[i]))
    steps = len(plans[order[0]]) if plans else 0
    return order, [sum(len(plan) > step for plan in plans) for step in range(steps)]


def _layout(fed: Federation, plans: list[list[torch.Tensor]], draws: list[list[torch.Tensor]]) -> _Plan:
    seen = [sum(len(batch) for batch in plan) for plan in plans]
    order, active = _step_order(plans)
    plans, draws = [plans[i] for i in order], [draws[i] for i in order]
    steps, width, n = len(active), fed.batch_size, len(plans)
    # where each sample of each batch goes in the flattened [steps, clients, batch] layout; one
    # scatter instead of a copy per batch (which would be a kernel launch each on a GPU)
    positions = [(step * n + i) * width + j for i, plan in enumerate(plans) for step, batch in enumerate(plan) for j in range(len(batch))]
    positions = to_device(positions, fed.device, torch.long)
    index = torch.zeros(steps * n * width, dtype=torch.long, device=fed.device)
    mask = torch.zeros(steps * n * width, device=fed.device)
    noise = None
    if len(positions):
        index[positions] = torch.cat([b for plan in plans for b in plan])
        mask[positions] = 1.0
        if any(draws):
            drawn = to_device(torch.cat([d for client in draws for d in client]), fed.device)
            noise = drawn.new_zeros(steps * n * width, *drawn.shape[1:])
            noise[positions] = drawn
            noise = noise.view(steps, n, width, *drawn.shape[1:])
    empty = any(len(batch) == 0 for plan in plans for batch in plan)
    return _Plan(index.view(steps, n, width), mask.view(steps, n, width), noise, seen, order, active, empty)


@dataclass
class Request:
    """One run's clients to train in a batched step (`prepare`): its federation (or the view it trains
    on), each client's phases, and per phase and client the batches and draws, and each client's lr."""

    fed: Federation
    phases: list[list[Phase]]
    clients: list[int]
    batches: list[list[list[torch.Tensor]]]
    draws: list[list[list[torch.Tensor]]]
    lrs: list[float]
    #: set by a `group.RunGroup` when trained: the results, or the error that stopped the step
    outcome: object = None
    done: bool = False


def prepare(fed: Federation, phases: list[list[Phase]], clients: list[int], after: Callable[[int], None] | None) -> Request:
    """The step's `Request`: the batches of every phase, drawn in the order of the sequential path:
    client by client, phase by phase, epoch by epoch, each batch's `draw` right after the batch,
    `after(client)` after the client's phases; and the clients' learning rates."""
    _check_alike(phases)
    batches = [[[] for _ in clients] for _ in phases[0]]
    draws = [[[] for _ in clients] for _ in phases[0]]
    for i, client in enumerate(clients):
        for p, phase in enumerate(phases[i]):
            for _ in range(fed.local_epochs if phase.epochs is None else phase.epochs):
                for batch in fed.shuffled_batches(client):
                    batches[p][i].append(batch)
                    if phase.draw is not None:
                        draws[p][i].append(phase.draw(batch))
        if after is not None:
            after(client)
    return Request(fed, phases, clients, batches, draws, [fed.client_lr(c) for c in clients])


def _same_value(x, y) -> bool:
    return x is y or (isinstance(x, _PLAIN) and type(x) is type(y) and x == y)


def _same_owner(a, b) -> bool:
    """Whether two seams are bound to the same object, or to two runs' algorithms of one class that
    declare their seams read only their options (`Algorithm.seams_read_options_only`), which are equal."""
    x, y = getattr(a, "__self__", None), getattr(b, "__self__", None)
    if x is y:
        return True
    return (type(x) is type(y) and getattr(type(x), "seams_read_options_only", False)
            and getattr(x, "options", None) == getattr(y, "options", None))


def _same_function(a, b) -> bool:
    """Equal, or the same code over the same captured values and defaults (a per-client value
    belongs in extra), bound to the same owner (`_same_owner`)."""
    if a is b or a == b:
        return True
    fa, fb = getattr(a, "__func__", a), getattr(b, "__func__", b)
    code = getattr(fa, "__code__", None)
    if code is None or code is not getattr(fb, "__code__", None) or not _same_owner(a, b):
        return False
    captured = [(x.cell_contents, y.cell_contents) for x, y in zip(fa.__closure__ or (), fb.__closure__ or ())]
    captured += list(zip(fa.__defaults__ or (), fb.__defaults__ or ()))
    captured += [(v, (fb.__kwdefaults__ or {}).get(k)) for k, v in (fa.__kwdefaults__ or {}).items()]
    return all(_same_value(x, y) for x, y in captured)


def _unlike(phases: list[list[Phase]]) -> str | None:
    """Why the clients' phases cannot train in one step (None: they differ only in their start and extra tensors)."""
    first = phases[0]
    for own in phases[1:]:
        if len(own) != len(first):
            return "clients with different numbers of phases cannot train in one batched step"
        for a, b in zip(first, own):
            if a.epochs != b.epochs or (a.params is None) != (b.params is None) or not all(_same_function(getattr(a, s), getattr(b, s)) for s in _SEAMS):
                return "the clients' phases differ in more than their start and extra tensors (per-client values belong in Phase.extra)"
    return None


def _check_alike(phases: list[list[Phase]]) -> None:
    """Every client's phases must differ only in their start and extra tensors."""
    reason = _unlike(phases)
    if reason:
        raise ValueError(reason)


def _joinable(a: Federation, b: Federation) -> bool:
    """Whether two runs' clients can share a step: the same data tensors, batch size, convolution and model class."""
    return (a.images is b.images and a.labels is b.labels and a.batch_size == b.batch_size
            and a.options.conv == b.options.conv and type(a.model) is type(b.model))


def _stack_extras(extras: list[Extra]) -> tuple[list[torch.Tensor], list[int | None], object]:
    """The clients' extras as one list of leaves: stacked (vmapped dim 0), or shared (None) where
    every client holds the very same tensor (e.g. the one global model as proximal anchor)."""
    flat = [tree_flatten(extra) for extra in extras]
    spec = flat[0][1]
    if any(s != spec for _, s in flat):
        raise ValueError("the clients' extras differ in structure")
    leaves, dims = [], []
    for column in zip(*(values for values, _ in flat)):
        shared = all(t is column[0] for t in column)
        leaves.append(column[0] if shared else torch.stack(column))
        dims.append(None if shared else 0)
    return leaves, dims, spec


def _reorder(order: torch.Tensor, stacked: Params, leaves: list, dims: list, lrs: torch.Tensor):
    """The stacked models, the stacked extras and the learning rates with the clients in `order`."""
    leaves = [leaf if dim is None else leaf[order] for leaf, dim in zip(leaves, dims)]
    return {k: v[order] for k, v in stacked.items()}, leaves, lrs[order]


def _train_phase(fed: Federation, stacked: Params, phase: Phase, extras: list[Extra], plan: _Plan, lrs: torch.Tensor) -> tuple[Params, torch.Tensor]:
    """SGD over the plan's steps for all clients at once; returns the new stack and the loss sums.
    Step s computes the `plan.active[s]` leading clients of `plan.order` only, updating their rows
    of the stack in place (`stacked` is the caller's own: a new stack, or the last phase's)."""
    loss_fn, hook, names = phase.loss_fn or cross_entropy_loss(fed), phase.grad_hook, list(stacked)
    moving = [k for k in names if phase.trainable is None or phase.trainable(k)]
    leaves, dims, spec = _stack_extras(extras)

    def one_client(train: Params, frozen: Params, x, y, mask, noise, leaves):
        extra = tree_unflatten(leaves, spec)
        if noise is not None:
            extra = {**extra, "noise": noise}
        loss = lambda train: loss_fn({k: train[k] if k in train else frozen[k] for k in names}, x, y, mask, extra)  # noqa: E731
        grads, value = grad_and_value(loss)(train)
        if hook is not None:
            grads = {k: hook(k, train[k], g, extra) for k, g in grads.items()}
        return grads, value

    step_all = vmap(one_client, in_dims=(0, 0, 0, 0, 0, None if plan.noise is None else 0, dims))
    reordered = plan.order != list(range(len(plan.order)))
    if reordered:
        order = to_device(plan.order, fed.device, torch.long)
        stacked, leaves, lrs = _reorder(order, stacked, leaves, dims, lrs)
    loss_sums = torch.zeros(len(extras), device=fed.device)
    for step, n in enumerate(plan.active):
        batch, mask = plan.index[step, :n], plan.mask[step, :n]
        noise = None if plan.noise is None else plan.noise[step, :n]
        train = {k: stacked[k][:n] for k in moving}
        frozen = {k: v[:n] for k, v in stacked.items() if k not in train}
        own = [leaf if dim is None else leaf[:n] for leaf, dim in zip(leaves, dims)]
        grads, losses = step_all(train, frozen, fed.images[batch], fed.labels[batch], mask, noise, own)
        counts = mask.sum(dim=1)
        with torch.no_grad():
            # a batch without samples (never from split_batches; `plan.empty_batch`) leaves its client where it
            # is: its gradient hook alone would move it, and its loss over padding alone may be nan
            _sgd_step([train[k] for k in moving], [grads[k] for k in moving], lrs[:n], counts > 0 if plan.empty_batch else None)
            loss_sums[:n] += losses * counts if not plan.empty_batch else torch.where(counts > 0, losses * counts, 0.0)
    if reordered:
        back = torch.argsort(order)
        stacked, loss_sums = {k: v[back] for k, v in stacked.items()}, loss_sums[back]
    return stacked, loss_sums


def _sgd_step(params: list[torch.Tensor], grads: list[torch.Tensor], lrs: torch.Tensor, moves: torch.Tensor | None) -> None:
    """params[i] -= lr * grads[i] in place, with each client's lr (the rows of every tensor): fused into
    a few multi-tensor kernels (`torch._foreach_*`), the same floats as one tensor at a time; with
    `moves`, only the clients it marks move."""
    if not params:
        return
    rates = [lrs.view(-1, *[1] * (p.dim() - 1)) for p in params]
    steps = torch._foreach_mul(grads, rates)
    if moves is None:
        torch._foreach_sub_(params, steps)
        return
    for param, step in zip(params, steps):
        param.copy_(torch.where(moves.view(-1, *[1] * (param.dim() - 1)), param - step, param))


def train_phases_many(
    fed: Federation, phases: list[list[Phase]], clients: list[int], after: Callable[[int], None] | None = None
) -> list[list[LocalResult]]:
    """`engine.train_phases` for every client of `clients` (phases[i] being clients[i]'s) at once;
    `after(client)` draws what the client draws after its training (`Algorithm.draw_after_training`).
    In a group of runs (`Federation.group`) the step is shared with the other runs' clients."""
    request = prepare(fed, phases, clients, after)
    return fed.group.train(request) if fed.group is not None else train_requests([request])[0]


def train_requests(requests: list[Request], shared: list[int] | None = None) -> list[list[list[LocalResult]]]:
    """Each request's results (per client, per phase), all clients trained in one step when the runs
    can share one (`_joinable`, phases alike across runs), else each run's in its own step. Each run's
    federation counts its own clients' sample passes; `shared` gets, per step trained, the number of
    runs whose clients it held."""
    lead = requests[0]
    phases = [own for request in requests for own in request.phases]
    if len(requests) > 1 and (not all(_joinable(lead.fed, r.fed) for r in requests[1:]) or _unlike(phases)):
        return [train_requests([request], shared)[0] for request in requests]
    if shared is not None:
        shared.append(len(requests))
    fed, width = lead.fed, lead.fed.batch_size
    for request in requests:
        for batches in request.batches:
            request.fed.sample_passes.add(useful=sum(len(b) for own in batches for b in own),
                                          executed=width * sum(len(own) for own in batches))
    results: list[list[LocalResult]] = []
    stacked: Params = {}
    for p, phase in enumerate(phases[0]):
        plan = _layout(fed, [b for r in requests for b in r.batches[p]], [d for r in requests for d in r.draws[p]])
        if phase.params is not None:
            stacked = {k: torch.stack([own[p].params[k].detach() for own in phases]) for k in phase.params}
        lrs = to_device([lr for r in requests for lr in r.lrs], fed.device, next(iter(stacked.values())).dtype)
        stacked, loss_sums = _train_phase(fed, stacked, phase, [own[p].extra for own in phases], plan, lrs)
        # clone each client's slice: a view would keep the whole stack alive as long as one client does;
        # the losses stay on the device (play_round reads all of a round's at once)
        results.append([
            LocalResult({k: v[i].clone() for k, v in stacked.items()}, loss_sums[i], plan.seen[i]) for i in range(len(phases))
        ])
    per_client = [[per_phase[i] for per_phase in results] for i in range(len(phases))]
    starts = [0]
    for request in requests:
        starts.append(starts[-1] + len(request.clients))
    return [per_client[a:b] for a, b in zip(starts, starts[1:])]
