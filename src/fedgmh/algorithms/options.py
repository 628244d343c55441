"""Every algorithm's `--set` options, without torch: the workflow resolves each run's options when it
plans its jobs (fedgmh.plan), so this module imports neither torch nor the algorithm classes.

An algorithm's options are an `OptionSet`: its `Options` dataclass (one per family: the paper's
text is every default), the values a registered variant changes (`defaults`, e.g. GMH-o's one
head) and the official code's / PFLlib's values (`official`, applied by `--set preset=official`;
keys may be engine options too, e.g. drop_last). `OPTION_SETS` has one per algorithm name;
`fedgmh.algorithms.base.register` gives each class the set of its name (`cls.Options`,
`cls.defaults`, `cls.official`). A class registered without an entry here declares them on itself
(`Options`, `defaults`, `official` class attributes): a new algorithm is then one file, and the
workflow, asked for its name, imports the algorithm modules (torch: a few seconds per snakemake
call) to find it. An entry here keeps planning torch-free. What each option means:
docs/fedgmh.md and docs/baselines.md.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, get_type_hints

from fedgmh.config import EngineOptions, build_options, choice, option, option_names
from fedgmh.errors import UserError

PRESETS = ("paper", "official")
PRESET_HELP = "paper text, or every official-code / PFLlib behaviour at once (explicit --set values still win)"

#: PFLlib's DataLoader drops each client's last partial batch (part of most `official` presets)
PFLLIB_LOADER = MappingProxyType({"drop_last": True})
#: the official FedGMH code also evaluates only the last 20 rounds
OFFICIAL_ENGINE = MappingProxyType({**PFLLIB_LOADER, "eval_last": 20})


@dataclass(frozen=True)
class NoOptions:
    """An algorithm without options of its own."""


# ------------------------------------------------------------------ FedGMH, its ablations, FedGH

@dataclass(frozen=True)
class GMHOptions:
    beta: float = option(0.5, "share B = beta * L of head parameters marked critical (Algorithm 1)")
    eta_h: float = option(1.0, "server learning rate of the global heads (eq. 6)")
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
    preset: str = choice("paper", "official", help="paper text, or every official-code behaviour (set before the others)")

    def __post_init__(self) -> None:
        if not 0 <= self.beta <= 1:
            raise UserError(f"beta must be in [0, 1], got {self.beta}")
        if self.eta_h <= 0:
            raise UserError(f"eta_h must be > 0, got {self.eta_h}")
        if self.server_pass == "batched" and self.heads != "single":
            raise UserError("server_pass=batched is defined for one global head only (heads=single)")
        if self.head_alias == "client0" and self.heads != "single":
            raise UserError("head_alias=client0 is defined for one global head only (heads=single)")
        if self.gmh_o_zeroing and self.head_alias != "client0":
            raise UserError("gmh_o_zeroing=true zeroes the server head through client 0's head: it needs head_alias=client0")


# --------------------------------------- the averaging family (averaging.ParameterAveraging)

@dataclass(frozen=True)
class AveragingOptions:
    """What every `ParameterAveraging` algorithm that averages takes; each one's own options
    dataclass inherits it (FedProx, LG-FedAvg, FedRep, FedCP, Ditto, the label-prior control...)."""

    weighting: str = choice(
        "size", "uniform",
        help="server average of the trained clients' uploads: weighted by train size (FedAvg, PFLlib) or their simple mean",
    )


# ------------------------------------------------------------------ FedProx, FedRep (sharing.py)

@dataclass(frozen=True)
class FedProxOptions(AveragingOptions):
    mu: float = option(0.0, "weight of the proximal term (mu/2)*||w - w_global||^2 (PFLlib default 0.0 = FedAvg)")

    def __post_init__(self) -> None:
        if self.mu < 0:
            raise UserError(f"mu must be >= 0, got {self.mu}")


@dataclass(frozen=True)
class LGFedAvgOptions(AveragingOptions):
    global_part: str = choice(
        "head", "fc1+head",
        help="the global (averaged) layers: the head (the project's spec, and PFLlib's) or the body's last layer fc1 "
        "and the head (the original paper's global model is its top layers); the rest stays on the client",
    )


@dataclass(frozen=True)
class FedRepOptions(AveragingOptions):
    plocal_epochs: int = option(1, "epochs of head-only training before the body epochs (PFLlib default 1)")

    def __post_init__(self) -> None:
        if self.plocal_epochs < 0:
            raise UserError(f"plocal_epochs must be >= 0, got {self.plocal_epochs}")


# ------------------------------------------------------------- Ditto, FedAMP, FedFomo (personal.py)

@dataclass(frozen=True)
class DittoOptions(AveragingOptions):
    mu: float = option(0.0, "weight of (mu/2)*||v - w_global||^2 in the personal loss (PFLlib default)")
    plocal_epochs: int = option(1, "epochs of personal training per participation (PFLlib default)")
    report: str = choice(
        "personal", "max_of_both",
        help="accuracy reported each round: the personal models' (paper), or the better of global and personal (PFLlib logs both in one list)",
    )

    def __post_init__(self) -> None:
        if self.mu < 0:
            raise UserError(f"mu must be >= 0, got {self.mu}")
        if self.plocal_epochs < 1:
            raise UserError(f"plocal_epochs must be >= 1, got {self.plocal_epochs}")


@dataclass(frozen=True)
class AMPOptions:
    alphaK: float = option(1.0, "attention step size alpha_k: xi_ij = alphaK * exp(-||w_i - w_j||^2 / sigma) / sigma (PFLlib default)")
    lamda: float = option(1.0, "proximal weight: the local loss adds (lamda / (2 alphaK)) * ||w - u_i||^2 (PFLlib default)")
    sigma: float = option(1.0, "scale of the attention function (PFLlib default)")
    proximal: str = choice(
        "gradient", "detached",
        help="the proximal term trains the model (paper) or is computed on detached tensors, i.e. plain SGD (PFLlib)",
    )
    cloud: str = choice(
        "all_uploaded", "last_round",
        help="models mixed into u_i: the last upload of every client that has uploaded (paper) or only the previous round's uploads (PFLlib)",
    )

    def __post_init__(self) -> None:
        if self.alphaK <= 0 or self.sigma <= 0:
            raise UserError(f"alphaK and sigma must be > 0, got alphaK={self.alphaK}, sigma={self.sigma}")
        if self.lamda < 0:
            raise UserError(f"lamda must be >= 0, got {self.lamda}")


@dataclass(frozen=True)
class FomoOptions:
    M: int = option(5, "models a selected client downloads (PFLlib default)")
    val_ratio: float = option(0.2, "share of a client's train split, taken from its end, used as validation set (PFLlib)")
    epsilon: float = option(0.3, "epsilon-greedy: initial probability that a download slot picks a random client (official FedFomo code)")
    epsilon_decay: float = option(0.05, "epsilon-greedy: epsilon decreases by this much per round (official FedFomo code)")
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

    def __post_init__(self) -> None:
        if self.M < 1:
            raise UserError(f"M must be >= 1, got {self.M}")
        if not 0 < self.val_ratio < 1:
            raise UserError(f"val_ratio must be in (0, 1), got {self.val_ratio}")
        if not 0 <= self.epsilon <= 1 or self.epsilon_decay < 0:
            raise UserError(f"epsilon must be in [0, 1] and epsilon_decay >= 0, got {self.epsilon}, {self.epsilon_decay}")


# ------------------------------------------------------------------------- FedCP (decoupled.py)

@dataclass(frozen=True)
class FedCPOptions(AveragingOptions):
    lamda: float = option(1.0, "weight of the MMD loss aligning the personal body to the frozen global body")
    policy: str = choice("softmax", "gumbel", help="r, s = softmax over each feature's pair (paper) or gumbel_softmax, tau 1, in training AND evaluation (PFLlib)")
    sync: str = choice(
        "round_start",
        "after_round",
        help="selected clients receive the global body, head and CPN when the round starts (paper), or (PFLlib) the averaged body goes to ALL clients after "
        "aggregation and the averaged head and CPN only to the clients that just trained",
    )
    context: str = choice(
        "head", "random", "random_shared",
        help="client vector before a client's first training: from its personal head (paper), uniform random per client "
        "(from the run's generator), or one uniform random vector for every client (PFLlib: torch.rand after torch.manual_seed(0))",
    )

    def __post_init__(self) -> None:
        if not 0 <= self.lamda < math.inf:
            raise UserError(f"lamda must be a finite number >= 0, got {self.lamda}")


# ----------------------------------------------------------------- the controls (controls.py)

@dataclass(frozen=True)
class PriorOptions(AveragingOptions):
    prior: str = choice("mask", "log_freq", "log_ratio", help="what the client adds to the logits: its label set (mask), label shares, or shares over the pooled shares")


# ----------------------------------------------------------------------------- FedCAC (fedcac.py)

@dataclass(frozen=True)
class CACOptions(AveragingOptions):
    tau: float = option(
        0.5, "share of each parameter tensor marked critical: the top int(tau * n) by |delta * theta|, ties included "
        "(FedCAC authors: 0.5 on CIFAR-10, 0.4 on CIFAR-100; PFLlib's default 1.0 marks nearly everything critical)",
    )
    beta: int = option(
        170, "schedule of the overlap threshold T_t = mean + ((t + 1) / beta) * (max - mean): critical parameters stop "
        "collaborating after round beta - 1 (authors: 100 on CIFAR-10, 170 on CIFAR-100; PFLlib's default 0 does not run; "
        "scale it with the number of rounds)",
    )
    pool: str = choice(
        "all_uploaded", "selected",
        help="clients whose masks and models enter the overlaps, the threshold and the customised models: every client that "
        "has trained, with its latest model and mask (the paper and the authors' code, where all clients train every round), "
        "or only this round's selected clients (PFLlib)",
    )
    round0_reset: bool = option(
        False, "PFLlib: no customisation after round 0, so the critical positions of round 0's clients take the initial "
        "model's values (PFLlib's customised models start as copies of it) until they train again",
    )

    def __post_init__(self) -> None:
        if not 0 <= self.tau <= 1:
            raise UserError(f"tau must be in [0, 1], got {self.tau}")
        if isinstance(self.beta, bool) or not isinstance(self.beta, int) or self.beta < 1:
            raise UserError(f"beta must be an integer >= 1, got {self.beta!r}")

# ------------------------------------------------------------------ CE-pFL (clustered.py)

@dataclass(frozen=True)
class CEPFLOptions(AveragingOptions):
    """Huang & Chen 2025 (seed 004); docs/baselines.md "CE-pFL". The paper gives none of the numbers
    M, alpha, beta, gamma, lambda, num: the defaults are the spec's (docs/baselines.md)."""

    weighting: str = choice(
        "uniform", "size",
        help="eq. 11: the body is the simple mean of the trained clients' bodies (paper), or weighted by train size (FedPer); "
        "also how a cluster round averages its members",
    )
    window: int = option(10, "M: rounds in the sliding window of mean training losses whose fitted slope (eq. 3) triggers clustering when >= 0")
    alpha: float = option(1.0, "alpha: weight of the MMD term of the priority score (eq. 9)")
    beta: float = option(1.0, "beta: weight of the time term 1 - exp(-(t - t'_i)) of the priority score (eq. 9)")
    # the dataclass default is what records made before the option ran; cepfl's default is `current` (OPTION_SETS)
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
    smoothing: float = option(0.5, "lambda: exponential smoothing of the priority score, s <- lambda * new + (1 - lambda) * s (eq. 10)")
    clusters: int = option(4, "num: K-means clusters of the class-centre vectors (eq. 6), at most the number of clients with centres")
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
        if self.window < 2:
            raise UserError(f"window must be >= 2 (a slope needs two losses), got {self.window}")
        if self.clusters < 1:
            raise UserError(f"clusters must be >= 1, got {self.clusters}")
        if not (0 < self.smoothing <= 1):
            raise UserError(f"smoothing must be in (0, 1], got {self.smoothing}")
        for name in ("alpha", "beta"):
            value = getattr(self, name)
            if not (0 <= value < math.inf):
                raise UserError(f"{name} must be a finite number >= 0, got {value}")
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
# ---------------------------------------------------------- pFedLA, HeurpFedLA (layerwise.py)

#: the widest hypernetwork layer (embedding_dim, hidden_dim): 4096 already makes each client's hypernetwork
#: ~200 MB; a far larger value would fail allocating memory
MAX_HN_WIDTH = 4096


@dataclass(frozen=True)
class LayerwiseOptions:
    hn_lr: float = option(
        2.0, "learning rate of the per-client hypernetworks' SGD step; 2 chosen by the sweep docs/audits/pfedla_hn_lr.csv "
        "(the anchors' 5e-3, tuned for a 16.8 M-weight fc1, leaves the layer weights where they started); 0 = they never move",
    )
    embedding_dim: int = option(100, "size of each client's learnable embedding v_i (anchors: 100)")
    hidden_dim: int = option(100, "width of the hypernetworks' three hidden layers (anchors: 100)")
    k: int = option(0, "layers a client retains (its own, not mixed, not downloaded): 0 = pFedLA, >= 1 = HeurpFedLA (paper: 1)")
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
    hn_clip: float = option(0.0, "clip the hypernetwork gradient to this L2 norm (pFedHN clips at 50); 0 = no clipping (anchors)")
    init: str = choice(
        "shared", "per_client",
        help="every client's intermediate model starts as the run's one initial model, or as its own draw of the same "
        "default initialisation (KarhouTam/pFedLA builds one model per client)",
    )

    def __post_init__(self) -> None:
        if not 0 <= self.hn_lr < math.inf:
            raise UserError(f"hn_lr must be a finite number >= 0, got {self.hn_lr}")
        for name in ("embedding_dim", "hidden_dim"):
            value = getattr(self, name)
            if not 1 <= value <= MAX_HN_WIDTH:
                raise UserError(f"{name} must be from 1 to at most {MAX_HN_WIDTH}, got {value} (every client's hypernetwork holds "
                                "hidden_dim x (embedding_dim + 2 hidden_dim) weights; the anchors use 100)")
        if self.k < 0:
            raise UserError(f"k must be >= 0, got {self.k}")
        if not 0 <= self.hn_clip < math.inf:
            raise UserError(f"hn_clip must be a finite number >= 0 (0 = off), got {self.hn_clip}")


#: KarhouTam/pFedLA (`--set preset=anchor`): clients one after the other, raw top-k score, its step sign
PFEDLA_ANCHOR = MappingProxyType({"order": "sequential", "topk_score": "raw", "hn_sign": "anchor"})
# ------------------------------------------------- FedBABU, Per-FedAvg (adaptation.py; issue 12)

@dataclass(frozen=True)
class FedBABUOptions(AveragingOptions):
    finetune_epochs: int = option(10, "epochs of fine-tuning before the personalised evaluation (PFLlib -fte default 10; the paper: 'a few')")
    finetune_parts: str = choice(
        "all", "head", "body",
        help="what fine-tuning trains: the whole model (paper, PFLlib's ['base', 'head'], FL-bench), only the head or only the body",
    )
    finetune_at: str = choice(
        "last", "every_eval",
        help="fine-tune at the final evaluation only (PFLlib: once after the last round) or before every evaluation (FL-bench)",
    )
    # dataclass defaults: what records made before these options ran; fedbabu's defaults are the authors' (FEDBABU_AUTHORS)
    finetune_lr: float = option(0.0, "fine-tuning lr; 0 = the client's current training lr (PFLlib; the authors' code: 1e-3)")
    finetune_momentum: float = option(0.0, "fine-tuning SGD momentum, as torch.optim.SGD (PFLlib: 0; the authors' code: 0.9)")
    finetune_from: str = choice(
        "final",
        help="the model fine-tuning starts from: the final global body (the only reading implemented; the authors' "
        "analysis starts from the round with the best test accuracy, a choice made on the test split)",
    )

    def __post_init__(self) -> None:
        if self.finetune_epochs < 0:
            raise UserError(f"finetune_epochs must be >= 0, got {self.finetune_epochs}")
        if not 0 <= self.finetune_lr < math.inf:
            raise UserError(f"finetune_lr must be a finite number >= 0 (0 = the client's lr), got {self.finetune_lr}")
        if not 0 <= self.finetune_momentum < 1:
            raise UserError(f"finetune_momentum must be in [0, 1), got {self.finetune_momentum}")


#: FedBABU's authors' fine-tuning (jhoon-oh/FedBABU: `--ft_ep 5`; analysis.ipynb: SGD lr 1e-3, momentum 0.9): the default
FEDBABU_AUTHORS = MappingProxyType({"finetune_epochs": 5, "finetune_lr": 1e-3, "finetune_momentum": 0.9})
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
    beta: float = option(0.0, "outer (meta) step size; 0 = the client's current lr (PFLlib: beta = the initial lr; FL-bench 1e-3)")
    beta_decay: bool = option(True, "the outer step decays with the client's lr like every lr here (PFLlib: never decayed)")
    delta: float = option(1e-3, "finite-difference step of order=hf (FL-bench default)")
    eval_steps: int = option(1, "SGD steps (eval_data=batch) or epochs (eval_data=epoch) of personalisation before evaluation; 0 = evaluate w")
    eval_data: str = choice(
        "batch", "epoch",
        help="personalisation data: one batch of B train samples (paper, PFLlib) or full epochs over the train split (FL-bench fine-tuning)",
    )
    double_train: bool = option(False, "each selected client runs its local training twice per round, its lr decaying after each (PFLlib)")

    def __post_init__(self) -> None:
        if not 0 <= self.beta < math.inf:
            raise UserError(f"beta must be a finite number >= 0, got {self.beta}")
        if not MIN_FD_STEP <= self.delta < math.inf:
            raise UserError(f"delta must be a finite number of at least {MIN_FD_STEP:.3g} (2**-23, float32's resolution: a smaller "
                            f"finite-difference step vanishes in w + delta * v), got {self.delta:g}")
        if self.eval_steps < 0:
            raise UserError(f"eval_steps must be >= 0, got {self.eval_steps}")


@dataclass(frozen=True)
class OptionSet:
    """One algorithm's options: its Options dataclass, the defaults its registered variant changes,
    and the official code's / PFLlib's values."""

    Options: type = NoOptions
    defaults: Mapping[str, Any] = field(default_factory=dict)
    official: Mapping[str, Any] = field(default_factory=dict)
    #: further named presets (`--set preset=NAME`) of an algorithm whose anchor is not PFLlib
    presets: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def preset_names(self) -> tuple[str, ...]:
        return (*PRESETS, *self.presets)

    def preset(self, name: str) -> Mapping[str, Any]:
        """The values preset `name` sets (paper: none)."""
        if name not in self.preset_names():
            raise UserError(f"option preset={name!r}: choose one of {', '.join(self.preset_names())}")
        return self.official if name == "official" else self.presets.get(name, {})


OPTION_SETS: dict[str, OptionSet] = {
    # what is averaged differs; PFLlib's loader is the whole official difference
    "fedavg": OptionSet(AveragingOptions, official=PFLLIB_LOADER),
    "fedprox": OptionSet(FedProxOptions, official=PFLLIB_LOADER),
    "fedper": OptionSet(AveragingOptions, official=PFLLIB_LOADER),
    "lgfedavg": OptionSet(LGFedAvgOptions, official={**PFLLIB_LOADER, "global_part": "head"}),  # PFLlib's serverlg.py averages model.head only
    "fedrep": OptionSet(FedRepOptions, official=PFLLIB_LOADER),
    "fedrod": OptionSet(AveragingOptions, official=PFLLIB_LOADER),  # clientrod.py steps both of its lr schedulers once per participation, like our engine
    # clientcp.py builds its own optimiser and never steps a scheduler: PFLlib's FedCP lr is constant
    "fedcp": OptionSet(FedCPOptions, official={**PFLLIB_LOADER, "lr_decay": 1.0, "policy": "gumbel", "sync": "after_round",
                                               "context": "random_shared"}),
    "ditto": OptionSet(DittoOptions, official={**PFLLIB_LOADER, "report": "max_of_both"}),
    "fedamp": OptionSet(AMPOptions, official={**PFLLIB_LOADER, "proximal": "detached", "cloud": "last_round"}),
    "fedfomo": OptionSet(FomoOptions, official={**PFLLIB_LOADER, "selection": "top_m", "baseline": "pre_training",
                                               "val_loss": "batch_mean", "local_order": "fixed"}),
    "fedgmh": OptionSet(GMHOptions, official={**OFFICIAL_ENGINE, "mix": "noncritical", "score": "delta_sq_theta",
                                              "selection": "per_tensor", "broadcast": "all"}),
    "gmh_o": OptionSet(GMHOptions, defaults={"heads": "single"},
                       official={**OFFICIAL_ENGINE, "mix": "noncritical", "selection": "per_tensor", "broadcast": "all",
                                 "server_pass": "batched", "head_alias": "client0", "gmh_o_zeroing": True}),
    "gmh_a": OptionSet(GMHOptions, defaults={"combine": "average"}, official={**OFFICIAL_ENGINE, "combine": "replace", "broadcast": "all"}),
    "gmh_oa": OptionSet(GMHOptions, defaults={"heads": "single", "combine": "average"},
                        official={**OFFICIAL_ENGINE, "combine": "replace", "broadcast": "all", "server_pass": "batched",
                                  "head_alias": "client0"}),
    "fedgh": OptionSet(GMHOptions, defaults={"heads": "single", "combine": "replace", "server_pass": "batched"},
                       official={**PFLLIB_LOADER, "broadcast": "all", "server_pass": "batched", "head_alias": "client0"}),
    "local": OptionSet(official=PFLLIB_LOADER),  # serverlocal.py trains clientAVG, through PFLlib's loader
    "fedavg_lp": OptionSet(PriorOptions, official=PFLLIB_LOADER),
    "fedcac": OptionSet(CACOptions, official={**PFLLIB_LOADER, "pool": "selected", "round0_reset": True}),
    "cepfl": OptionSet(CEPFLOptions, defaults={"wait_term": "current"}),  # no implementation exists (004): preset=official changes nothing
    # no PFLlib version: `official` = the paper's reading; `preset=anchor` = KarhouTam/pFedLA
    "pfedla": OptionSet(LayerwiseOptions, presets={"anchor": PFEDLA_ANCHOR}),
    "heurpfedla": OptionSet(LayerwiseOptions, defaults={"k": 1}, presets={"anchor": PFEDLA_ANCHOR}),
    # FedBABU: the whole model fine-tuned once, after the last round: the authors' budget, or PFLlib's (official)
    "fedbabu": OptionSet(FedBABUOptions, defaults=FEDBABU_AUTHORS, official=FEDBABU_PFLLIB, presets={"authors": FEDBABU_AUTHORS}),
    # Per-FedAvg: the paper's simple mean; PFLlib weights by train size, trains twice per round with a fixed beta
    "perfedavg": OptionSet(PerFedAvgOptions, defaults={"weighting": "uniform"},
                           official={**PFLLIB_LOADER, "weighting": "size", "beta_decay": False, "double_train": True}),
}


#: imports every algorithm module (set by the package, `fedgmh.algorithms.load_all`, which imports this module)
load_registry: Callable[[], None] = lambda: None  # noqa: E731


def algorithm_names(wanted: Iterable[str] = ()) -> list[str]:
    """Every algorithm name, sorted. Torch-free while each of `wanted` has its option set in
    OPTION_SETS; any other name imports the algorithm modules first (`load_registry`), whose
    `register` adds the option sets of algorithms that declare their options on their class (one
    file, no entry here)."""
    if not set(wanted) <= OPTION_SETS.keys():
        load_registry()
    return sorted(OPTION_SETS)


def option_set(algorithm: str) -> OptionSet:
    known = algorithm_names([algorithm])
    if algorithm not in OPTION_SETS:
        raise UserError(f"unknown algorithm {algorithm!r}; available: {', '.join(known)}")
    return OPTION_SETS[algorithm]


def resolve_options(algorithm: str, overrides: dict[str, Any]) -> tuple[Any, EngineOptions]:
    """Split `--set` values into (algorithm options, engine options), applying `preset` first."""
    options = option_set(algorithm)
    explicit = dict(overrides)
    values = {**options.defaults, **options.preset(explicit.get("preset", "paper")), **explicit}
    algo_keys, engine_keys = option_names(options.Options), option_names(EngineOptions)
    if "preset" not in algo_keys:
        values.pop("preset", None)
    unknown = set(values) - algo_keys - engine_keys
    if unknown:
        known = ", ".join(sorted(algo_keys | engine_keys | {"preset"}))
        raise UserError(f"unknown option(s) {', '.join(sorted(unknown))} for {algorithm}; known: {known}")
    algo = build_options(options.Options, {k: v for k, v in values.items() if k in algo_keys})
    engine = build_options(EngineOptions, {k: v for k, v in values.items() if k in engine_keys})
    return algo, engine


def option_rows(algorithm: str) -> list[dict[str, Any]]:
    """Every option `--set` takes for `algorithm`: its own (with `preset`) first, then the engine's.

    Each row: name, scope (algorithm / engine), type, default (this algorithm's), official (the
    `preset=official` value when it differs from the default, else None), choices and help.
    """
    options = option_set(algorithm)
    rows = []
    for scope, fields_of in (("algorithm", options.Options), ("engine", EngineOptions)):
        hints = get_type_hints(fields_of)
        for f in dataclasses.fields(fields_of):
            default = options.defaults.get(f.name, f.default) if scope == "algorithm" else f.default
            official = options.official.get(f.name, default)
            rows.append({"name": f.name, "scope": scope, "type": hints[f.name].__name__, "default": default,
                         "official": None if official == default else official,
                         "choices": f.metadata.get("choices", ()), "help": f.metadata.get("help", "")})
        if scope == "algorithm" and "preset" not in option_names(fields_of):
            rows.append({"name": "preset", "scope": "algorithm", "type": "str", "default": "paper", "official": None,
                         "choices": options.preset_names(), "help": PRESET_HELP})
    return rows
