"""Cards of pFedLA and HeurpFedLA (fedgmh.algorithms.layerwise)."""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from fedgmh.cards import Card
from fedgmh.config import RangedOptions, choice, option

CLASS = "fedgmh.algorithms.layerwise:"

#: the widest hypernetwork layer (embedding_dim, hidden_dim): 4096 already makes each client's hypernetwork
#: ~200 MB; a far larger value would fail allocating memory
MAX_HN_WIDTH = 4096
HN_SIZE = "every client's hypernetwork holds hidden_dim x (embedding_dim + 2 hidden_dim) weights; the anchors use 100"


@dataclass(frozen=True)
class LayerwiseOptions(RangedOptions):
    hn_lr: float = option(
        2.0, "learning rate of the per-client hypernetworks' SGD step; 2 chosen by the sweep docs/audits/pfedla_hn_lr.csv "
        "(the anchors' 5e-3, tuned for a 16.8 M-weight fc1, leaves the layer weights where they started); 0 = they never move",
        low=0,
    )
    embedding_dim: int = option(100, "size of each client's learnable embedding v_i (anchors: 100)", low=1, high=MAX_HN_WIDTH,
                                why=HN_SIZE)
    hidden_dim: int = option(100, "width of the hypernetworks' three hidden layers (anchors: 100)", low=1, high=MAX_HN_WIDTH,
                             why=HN_SIZE)
    k: int = option(0, "layers a client retains (its own, not mixed, not downloaded): 0 = pFedLA, >= 1 = HeurpFedLA (paper: 1)", low=0)
    granularity: str = choice(
        "module", "tensor",
        help="one weight vector per layer = module, shared by its weight and bias (paper's figures, KarhouTam/pFedLA), or per parameter tensor (FL-bench)",
    )
    intermediate: str = choice(
        "latest", "accumulate",
        help="the server's intermediate model of a client after it trains: its trained model (KarhouTam) or the old one plus the update (FL-bench)",
    )
    hn_sign: str = choice(
        "descent", "anchor",
        help="hypernetwork step moves the mixed model toward the trained one (descent on 1/2 ||mix - trained||^2, pFedHN's rule) or away (both anchors' sign)",
    )
    order: str = choice(
        "parallel", "sequential",
        help="every selected client's mix from the round-start models (synchronous round, paper's Fig. 2) or one client after the other (both anchors)",
    )
    topk_score: str = choice("normalised", "raw", help="retained layers ranked by the normalised self-weight or the raw ReLU output (anchors)")
    hn_clip: float = option(0.0, "clip the hypernetwork gradient to this L2 norm (pFedHN clips at 50); 0 = no clipping (anchors)",
                            low=0, why="0 = off")
    init: str = choice(
        "shared", "per_client",
        help="every client's intermediate model starts as the run's one initial model, or as its own draw of the same "
        "default initialisation (KarhouTam/pFedLA builds one model per client)",
    )


#: KarhouTam/pFedLA (`--set preset=anchor`): clients one after the other, raw top-k score, its step sign
PFEDLA_ANCHOR = MappingProxyType({"order": "sequential", "topk_score": "raw", "hn_sign": "anchor", "hn_lr": 5e-3, "init": "per_client"})


# no PFLlib version: `official` = the paper's reading; `preset=anchor` = KarhouTam/pFedLA
CARDS = (
    Card("pfedla", "pFedLA", CLASS + "PFedLA", options=LayerwiseOptions, presets={"anchor": PFEDLA_ANCHOR}),
    Card("heurpfedla", "HeurpFedLA", CLASS + "HeurPFedLA", options=LayerwiseOptions, defaults={"k": 1},
         presets={"anchor": PFEDLA_ANCHOR}),
)
