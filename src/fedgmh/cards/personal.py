"""Cards of Ditto, FedAMP and FedFomo (fedgmh.algorithms.personal)."""

from __future__ import annotations

from dataclasses import dataclass

from fedgmh.cards import PFLLIB_LOADER, Card
from fedgmh.cards.averaging import AveragingOptions
from fedgmh.config import RangedOptions, choice, option

CLASS = "fedgmh.algorithms.personal:"


@dataclass(frozen=True)
class DittoOptions(AveragingOptions):
    mu: float = option(0.0, "weight of (mu/2)*||v - w_global||^2 in the personal loss (PFLlib default)", low=0)
    plocal_epochs: int = option(1, "epochs of personal training per participation (PFLlib default)", low=1)
    report: str = choice(
        "personal", "max_of_both",
        help="accuracy reported each round: the personal models' (paper), or the better of global and personal (PFLlib logs both in one list)",
    )


@dataclass(frozen=True)
class AMPOptions(RangedOptions):
    alphaK: float = option(1.0, "attention step size alpha_k: xi_ij = alphaK * exp(-||w_i - w_j||^2 / sigma) / sigma (PFLlib default)",
                           low=0, low_open=True)
    lamda: float = option(1.0, "proximal weight: the local loss adds (lamda / (2 alphaK)) * ||w - u_i||^2 (PFLlib default)", low=0)
    sigma: float = option(1.0, "scale of the attention function (PFLlib default)", low=0, low_open=True)
    proximal: str = choice(
        "gradient", "detached",
        help="the proximal term trains the model (paper) or is computed on detached tensors, i.e. plain SGD (PFLlib)",
    )
    cloud: str = choice(
        "all_uploaded", "last_round",
        help="models mixed into u_i: the last upload of every client that has uploaded (paper) or only the previous round's uploads (PFLlib)",
    )


@dataclass(frozen=True)
class FomoOptions(RangedOptions):
    M: int = option(5, "models a selected client downloads (PFLlib default)", low=1)
    val_ratio: float = option(0.2, "share of a client's train split, taken from its end, used as validation set (PFLlib)",
                              low=0, high=1, low_open=True, high_open=True)
    epsilon: float = option(0.3, "epsilon-greedy: initial probability that a download slot picks a random client (official FedFomo code)",
                             low=0, high=1)
    epsilon_decay: float = option(0.05, "epsilon-greedy: epsilon decreases by this much per round (official FedFomo code)", low=0)
    selection: str = choice(
        "epsilon_greedy", "top_m",
        help="downloads: epsilon-greedy over other clients that have uploaded (paper) or the top M of the affinity row over all clients, self included (PFLlib)",
    )
    baseline: str = choice(
        "current", "pre_training",
        help="theta_old: the client's current model (paper) or its model before its last local training (PFLlib's old_model)",
    )
    val_loss: str = choice("sample_mean", "batch_mean", help="validation loss: mean over samples (paper) or over batches (PFLlib)")
    local_order: str = choice("shuffled", "fixed", help="local training batches: reshuffled every epoch (paper) or in fixed order (PFLlib: shuffle=False)")


CARDS = (
    Card("ditto", "Ditto", CLASS + "Ditto", paper_row=3, options=DittoOptions,
         presets={"official": {**PFLLIB_LOADER, "report": "max_of_both"}}),
    Card("fedamp", "FedAMP", CLASS + "FedAMP", paper_row=4, options=AMPOptions,
         presets={"official": {**PFLLIB_LOADER, "proximal": "detached", "cloud": "last_round"}}),
    Card("fedfomo", "FedFomo", CLASS + "FedFomo", paper_row=6, options=FomoOptions,
         presets={"official": {**PFLLIB_LOADER, "selection": "top_m", "baseline": "pre_training", "val_loss": "batch_mean",
                               "local_order": "fixed"}}),
)
