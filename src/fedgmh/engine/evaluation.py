"""Evaluation: every client's model on its own test split, one pass per client or in vmap passes,
with a cache of results for models that did not change."""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from fedgmh.config import EngineOptions
from fedgmh.engine.federation import EvaluateMany, Federation, Forward, Params

@torch.no_grad()
def predict(fed: Federation, params: Params, idx: torch.Tensor, forward: Forward | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample correctness (bool) and cross-entropy of the model on samples `idx`."""
    forward = forward or fed.forward
    correct, losses = [], []
    for start in range(0, len(idx), fed.options.eval_batch_size):
        batch = idx[start : start + fed.options.eval_batch_size]
        logits = forward(params, fed.images[batch])
        y = fed.labels[batch]
        correct.append(logits.argmax(dim=1) == y)
        losses.append(F.cross_entropy(logits, y, reduction="none"))
    if not correct:
        return torch.zeros(0, dtype=torch.bool, device=fed.device), torch.zeros(0, device=fed.device)
    if len(correct) == 1:  # a client's test split is usually one batch: no copy
        return correct[0], losses[0]
    return torch.cat(correct), torch.cat(losses)


def summed_loss(fed: Federation, params: Params, idx: torch.Tensor, forward: Forward | None = None) -> float:
    """Summed cross-entropy of the model on samples `idx`."""
    return float(predict(fed, params, idx, forward)[1].double().sum())


class EvalCache:
    """Each client's last evaluation result, reused while its model is unchanged.

    "Unchanged" = made of the very same tensor objects, none modified in place since (tensor
    version counters), so a reused result is exactly what a new pass would give. Results are per
    client, also when several clients shared one pass (e.g. those still holding the initial model).
    """

    def __init__(self) -> None:
        self.entries: dict[int, tuple[tuple, tuple[float, float]]] = {}

    @staticmethod
    def _signature(params: Params) -> tuple:
        return tuple((t, t._version) for t in params.values())  # holds the tensors: ids stay unique

    def get(self, client: int, params: Params) -> tuple[float, float] | None:
        entry = self.entries.get(client)
        if entry is None or len(entry[0]) != len(params):
            return None
        same = all(old is t and version == t._version for (old, version), t in zip(entry[0], params.values()))
        return entry[1] if same else None

    def put(self, client: int, params: Params, result: tuple[float, float], signature: tuple | None = None) -> None:
        """Remember `result` for `params`; `signature`: `_signature(params)` taken when the result
        was computed, if the tensors may have changed in place since."""
        self.entries[client] = (self._signature(params) if signature is None else signature, result)


def _label_prior(fed: Federation, client: int) -> torch.Tensor:
    from fedgmh.priors import label_prior

    return label_prior(fed.labels[fed.train_idx[client]], fed.num_classes, fed.options.eval_prior).to(fed.device)


def with_label_prior(fed: Federation, client: int, forward: Forward | None) -> Forward:
    """`forward` with the client's mask prior added (engine option eval_prior=mask)."""
    forward, prior = forward or fed.forward, _label_prior(fed, client)
    return lambda params, x: forward(params, x) + prior


def evaluate_clients(
    fed: Federation, params_of: Callable[[int], Params], forward: Forward | None = None, cache: EvalCache | None = None,
    many: EvaluateMany | None = None,
) -> dict[str, float]:
    """Evaluate each client's model on its own test split: pooled accuracy, mean / std over clients,
    loss, and `client_acc`, the array of each client's accuracy.

    One pass per client, also when clients share a model: a sample's logits then never depend on
    which other clients happen to be in the same batch, so a cached result is bit-identical to a
    fresh one (and on CPU batches of a client's ~150-200 samples run as fast as batches of 1000).
    With `many` (`rounds.evaluator`: `batched_evaluation.evaluate_many` under engine option
    eval_batched) the clients to evaluate go through a few vmap passes instead, where their models
    can be stacked (the same sums to float tolerance, and as independent of the other clients). Each
    client's counts are summed on the device and all of them read in one transfer at the end (one
    host sync per call, not two per client).
    """
    correct = np.zeros(fed.num_clients)
    losses = np.zeros(fed.num_clients)
    total = np.array([len(idx) for idx in fed.test_idx], dtype=float)
    fresh = []  # (client, params, their signature now)
    for client in range(fed.num_clients):
        params = params_of(client)
        cached = cache.get(client, params) if cache is not None else None
        if cached is None:
            fresh.append((client, params, EvalCache._signature(params) if cache is not None else None))
        else:
            correct[client], losses[client] = cached
    # with `many`, also when nothing is fresh: the runs of a group meet at each evaluation (`engine.group`)
    read = _evaluation_sums(fed, [c for c, *_ in fresh], [p for _, p, _ in fresh], forward, many).tolist() if fresh or many else []
    for (client, params, signature), (hits, loss) in zip(fresh, read):
        correct[client], losses[client] = hits, loss
        if cache is not None:
            cache.put(client, params, (hits, loss), signature)
    loss_sum = float(losses.sum())
    accs = correct / np.maximum(total, 1)
    return {
        "test_acc": float(correct.sum() / total.sum()),
        "test_acc_mean": float(accs.mean()),
        "test_acc_std": float(accs.std()),
        "test_loss": float(loss_sum / total.sum()),
        "client_acc": accs,  # per client, for the run's clients.csv (not a metrics.csv column)
    }


def _evaluation_sums(fed: Federation, clients: list[int], models: list[Params], forward: Forward | None,
                     many: EvaluateMany | None) -> torch.Tensor:
    """[correct, loss sum] of each client's model on its test split, as one float64 tensor on the device."""
    forward, masked = forward or fed.forward, fed.options.eval_prior != "none"
    if many is not None and can_stack(models):
        return many(fed, models, clients, forward, [_label_prior(fed, c) for c in clients] if masked else None)
    sums = []
    for client, params in zip(clients, models):
        fed.evaluation_passes.add(useful=len(fed.test_idx[client]), executed=len(fed.test_idx[client]))
        hits, sample_losses = predict(fed, params, fed.test_idx[client], with_label_prior(fed, client, forward) if masked else forward)
        sums.append(torch.stack([hits.sum().double(), sample_losses.double().sum()]))
    return torch.stack(sums)


def can_stack(models: list[Params]) -> bool:
    """Whether the models can be stacked: the same parameter names (in the same order), shapes and dtypes."""
    if not models:
        return True
    first = models[0]
    return all(list(m) == list(first) and all(m[k].shape == v.shape and m[k].dtype == v.dtype for k, v in first.items())
               for m in models[1:])


def should_evaluate(rnd: int, rounds: int, options: EngineOptions) -> bool:
    return options.evaluates(rnd, rounds)

