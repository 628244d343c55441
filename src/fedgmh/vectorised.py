"""All selected clients' plain local SGD in one batched step (torch.func.vmap over stacked models).

`local_train_many` gives what `engine.local_train` gives for each client, to float tolerance: the
same shuffles (drawn from the federation's generator in the sequential order: client by client,
epoch by epoch), the same batches, the same per-client learning rates. Clients whose data runs out
earlier, or whose last batch is partial, are padded with masked samples that add nothing to the
loss and leave their parameters unchanged. Selected through the engine option `vectorise` (on by
default for CUDA only: on CPU the batched convolution is slower than one client after another).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.func import functional_call, grad_and_value, vmap

from fedgmh.engine import Federation, LocalResult, Params


def _batch_plan(fed: Federation, clients: list[int], epochs: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Index [steps, clients, batch] and mask of real samples, from the sequential shuffles."""
    plans = [[b for _ in range(epochs) for b in fed.shuffled_batches(client)] for client in clients]
    steps = max((len(plan) for plan in plans), default=0)
    width = fed.batch_size
    # where each sample of each batch goes in the flattened [steps, clients, batch] layout; one
    # scatter instead of a copy per batch (which would be a kernel launch each on a GPU)
    positions = [
        (step * len(clients) + i) * width + j for i, plan in enumerate(plans) for step, batch in enumerate(plan) for j in range(len(batch))
    ]
    positions = torch.tensor(positions, dtype=torch.long, device=fed.device)
    index = torch.zeros(steps * len(clients) * width, dtype=torch.long, device=fed.device)
    mask = torch.zeros(steps * len(clients) * width, device=fed.device)
    if len(positions):
        index[positions] = torch.cat([b for plan in plans for b in plan])
        mask[positions] = 1.0
    return index.view(steps, len(clients), width), mask.view(steps, len(clients), width)


def local_train_many(fed: Federation, starts: list[Params], clients: list[int], epochs: int | None = None) -> list[LocalResult]:
    """Plain SGD on cross-entropy for every client of `clients`, from `starts` (one per client)."""
    epochs = fed.local_epochs if epochs is None else epochs
    index, mask = _batch_plan(fed, clients, epochs)
    names = list(starts[0])
    stacked = {k: torch.stack([start[k].detach() for start in starts]) for k in names}
    lrs = torch.tensor([fed.client_lr(c) for c in clients], dtype=stacked[names[0]].dtype, device=fed.device)

    def masked_loss(params: Params, x: torch.Tensor, y: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        per_sample = F.cross_entropy(functional_call(fed.model, params, (x,)), y, reduction="none")
        return (per_sample * m).sum() / m.sum().clamp(min=1.0)  # = the mean over the real samples

    step_all = vmap(grad_and_value(masked_loss))
    loss_sums = torch.zeros(len(clients), device=fed.device)
    for step in range(index.shape[0]):
        batch = index[step]
        grads, losses = step_all(stacked, fed.images[batch], fed.labels[batch], mask[step])
        counts = mask[step].sum(dim=1)
        with torch.no_grad():
            for k in names:
                scale = lrs.view(-1, *[1] * (stacked[k].dim() - 1))
                stacked[k] = stacked[k] - scale * grads[k]  # padded-out clients have zero gradients
            loss_sums += losses * counts
    seen = mask.sum(dim=(0, 2)).tolist()
    # clone each client's slice: a view would keep the whole stack alive as long as one client does
    return [
        LocalResult({k: stacked[k][i].clone() for k in names}, float(loss_sums[i]), int(seen[i]))
        for i in range(len(clients))
    ]
