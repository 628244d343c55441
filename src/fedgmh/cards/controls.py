"""Cards of the controls: Local and FedAvg with a label prior (fedgmh.algorithms.controls)."""

from __future__ import annotations

from dataclasses import dataclass

from fedgmh.cards import PFLLIB_LOADER, Card
from fedgmh.cards.averaging import AveragingOptions
from fedgmh.config import choice

CLASS = "fedgmh.algorithms.controls:"


@dataclass(frozen=True)
class PriorOptions(AveragingOptions):
    prior: str = choice("mask", "log_freq", "log_ratio", help="what the client adds to the logits: its label set (mask), label shares, or shares over the pooled shares")


CARDS = (
    # serverlocal.py trains clientAVG, through PFLlib's loader
    Card("local", "Local", CLASS + "Local", presets={"official": PFLLIB_LOADER}),
    # no paper row: FedAvg's would be inherited otherwise
    Card("fedavg_lp", "FedAvg + label prior", CLASS + "FedAvgLabelPrior", options=PriorOptions, presets={"official": PFLLIB_LOADER}),
)
