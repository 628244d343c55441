"""Card of FedAvg (fedgmh.algorithms.averaging), and the server-average option that the options of
every averaging algorithm (`ParameterAveraging`) inherit."""

from __future__ import annotations

from dataclasses import dataclass

from fedgmh.cards import PFLLIB_LOADER, Card
from fedgmh.config import RangedOptions, choice


@dataclass(frozen=True)
class AveragingOptions(RangedOptions):
    """What every `ParameterAveraging` algorithm that averages takes; each one's own options
    dataclass inherits it (FedProx, LG-FedAvg, FedRep, FedCP, Ditto, the label-prior control...)."""

    weighting: str = choice(
        "size", "uniform",
        help="server average of the trained clients' uploads: weighted by train size (FedAvg, PFLlib) or their simple mean",
    )


CARDS = (
    # PFLlib's loader is the whole official difference
    Card("fedavg", "FedAvg", "fedgmh.algorithms.averaging:FedAvg", paper_row=1, options=AveragingOptions,
         presets={"official": PFLLIB_LOADER}),
)
