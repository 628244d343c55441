"""Many clients' evaluation in a few batched passes (torch.func.vmap over stacked models), under
the engine option `eval_batched` (`rounds.evaluator`)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.func import vmap

from fedgmh.engine.evaluation import can_stack
from fedgmh.engine.federation import Federation, Forward, Params, to_device


#: padded test samples of one batched evaluation pass (all its clients together): on a GPU a pass of
#: 4096 MNIST-shaped samples holds about 0.6 GB of activations (without gradients), so twelve runs
#: sharing a card stay far below its memory; a few passes evaluate 100 clients instead of 100 passes
EVAL_SAMPLES_PER_PASS = 4096


@dataclass
class EvalRequest:
    """One run's models to evaluate in batched passes (`evaluate_requests`): models[i] on the test split of
    clients[i], `priors[i]` added to its logits (eval_prior) or None."""

    fed: Federation
    models: list[Params]
    clients: list[int]
    forward: Forward
    priors: list[torch.Tensor] | None = None
    #: set by a `group.RunGroup` when evaluated: the sums, or the error that stopped the passes
    outcome: object = None
    done: bool = False


def evaluate_many(fed: Federation, models: list[Params], clients: list[int], forward: Forward,
                  priors: list[torch.Tensor] | None = None) -> torch.Tensor:
    """`engine.predict`'s sums for models[i] on the test split of clients[i]: a [models, 2] float64
    tensor (correct predictions, summed cross-entropy) on the device, to float tolerance, from vmap
    passes over the stacked models. `priors[i]` is added to model i's logits (eval_prior). In a group of
    runs (`Federation.group`) the passes are shared with the other runs' models (`evaluate_requests`)."""
    request = EvalRequest(fed, models, clients, forward, priors)
    return fed.group.evaluate(request) if fed.group is not None else evaluate_requests([request])[0]


def _same_forward(a: Forward, b: Forward) -> bool:
    """Equal, or the same function bound to two runs' objects of one class with equal options: a forward
    reads only its parameters, its owner's options and the model's architecture (`Algorithm.forward`)."""
    if a is b or a == b:
        return True
    x, y = getattr(a, "__self__", None), getattr(b, "__self__", None)
    return (getattr(a, "__func__", None) is not None and getattr(a, "__func__", None) is getattr(b, "__func__", None)
            and type(x) is type(y) and getattr(x, "options", None) == getattr(y, "options", None))


def _buckets_shape(fed: Federation) -> list[tuple[list[int], int]]:
    return [(bucket.clients, bucket.width) for bucket in fed.test_buckets]


def _joinable(a: EvalRequest, b: EvalRequest) -> bool:
    """Whether two runs' models can share passes: the same data tensors, model class, convolution, pass
    size and forward, test buckets of the same clients and widths (so the passes have the shapes each
    run's own would have), priors for both or neither, and models that stack."""
    x, y = a.fed, b.fed
    return (x.images is y.images and x.labels is y.labels and type(x.model) is type(y.model) and x.options.conv == y.options.conv
            and x.options.eval_batch_size == y.options.eval_batch_size and _same_forward(a.forward, b.forward)
            and (a.priors is None) == (b.priors is None) and _buckets_shape(x) == _buckets_shape(y)
            and (not a.models or not b.models or can_stack([a.models[0], b.models[0]])))


def evaluate_requests(requests: list[EvalRequest], shared: list[int] | None = None) -> list[torch.Tensor]:
    """Each request's sums (`evaluate_many`), all requests' models in the same passes when the runs can
    share them (`_joinable`), else each run's in passes of its own; `shared` gets, per evaluation, the
    number of runs whose models it held.

    The models go by their client's bucket (`Federation.test_buckets`: splits of about the same length,
    padded to the bucket's longest), each bucket's in passes of the same shapes whoever is in them: the
    same number of models (the last pass is filled up with copies of its first model, which evaluate
    nothing), each with the bucket's width, in chunks of `eval_batch_size` samples. A client is always
    in the same bucket, so its sums do not depend on which clients, of its run or another, it is
    evaluated with, and a result the evaluation cache kept equals a new one bit for bit, also after a
    resume. At most `EVAL_SAMPLES_PER_PASS` samples per pass. Each run's federation counts the passes'
    samples (`Federation.evaluation_passes`): its models' padded rows executed, their real samples
    useful; a pass's filled-up rows count as executed by the run of its first model."""
    lead = requests[0]
    if len(requests) > 1 and not all(_joinable(lead, r) for r in requests[1:]):
        return [evaluate_requests([request], shared)[0] for request in requests]
    if shared is not None and any(request.models for request in requests):
        shared.append(sum(1 for request in requests if request.models))
    fed = lead.fed
    place = {client: (b, row) for b, bucket in enumerate(fed.test_buckets) for row, client in enumerate(bucket.clients)}
    by_bucket: dict[int, list[tuple[int, int]]] = {}  # bucket -> (request, position), request by request
    for r, request in enumerate(requests):
        for position, client in enumerate(request.clients):
            by_bucket.setdefault(place[client][0], []).append((r, position))
    pieces: list[list[torch.Tensor]] = [[] for _ in requests]
    orders: list[list[int]] = [[] for _ in requests]
    for b, slots in sorted(by_bucket.items()):
        width = max(1, min(fed.test_buckets[b].width, fed.options.eval_batch_size))
        per_pass = max(1, min(len(fed.test_buckets[b].clients), EVAL_SAMPLES_PER_PASS // width))
        for start in range(0, len(slots), per_pass):
            part = slots[start : start + per_pass]
            sums, offset = _evaluate_part(requests, b, part, per_pass, place), 0
            for r, positions in _stretches(part):
                pieces[r].append(sums[offset : offset + len(positions)])
                orders[r] += positions
                offset += len(positions)
    results = []
    for request, own, order in zip(requests, pieces, orders):
        result = torch.zeros(len(request.models), 2, dtype=torch.float64, device=fed.device)
        if own:
            result[to_device(order, fed.device, torch.long)] = torch.cat(own)
        results.append(result)
    return results


def _evaluate_part(requests: list[EvalRequest], b: int, part: list[tuple[int, int]], per_pass: int, place: dict) -> torch.Tensor:
    """One pass of bucket `b` over the models `part` ((request, position) pairs, request by request),
    filled up to `per_pass` with copies of its first; the sums of the real ones, in `part`'s order."""
    first = requests[part[0][0]]
    slots = part + [part[0]] * (per_pass - len(part))
    models, index, real = [], [], []
    start = 0
    for r, positions in _stretches(slots):  # each run's rows from its own bucket, in one gather
        request = requests[r]
        bucket = request.fed.test_buckets[b]
        rows = [place[request.clients[p]][1] for p in positions]
        on_device = to_device(rows, request.fed.device, torch.long)
        models += [request.models[p] for p in positions]
        index.append(bucket.index[on_device])
        real.append(bucket.mask[on_device])
        useful = sum(bucket.lengths[row] for i, row in enumerate(rows, start) if i < len(part))
        request.fed.evaluation_passes.add(useful=useful, executed=len(rows) * bucket.width)
        start += len(rows)
    stacked = {k: torch.stack([m[k] for m in models]) for k in models[0]}
    real_mask = torch.cat(real) & (torch.arange(per_pass, device=first.fed.device) < len(part))[:, None]
    prior = None if first.priors is None else torch.stack([requests[r].priors[p] for r, p in slots])
    return _evaluate_pass(first.fed, stacked, torch.cat(index), real_mask, first.forward, prior)[: len(part)]


def _stretches(slots: list[tuple[int, int]]) -> list[tuple[int, list[int]]]:
    """(request, its positions) for each stretch of consecutive slots of one request."""
    return [(r, [p for _, p in stretch]) for r, stretch in itertools.groupby(slots, key=lambda slot: slot[0])]


def _evaluate_pass(fed: Federation, stacked: Params, index: torch.Tensor, real: torch.Tensor, forward: Forward,
                   prior: torch.Tensor | None) -> torch.Tensor:
    """[correct, loss sum] of each stacked model on its samples `index` where `real`."""

    def one_model(params, x, y, real, prior):
        logits = forward(params, x)
        if prior is not None:
            logits = logits + prior
        hits = (logits.argmax(dim=1) == y) & real
        # where, not a product: a padded copy of a sample whose loss is inf must add 0, not nan
        losses = torch.where(real, F.cross_entropy(logits, y, reduction="none").double(), 0.0)
        return torch.stack([hits.double().sum(), losses.sum()])

    evaluate = vmap(one_model, in_dims=(0, 0, 0, 0, None if prior is None else 0))
    total = torch.zeros(index.shape[0], 2, dtype=torch.float64, device=fed.device)
    with torch.no_grad():
        for start in range(0, index.shape[1], fed.options.eval_batch_size):
            cols = slice(start, start + fed.options.eval_batch_size)
            batch = index[:, cols]
            total += evaluate(stacked, fed.images[batch], fed.labels[batch], real[:, cols], prior)
    return total
