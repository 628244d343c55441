"""Parameter averaging with a choice of what is shared: FedAvg shares everything.

Clients keep only their unshared parameters between rounds (nothing for FedAvg), so 100 clients
cost 100 x (unshared size), not 100 models. FedPer (body shared) and LG-FedAvg (head shared) are
this class with another `shared_part`.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import torch

from fedgmh.algorithms.base import Algorithm, Exchange
from fedgmh.engine import LocalResult, Params, Phase
from fedgmh.model import is_body, is_fc1, is_head

#: the parameters each `shared_part` names ("fc1+head": the top two layers, LG-FedAvg's global_part)
SHARED_PARTS = {"model": lambda name: True, "body": is_body, "head": is_head, "fc1+head": lambda name: is_fc1(name) or is_head(name)}


def weighted_mean(models: list[Params], weights) -> Params:
    """sum_i weights[i] * models[i], per tensor, accumulated in the order of `models` from zeros."""
    averaged = {k: torch.zeros_like(v) for k, v in models[0].items()}
    for model, w in zip(models, weights):
        for k, v in model.items():
            averaged[k].add_(v, alpha=float(w))
    return averaged


class ParameterAveraging(Algorithm):
    """Server averages the shared parameters, weighted by train sizes (option `weighting=size`) or
    as the simple mean of the trained clients' uploads (`weighting=uniform`); the rest stays local."""

    personalised = True
    #: what the server averages and sends to every client: a key of SHARED_PARTS (the whole
    #: model, its body, its head, ...)
    shared_part: ClassVar[str] = "model"

    @classmethod
    def shared_part_of(cls, options) -> str:
        """The shared part under these options (a subclass may let an option choose it)."""
        return cls.shared_part

    def shares(self, name: str) -> bool:
        return SHARED_PARTS[self.shared_part_of(self.options)](name)

    @classmethod
    def exchange(cls, options, sizes, labels, models=None) -> Exchange:
        part = cls.shared_part_of(options)
        shared = sizes.fc1 + sizes.head if part == "fc1+head" else getattr(sizes, part)
        return Exchange(shared, shared, shared)  # sent to every client each round, uploaded by the participants

    def __init__(self, fed, options) -> None:
        super().__init__(fed, options)
        initial = fed.initial_params()
        self.global_params: Params = {k: v for k, v in initial.items() if self.shares(k)}
        self.initial_local: Params = {k: v for k, v in initial.items() if not self.shares(k)}
        self.local: dict[int, Params] = {}
        self.uploads: dict[int, Params] = {}

    def client_params(self, client: int) -> Params:
        """The client's current model: the latest global shared part + its own local part."""
        return {**self.global_params, **self.local.get(client, self.initial_local)}

    def send(self, rnd: int, selected: list[int]) -> None:
        # Every client's model (evaluated on every client, see eval_params / client_params) holds
        # the latest shared part, so it goes to ALL clients each round (PFLlib's send_models too).
        for _ in range(self.fed.num_clients):
            self.fed.channel.download(self.global_params)

    def eval_params(self, client: int) -> Params:
        if not self.personalised or not self.initial_local:
            return self.global_params
        return self.client_params(client)

    def start_training(self, rnd: int, client: int) -> list[Phase]:
        return [Phase(self.client_params(client))]

    def finish_training(self, rnd: int, client: int, phases: list[Phase], results: list[LocalResult]) -> LocalResult:
        self.keep(client, results[-1].params)
        return results[-1]

    def keep(self, client: int, params: Params) -> None:
        """Store the unshared part locally and the shared part as this round's upload."""
        if self.initial_local:
            self.local[client] = {k: params[k] for k in self.initial_local}
        self.uploads[client] = self.fed.channel.upload({k: params[k] for k in self.global_params})

    def aggregation_weights(self, selected: list[int]) -> np.ndarray:
        """Each trained client's weight in the average (summing to 1): its share of the trained
        clients' train samples, or 1 / len(selected) with `weighting=uniform`."""
        if self.options.weighting == "uniform":
            return np.full(len(selected), 1.0 / len(selected))
        sizes = self.fed.train_sizes()[selected].astype(float)
        return sizes / sizes.sum()

    def aggregate(self, rnd: int, selected: list[int]) -> None:
        self.global_params = weighted_mean([self.uploads.pop(client) for client in selected], self.aggregation_weights(selected))


class FedAvg(ParameterAveraging):
    """McMahan et al. 2017: local SGD on the global model, weighted average; global model evaluated."""

    personalised = False
