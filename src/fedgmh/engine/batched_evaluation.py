"""Many clients' evaluation in a few batched passes (torch.func.vmap over stacked models), under
the engine option `eval_batched` (`rounds.evaluator`)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.func import vmap

from fedgmh.engine.federation import Federation, Forward, Params, to_device


#: padded test samples of one batched evaluation pass (all its clients together): on a GPU a pass of
#: 4096 MNIST-shaped samples holds about 0.6 GB of activations (without gradients), so twelve runs
#: sharing a card stay far below its memory; a few passes evaluate 100 clients instead of 100 passes
EVAL_SAMPLES_PER_PASS = 4096


def evaluate_many(fed: Federation, models: list[Params], clients: list[int], forward: Forward,
                  priors: list[torch.Tensor] | None = None) -> torch.Tensor:
    """`engine.predict`'s sums for models[i] on the test split of clients[i]: a [models, 2] float64
    tensor (correct predictions, summed cross-entropy) on the device, to float tolerance, from vmap
    passes over the stacked models. `priors[i]` is added to model i's logits (eval_prior).

    The clients go by their bucket (`Federation.test_buckets`: splits of about the same length, padded
    to the bucket's longest), each bucket's in passes of the same shapes whoever is in them: the same
    number of models (the last pass is filled up with copies of its first model, which evaluate
    nothing), each with the bucket's width, in chunks of `eval_batch_size` samples. A client is always
    in the same bucket, so its sums do not depend on which clients it is evaluated with, and a result
    the evaluation cache kept equals a new one bit for bit, also after a resume. At most
    `EVAL_SAMPLES_PER_PASS` samples per pass. The federation counts the passes' samples
    (`Federation.evaluation_passes`: the padding and the filled-up models executed, the real ones useful)."""
    buckets = fed.test_buckets
    place = {client: (b, row) for b, bucket in enumerate(buckets) for row, client in enumerate(bucket.clients)}
    by_bucket: dict[int, list[int]] = {}
    for position, client in enumerate(clients):
        by_bucket.setdefault(place[client][0], []).append(position)
    order, sums = [], []
    for b, positions in sorted(by_bucket.items()):
        bucket = buckets[b]
        width = max(1, min(bucket.width, fed.options.eval_batch_size))
        per_pass = max(1, min(len(bucket.clients), EVAL_SAMPLES_PER_PASS // width))
        for start in range(0, len(positions), per_pass):
            part = positions[start : start + per_pass]
            filler = per_pass - len(part)
            first = part[0]
            stacked = {k: torch.stack([models[i][k] for i in part] + [models[first][k]] * filler) for k in models[first]}
            rows = [place[clients[i]][1] for i in part]
            rows += [rows[0]] * filler
            on_device = to_device(rows, fed.device, torch.long)
            real = bucket.mask[on_device] & (torch.arange(per_pass, device=fed.device) < len(part))[:, None]
            prior = None if priors is None else torch.stack([priors[i] for i in part] + [priors[first]] * filler)
            sums.append(_evaluate_pass(fed, stacked, bucket.index[on_device], real, forward, prior)[: len(part)])
            order += part
            fed.evaluation_passes.add(useful=sum(bucket.lengths[row] for row in rows[: len(part)]), executed=per_pass * bucket.width)
    if not sums:
        return torch.zeros(0, 2, dtype=torch.float64, device=fed.device)
    result = torch.empty(len(models), 2, dtype=torch.float64, device=fed.device)
    result[to_device(order, fed.device, torch.long)] = torch.cat(sums)
    return result


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
