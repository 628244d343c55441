"""Baselines that differ in what they share: FedProx, FedPer, LG-FedAvg and FedRep.

FedProx is FedAvg with a proximal gradient; FedPer, LG-FedAvg and FedRep are `ParameterAveraging`
with another shared part (FedRep also with a two-phase local schedule). (FedGH, one global head
trained on prototypes, lives with its family in fedgmh.py.) The PFLlib behaviour is behind options
listed in each class's `official` dict. See docs/baselines.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from fedgmh.algorithms.averaging import FedAvg, ParameterAveraging
from fedgmh.algorithms.base import PFLLIB_LOADER, register
from fedgmh.config import choice, option
from fedgmh.engine import LocalResult, Phase, proximal_hook
from fedgmh.errors import UserError
from fedgmh.model import is_body, is_head


@dataclass(frozen=True)
class FedProxOptions:
    mu: float = option(0.0, "weight of the proximal term (mu/2)*||w - w_global||^2 (PFLlib default 0.0 = FedAvg)")

    def __post_init__(self) -> None:
        if self.mu < 0:
            raise UserError(f"mu must be >= 0, got {self.mu}")


@register
class FedProx(FedAvg):
    """Li et al. 2020: local SGD on CE + (mu/2)||w - w_global||^2; the global model is evaluated.

    The proximal term enters as a gradient hook g + mu * (p - w_global) (PFLlib's perturbed SGD
    step), w_global being the global model the client received this round.
    """

    name = "fedprox"
    display_name = "FedProx"
    paper_row = 2
    Options = FedProxOptions

    def start_training(self, rnd: int, client: int) -> list[Phase]:
        anchor = {"anchor": self.global_params}  # the global model received this round
        return [Phase(self.client_params(client), grad_hook=proximal_hook(self.options.mu), extra=anchor)]


@register
class FedPer(ParameterAveraging):
    """Arivazhagan et al. 2019: the body is averaged, the head stays on the client."""

    name = "fedper"
    display_name = "FedPer"
    paper_row = 8
    shared_part = "body"
    official = PFLLIB_LOADER


@dataclass(frozen=True)
class LGFedAvgOptions:
    global_part: str = choice(
        "head", "fc1+head",
        help="the global (averaged) layers: the head (the project's spec, and PFLlib's) or the body's last layer fc1 "
        "and the head (the original paper's global model is its top layers); the rest stays on the client",
    )


@register
class LGFedAvg(ParameterAveraging):
    """Liang et al. 2020: the top layers are averaged (`global_part`: the head by default), the rest
    of the model (local representation) stays on the client."""

    name = "lgfedavg"
    display_name = "LG-FedAvg"
    paper_row = 11
    Options = LGFedAvgOptions
    shared_part = "head"
    official = {**PFLLIB_LOADER, "global_part": "head"}  # PFLlib's serverlg.py averages model.head only

    @classmethod
    def shared_part_of(cls, options) -> str:
        return options.global_part


@dataclass(frozen=True)
class FedRepOptions:
    plocal_epochs: int = option(1, "epochs of head-only training before the body epochs (PFLlib default 1)")

    def __post_init__(self) -> None:
        if self.plocal_epochs < 0:
            raise UserError(f"plocal_epochs must be >= 0, got {self.plocal_epochs}")


@register
class FedRep(FedPer):
    """Collins et al. 2021: train the head (body frozen), then the body (head frozen); average the body.

    Both phases use the client's current lr (PFLlib: two optimisers whose ExponentialLR schedulers
    are stepped together once per participation, so they always hold the same lr).
    """

    name = "fedrep"
    display_name = "FedRep"
    paper_row = 9
    Options = FedRepOptions

    def start_training(self, rnd: int, client: int) -> list[Phase]:
        head = Phase(self.client_params(client), epochs=self.options.plocal_epochs, trainable=is_head)
        return [head, Phase(None, trainable=is_body)]  # the body phase starts from the head phase's model

    def finish_training(self, rnd: int, client: int, phases: list[Phase], results: list[LocalResult]) -> LocalResult:
        head, body = results
        self.keep(client, body.params)
        return LocalResult(body.params, head.loss_sum + body.loss_sum, head.num_samples + body.num_samples)
