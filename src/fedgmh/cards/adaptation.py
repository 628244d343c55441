"""Cards of FedBABU and Per-FedAvg (fedgmh.algorithms.adaptation)."""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

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
    # dataclass defaults: what records made before these options ran; fedbabu's defaults are the authors' budget (FEDBABU_AUTHORS_BUDGET)
    finetune_lr: float = option(0.0, "fine-tuning lr; 0 = the client's current training lr (PFLlib; the authors' code: 1e-3)", low=0)
    finetune_momentum: float = option(0.0, "fine-tuning SGD momentum, as torch.optim.SGD (PFLlib: 0; the authors' code: 0.9)",
                                      low=0, high=1, high_open=True)
    finetune_from: str = choice(
        "final", "best",
        help="the model fine-tuning starts from: the final global body, or (best: the authors' code) the global body of the "
        "evaluated round, after at least one round, whose global model (initial head, no fine-tuning) scored the best "
        "accuracy pooled over the clients' test splits; best selects on the TEST split, so it is an upper-bound reading",
    )


#: FedBABU's authors' fine-tuning budget (jhoon-oh/FedBABU: `--ft_ep 5`; analysis.ipynb: SGD lr 1e-3, momentum 0.9): the default
FEDBABU_AUTHORS_BUDGET = MappingProxyType({"finetune_epochs": 5, "finetune_lr": 1e-3, "finetune_momentum": 0.9})
#: the authors' whole fine-tuning, their budget from their best round's model (main_fed.py keeps it): `preset=authors`;
#: not the default, as the round is chosen on the test split
FEDBABU_AUTHORS = MappingProxyType({**FEDBABU_AUTHORS_BUDGET, "finetune_from": "best"})
#: PFLlib's fine-tuning (`-fte 10` epochs at the client's lr, plain SGD) and loader: `preset=official`
FEDBABU_PFLLIB = MappingProxyType({**PFLLIB_LOADER, "finetune_epochs": 10, "finetune_lr": 0.0, "finetune_momentum": 0.0})


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
    # the whole model fine-tuned once, after the last round: the authors' budget from the final body, from their best
    # round's body (authors), or PFLlib's budget (official)
    Card("fedbabu", "FedBABU", CLASS + "FedBABU", options=FedBABUOptions, defaults=FEDBABU_AUTHORS_BUDGET,
         presets={"official": FEDBABU_PFLLIB, "authors": FEDBABU_AUTHORS}),
    # the paper's simple mean; PFLlib weights by train size, trains twice per round with a fixed beta
    Card("perfedavg", "Per-FedAvg", CLASS + "PerFedAvg", options=PerFedAvgOptions, defaults={"weighting": "uniform"},
         presets={"official": {**PFLLIB_LOADER, "weighting": "size", "beta_decay": False, "double_train": True}}),
)
