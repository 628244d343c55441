"""Cards of FedRoD and FedCP (fedgmh.algorithms.decoupled)."""

from __future__ import annotations

from dataclasses import dataclass

from fedgmh.cards import PFLLIB_LOADER, Card
from fedgmh.cards.averaging import AveragingOptions
from fedgmh.config import choice, option

CLASS = "fedgmh.algorithms.decoupled:"


@dataclass(frozen=True)
class FedCPOptions(AveragingOptions):
    lamda: float = option(1.0, "weight of the MMD loss aligning the personal body to the frozen global body", low=0)
    policy: str = choice("softmax", "gumbel", help="r, s = softmax over each feature's pair (paper) or gumbel_softmax, tau 1, in training AND evaluation (PFLlib)")
    sync: str = choice(
        "round_start",
        "after_round",
        help="selected clients receive the global body, head and CPN when the round starts (paper), or (PFLlib) the averaged body goes to ALL clients after "
        "aggregation and the averaged head and CPN only to the clients that just trained",
    )
    context: str = choice(
        "head", "random", "random_shared",
        help="client vector before a client's first training: from its personal head (paper), uniform random per client "
        "(from the run's generator), or one uniform random vector for every client (PFLlib: torch.rand after torch.manual_seed(0))",
    )


CARDS = (
    # clientrod.py steps both of its lr schedulers once per participation, like our engine
    Card("fedrod", "FedRoD", CLASS + "FedRoD", paper_row=10, options=AveragingOptions, presets={"official": PFLLIB_LOADER}),
    # clientcp.py builds its own optimiser and never steps a scheduler: PFLlib's FedCP lr is constant
    Card("fedcp", "FedCP", CLASS + "FedCP", paper_row=5, options=FedCPOptions,
         presets={"official": {**PFLLIB_LOADER, "lr_decay": 1.0, "policy": "gumbel", "sync": "after_round",
                               "context": "random_shared"}}),
)
