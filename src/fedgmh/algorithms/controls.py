"""Controls, not methods: what a client's own data alone gives, and what its label set alone gives.

`local`: every client trains only its own model; nothing is shared.
`fedavg_lp`: FedAvg's global model, trained exactly as FedAvg's, whose logits at evaluation are
restricted to the labels of the client's training data. On
label-skewed partitions the gap between the two FedAvg rows is the part of a personalised method's
gain that knowing the label set explains. docs/baselines.md, "Controls".
"""

from __future__ import annotations

import torch

from fedgmh.algorithms.averaging import FedAvg, ParameterAveraging
from fedgmh.algorithms.base import Exchange
from fedgmh.cards.controls import PriorOptions
from fedgmh.engine import Params
from fedgmh.priors import label_prior

PRIOR_KEY = "label_prior"  # rides along in the evaluated parameters; never part of the model


class Local(ParameterAveraging):
    """Each client trains its own model from the common initial model; nothing is sent either way.

    ParameterAveraging that shares nothing: the selected clients train (the same draws of clients
    and batches as every FL method, PFLlib's serverlocal), the server only schedules.
    """

    trained_clients_upload = False  # clients_up is 0 every round

    def shares(self, name: str) -> bool:
        return False

    @classmethod
    def exchange(cls, options, sizes, labels, models=None) -> Exchange:
        return Exchange(0, 0, 0)

    def send(self, rnd: int, selected: list[int]) -> None:
        """Nothing to send."""

    def keep(self, client: int, params: Params) -> None:
        self.local[client] = params  # no upload

    def aggregate(self, rnd: int, selected: list[int]) -> None:
        """Nothing to aggregate."""


class FedAvgLabelPrior(FedAvg):
    """FedAvg, evaluated with each client's label prior added to the global model's logits."""

    personalised = True  # the evaluated model differs per client (by its prior only)

    def __init__(self, fed, options: PriorOptions) -> None:
        super().__init__(fed, options)
        pooled = torch.bincount(torch.cat([fed.labels[idx] for idx in fed.train_idx]), minlength=fed.num_classes).double()
        # a list, not an (N, K) tensor: the same tensor object per client keeps the evaluation cache hitting
        self.priors = [label_prior(fed.labels[idx], fed.num_classes, options.prior, pooled).to(fed.device) for idx in fed.train_idx]

    def eval_params(self, client: int) -> Params:
        return {**self.global_params, PRIOR_KEY: self.priors[client]}

    def forward(self, params: Params, x: torch.Tensor) -> torch.Tensor:
        model = {k: v for k, v in params.items() if k != PRIOR_KEY}
        return self.fed.forward(model, x) + params[PRIOR_KEY]
