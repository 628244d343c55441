"""Card of FedCAC (fedgmh.algorithms.fedcac)."""

from __future__ import annotations

from dataclasses import dataclass

from fedgmh.cards import PFLLIB_LOADER, Card
from fedgmh.cards.averaging import AveragingOptions
from fedgmh.config import choice, option

CLASS = "fedgmh.algorithms.fedcac:"


@dataclass(frozen=True)
class CACOptions(AveragingOptions):
    tau: float = option(
        0.5, "share of each parameter tensor marked critical: the top int(tau * n) by |delta * theta|, ties included "
        "(FedCAC authors: 0.5 on CIFAR-10, 0.4 on CIFAR-100; PFLlib's default 1.0 marks nearly everything critical)",
        low=0, high=1,
    )
    beta: int = option(
        170, "schedule of the overlap threshold T_t = mean + ((t + 1) / beta) * (max - mean): critical parameters stop "
        "collaborating after round beta - 1 (authors: 100 on CIFAR-10, 170 on CIFAR-100; PFLlib's default 0 does not run; "
        "scale it with the number of rounds)",
        low=1,
    )
    pool: str = choice(
        "all_uploaded", "selected",
        help="clients whose masks and models enter the overlaps, the threshold and the customised models: every client that "
        "has trained, with its latest model and mask (the paper and the authors' code, where all clients train every round), "
        "or only this round's selected clients (PFLlib)",
    )
    round0_reset: bool = option(
        False, "PFLlib: no customisation after round 0, so the critical positions of round 0's clients take the initial "
        "model's values (PFLlib's customised models start as copies of it) until they train again",
    )


CARDS = (
    Card("fedcac", "FedCAC", CLASS + "FedCAC", options=CACOptions,
         presets={"official": {**PFLLIB_LOADER, "pool": "selected", "round0_reset": True}}),
)
