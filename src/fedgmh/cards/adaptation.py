"""Cards of FedBABU and Per-FedAvg (fedgmh.algorithms.adaptation)."""

from __future__ import annotations

from dataclasses import dataclass

from fedgmh.cards import PFLLIB_LOADER, Card
from fedgmh.cards.averaging import AveragingOptions
from fedgmh.config import choice, option

CLASS = "fedgmh.algorithms.adaptation:"


@dataclass(frozen=True)
class FedBABUOptions(AveragingOptions):
    finetune_epochs: int = option(10, "epochs of fine-tuning before the personalised evaluation (PFLlib -fte default 10; the paper: 'a few')", low=0)
    finetune_parts: str = choice(
        "all", "head", "body",
        help="what fine-tuning trains: the whole model (paper, PFLlib's ['base', 'head'], FL-bench), only the head or only the body",
    )
    finetune_at: str = choice(
        "last", "every_eval",
        help="fine-tune at the final evaluation only (PFLlib: once after the last round) or before every evaluation (FL-bench)",
    )


#: Per-FedAvg's smallest finite-difference step: float32's resolution (2**-23); a smaller step vanishes in
#: w + delta * v, so the difference quotient is 0 / (2 delta) -- NaN once 2 delta underflows
MIN_FD_STEP = 2.0**-23


@dataclass(frozen=True)
class PerFedAvgOptions(AveragingOptions):
    order: str = choice(
        "first", "hf", "exact",
        help="meta-gradient: first-order (paper's FO, PFLlib, FL-bench default), Hessian-free finite difference on a third batch "
        "(paper's HF, FL-bench version=hf) or exact second order by double back-propagation",
    )
    beta: float = option(0.0, "outer (meta) step size; 0 = the client's current lr (PFLlib: beta = the initial lr; FL-bench 1e-3)", low=0)
    beta_decay: bool = option(True, "the outer step decays with the client's lr like every lr here (PFLlib: never decayed)")
    delta: float = option(1e-3, "finite-difference step of order=hf (FL-bench default)", low=MIN_FD_STEP,
                          why="2**-23, float32's resolution: a smaller finite-difference step vanishes in w + delta * v")
    eval_steps: int = option(1, "SGD steps (eval_data=batch) or epochs (eval_data=epoch) of personalisation before evaluation; 0 = evaluate w", low=0)
    eval_data: str = choice(
        "batch", "epoch",
        help="personalisation data: one batch of B train samples (paper, PFLlib) or full epochs over the train split (FL-bench fine-tuning)",
    )
    double_train: bool = option(False, "each selected client runs its local training twice per round, its lr decaying after each (PFLlib)")


CARDS = (
    # PFLlib fine-tunes the whole model once, after the last round, as the defaults do
    Card("fedbabu", "FedBABU", CLASS + "FedBABU", options=FedBABUOptions, presets={"official": PFLLIB_LOADER}),
    # the paper's simple mean; PFLlib weights by train size, trains twice per round with a fixed beta
    Card("perfedavg", "Per-FedAvg", CLASS + "PerFedAvg", options=PerFedAvgOptions, defaults={"weighting": "uniform"},
         presets={"official": {**PFLLIB_LOADER, "weighting": "size", "beta_decay": False, "double_train": True}}),
)
