"""Cards of FedProx, FedPer, LG-FedAvg and FedRep (fedgmh.algorithms.sharing)."""

from __future__ import annotations

from dataclasses import dataclass

from fedgmh.cards import PFLLIB_LOADER, Card
from fedgmh.cards.averaging import AveragingOptions
from fedgmh.config import choice, option

CLASS = "fedgmh.algorithms.sharing:"


@dataclass(frozen=True)
class FedProxOptions(AveragingOptions):
    mu: float = option(0.0, "weight of the proximal term (mu/2)*||w - w_global||^2 (PFLlib default 0.0 = FedAvg)", low=0)


@dataclass(frozen=True)
class LGFedAvgOptions(AveragingOptions):
    global_part: str = choice(
        "head", "fc1+head",
        help="the global (averaged) layers: the head (the project's spec, and PFLlib's) or the body's last layer fc1 "
        "and the head (the original paper's global model is its top layers); the rest stays on the client",
    )


@dataclass(frozen=True)
class FedRepOptions(AveragingOptions):
    plocal_epochs: int = option(1, "epochs of head-only training before the body epochs (PFLlib default 1)", low=0)


CARDS = (
    Card("fedprox", "FedProx", CLASS + "FedProx", paper_row=2, options=FedProxOptions, presets={"official": PFLLIB_LOADER}),
    Card("fedper", "FedPer", CLASS + "FedPer", paper_row=8, options=AveragingOptions, presets={"official": PFLLIB_LOADER}),
    # PFLlib's serverlg.py averages model.head only
    Card("lgfedavg", "LG-FedAvg", CLASS + "LGFedAvg", paper_row=11, options=LGFedAvgOptions,
         presets={"official": {**PFLLIB_LOADER, "global_part": "head"}}),
    Card("fedrep", "FedRep", CLASS + "FedRep", paper_row=9, options=FedRepOptions, presets={"official": PFLLIB_LOADER}),
)
