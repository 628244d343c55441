"""Clients' test splits grouped by length for batched evaluation (`Federation.test_buckets`), so a
pass pads each split only to the longest of its bucket."""

from __future__ import annotations

from dataclasses import dataclass

import torch


def bucket_by_length(lengths: list[int], fill: float) -> list[list[int]]:
    """Clients (by index) grouped by their test-split length, longest first: a bucket takes the next
    longest clients while padding them to its longest keeps at least `fill` of its samples real. From
    the lengths alone, so a client's bucket never changes during a run (0: one bucket of all clients)."""
    order = sorted(range(len(lengths)), key=lambda c: (-lengths[c], c))
    buckets: list[list[int]] = []
    real = 0
    for client in order:
        if buckets:
            bucket = buckets[-1]
            width = lengths[bucket[0]]
            if real + lengths[client] >= fill * width * (len(bucket) + 1):
                bucket.append(client)
                real += lengths[client]
                continue
        buckets.append([client])
        real = lengths[client]
    return buckets


@dataclass
class EvalBucket:
    """Clients whose test splits are evaluated together (`Federation.test_buckets`): `index`
    [clients, width] holds each one's test samples padded with sample 0 to the bucket's longest split,
    `mask` its real ones, `lengths` (on the host) how many."""

    clients: list[int]
    index: torch.Tensor
    mask: torch.Tensor
    lengths: list[int]

    @staticmethod
    def of(test_idx: list[torch.Tensor], clients: list[int], device: torch.device) -> EvalBucket:
        lengths = [len(test_idx[c]) for c in clients]
        width = max(lengths, default=0)
        index = torch.zeros(len(clients), width, dtype=torch.long, device=device)
        for row, client in enumerate(clients):
            index[row, : lengths[row]] = test_idx[client]
        mask = torch.arange(width, device=device) < torch.tensor(lengths, device=device)[:, None]
        return EvalBucket(clients, index, mask, lengths)

    @property
    def width(self) -> int:
        return self.index.shape[1]
