"""Baselines that differ in what they share: FedProx, FedPer, LG-FedAvg and FedRep.

FedProx is FedAvg with a proximal gradient; FedPer, LG-FedAvg and FedRep are `ParameterAveraging`
with another shared part (FedRep also with a two-phase local schedule). (FedGH, one global head
trained on prototypes, lives with its family in fedgmh.py.) The PFLlib behaviour is behind options
listed in each one's `official` preset (fedgmh.cards.sharing). See docs/baselines.md.
"""

from __future__ import annotations

from fedgmh.algorithms.averaging import FedAvg, ParameterAveraging
from fedgmh.engine import LocalResult, Phase, proximal_hook
from fedgmh.model import is_body, is_head


class FedProx(FedAvg):
    """Li et al. 2020: local SGD on CE + (mu/2)||w - w_global||^2; the global model is evaluated.

    The proximal term enters as a gradient hook g + mu * (p - w_global) (PFLlib's perturbed SGD
    step), w_global being the global model the client received this round.
    """

    def start_training(self, rnd: int, client: int) -> list[Phase]:
        anchor = {"anchor": self.global_params}  # the global model received this round
        return [Phase(self.client_params(client), grad_hook=proximal_hook(self.options.mu), extra=anchor)]


class FedPer(ParameterAveraging):
    """Arivazhagan et al. 2019: the body is averaged, the head stays on the client."""

    shared_part = "body"


class LGFedAvg(ParameterAveraging):
    """Liang et al. 2020: the top layers are averaged (`global_part`: the head by default), the rest
    of the model (local representation) stays on the client."""

    shared_part = "head"

    @classmethod
    def shared_part_of(cls, options) -> str:
        return options.global_part


class FedRep(FedPer):
    """Collins et al. 2021: train the head (body frozen), then the body (head frozen); average the body.

    Both phases use the client's current lr (PFLlib: two optimisers whose ExponentialLR schedulers
    are stepped together once per participation, so they always hold the same lr).
    """

    def start_training(self, rnd: int, client: int) -> list[Phase]:
        head = Phase(self.client_params(client), epochs=self.options.plocal_epochs, trainable=is_head)
        return [head, Phase(None, trainable=is_body)]  # the body phase starts from the head phase's model

    def finish_training(self, rnd: int, client: int, phases: list[Phase], results: list[LocalResult]) -> LocalResult:
        self.keep(client, results[-1].params)
        return LocalResult.in_a_row(results)
