"""Card of CE-pFL (fedgmh.algorithms.clustered)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from fedgmh.cards import Card
from fedgmh.cards.averaging import AveragingOptions
from fedgmh.config import choice, option
from fedgmh.errors import UserError


@dataclass(frozen=True)
class CEPFLOptions(AveragingOptions):
    """Huang & Chen 2025 (seed 004); docs/baselines.md "CE-pFL". The paper gives none of the numbers
    M, alpha, beta, gamma, lambda, num: the defaults are the spec's (docs/baselines.md)."""

    weighting: str = choice(
        "uniform", "size",
        help="eq. 11: the body is the simple mean of the trained clients' bodies (paper), or weighted by train size (FedPer); "
        "also how a cluster round averages its members",
    )
    window: int = option(10, "M: rounds in the sliding window of mean training losses whose fitted slope (eq. 3) triggers clustering when >= 0",
                         low=2, why="a slope needs two losses")
    alpha: float = option(1.0, "alpha: weight of the MMD term of the priority score (eq. 9)", low=0)
    beta: float = option(1.0, "beta: weight of the time term 1 - exp(-(t - t'_i)) of the priority score (eq. 9)", low=0)
    # the dataclass default is what records made before the option ran; cepfl's default is `current` (its card)
    wait_term: str = choice(
        "next", "current",
        help="t of eq. 9's time term when the scores are computed at the end of round t: the current round t (004: "
        "'t is the current round'; 0 right after training) or the round t + 1 about to be played (a client that has "
        "just trained already gets 1 - 1/e)",
    )
    gamma: str = option(
        "median",
        "gamma of the Gaussian kernel exp(-gamma ||a - b||^2) of the MMD (eq. 8): a number > 0, or median = 1 / the median "
        "squared distance between the points of C_i and C_global, per client and round",
    )
    smoothing: float = option(0.5, "lambda: exponential smoothing of the priority score, s <- lambda * new + (1 - lambda) * s (eq. 10)",
                              low=0, high=1, low_open=True)
    clusters: int = option(4, "num: K-means clusters of the class-centre vectors (eq. 6), at most the number of clients with centres", low=1)
    mmd_sign: str = choice(
        "similarity", "literal",
        help="the score rewards similarity to the global centres, alpha * (-MMD) (the text's intent), or alpha * MMD as eq. 9 is printed",
    )
    cluster_fuse: str = choice(
        "uniform", "size",
        help="the enhanced body: each cluster's model counts once (uniform), or by its weight (its members, or their samples with "
        "weighting=size): then it is the plain average over all members and clustering changes nothing",
    )
    cluster_members: str = choice(
        "all", "selected",
        help="who trains in a cluster round: every clustered client (every client with centres), or only this round's selected ones",
    )
    broadcast: str = choice(
        "all", "selected",
        help="who receives the body each round: every client (FedPer, PFLlib), or only the selected ones (the others are evaluated "
        "with the body they last received)",
    )
    selection: str = choice("priority", "random", help="next round's clients: the top r*N priority scores (eq. 10), or the engine's random draw")
    clustering: str = choice("on", "off", help="the loss-window trigger and the cluster round (eqs. 3-6), or never")
    centres: str = choice(
        "after_training",
        help="class centres (eq. 2) from the trained body over all the client's train samples (the only reading implemented; "
        "eq. 2's 'embeddings stored during training' would mix bodies of several steps)",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.gamma != "median":
            try:
                gamma = float(self.gamma)
            except ValueError:
                gamma = math.nan
            if not (0 < gamma < math.inf):
                raise UserError(f"gamma must be 'median' or a finite number > 0, got {self.gamma!r}")

    def kernel_gamma(self) -> float | None:
        """The fixed gamma, or None for the median heuristic."""
        return None if self.gamma == "median" else float(self.gamma)


CARDS = (
    # no implementation exists (seed 004): preset=official changes nothing
    # no implementation exists (004): preset=official changes nothing
    Card("cepfl", "CE-pFL (Huang & Chen 2025)", "fedgmh.algorithms.clustered:CEPFL", options=CEPFLOptions,
         defaults={"wait_term": "current"}),
)
