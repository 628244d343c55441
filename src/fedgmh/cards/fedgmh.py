"""Cards of FedGMH, its ablations GMH-o, GMH-a, GMH-oa (the paper's Table 5) and FedGH (fedgmh.algorithms.fedgmh)."""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from fedgmh.cards import PFLLIB_LOADER, Card
from fedgmh.config import RangedOptions, choice, option
from fedgmh.errors import UserError

#: the official FedGMH code also evaluates only the last 20 rounds
OFFICIAL_ENGINE = MappingProxyType({**PFLLIB_LOADER, "eval_last": 20})
CLASS = "fedgmh.algorithms.fedgmh:"


@dataclass(frozen=True)
class GMHOptions(RangedOptions):
    beta: float = option(0.5, "share B = beta * L of head parameters marked critical (Algorithm 1)", low=0, high=1)
    eta_h: float = option(1.0, "server learning rate of the global heads (eq. 6)", low=0, low_open=True)
    heads: str = choice("per_label", "single", help="S global heads (FedGMH) or one (the -o ablations)")
    combine: str = choice("mask", "average", "replace", help="eq. 9 masked mix / eq. 10-11 average / official ablation: replace")
    mix: str = choice("critical", "noncritical", help="positions taking the global mix: critical (paper) or the rest (official)")
    score: str = choice("delta_theta", "delta_sq_theta", help="criticality |d*theta| (paper, eq. 8) or |d^2*theta| (official)")
    selection: str = choice("global", "per_tensor", help="top-B over all L head values (paper) or per tensor with the official near-zero fallback")
    broadcast: str = choice("selected", "all", help="who receives heads each round: selected clients (paper) or all (official)")
    server_pass: str = choice("per_prototype", "batched", help="eq. 6 one step per prototype, or a shuffled batched pass (official -o ablations)")
    head_alias: str = choice(
        "server", "client0",
        help="the server keeps its own head, or (official -o ablations, PFLlib FedGH) the one server head IS client 0's head: client 0's training moves it and the server pass moves client 0's head",
    )
    gmh_o_zeroing: bool = option(
        False,
        "official GMH-o: while client 0 has never trained, its send zeroes its head - which IS the server head "
        "(head_alias=client0) - so every round until then wipes the server's prototype training",
    )
    #: the preset, recorded in run.json with the options it set (part of the run keys of committed records)
    preset: str = choice("paper", "official", help="paper text, or every official-code behaviour (set before the others)")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.server_pass == "batched" and self.heads != "single":
            raise UserError("server_pass=batched is defined for one global head only (heads=single)")
        if self.head_alias == "client0" and self.heads != "single":
            raise UserError("head_alias=client0 is defined for one global head only (heads=single)")
        if self.gmh_o_zeroing and self.head_alias != "client0":
            raise UserError("gmh_o_zeroing=true zeroes the server head through client 0's head: it needs head_alias=client0")



CARDS = (
    Card("fedgmh", "FedGMH", CLASS + "FedGMH", paper_row=15, options=GMHOptions,
         presets={"official": {**OFFICIAL_ENGINE, "mix": "noncritical", "score": "delta_sq_theta", "selection": "per_tensor",
                               "broadcast": "all"}}),
    Card("gmh_o", "GMH-o", CLASS + "GMHOneHead", paper_row=12, options=GMHOptions, defaults={"heads": "single"},
         presets={"official": {**OFFICIAL_ENGINE, "mix": "noncritical", "selection": "per_tensor", "broadcast": "all",
                               "server_pass": "batched", "head_alias": "client0", "gmh_o_zeroing": True}}),
    Card("gmh_a", "GMH-a", CLASS + "GMHAverage", paper_row=13, options=GMHOptions, defaults={"combine": "average"},
         presets={"official": {**OFFICIAL_ENGINE, "combine": "replace", "broadcast": "all"}}),
    Card("gmh_oa", "GMH-oa", CLASS + "GMHOneHeadAverage", paper_row=14, options=GMHOptions,
         defaults={"heads": "single", "combine": "average"},
         presets={"official": {**OFFICIAL_ENGINE, "combine": "replace", "broadcast": "all", "server_pass": "batched",
                               "head_alias": "client0"}}),
    Card("fedgh", "FedGH", CLASS + "FedGH", paper_row=7, options=GMHOptions,
         defaults={"heads": "single", "combine": "replace", "server_pass": "batched"},
         presets={"official": {**PFLLIB_LOADER, "broadcast": "all", "server_pass": "batched", "head_alias": "client0"}}),
)
