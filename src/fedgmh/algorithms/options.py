"""Every algorithm's `--set` options, without torch: the workflow resolves each run's options when it
plans its jobs (fedgmh.plan), so this module imports neither torch nor the algorithm classes.

An algorithm's options are an `OptionSet`: its `Options` dataclass (one per family: the paper's
text is every default), the values a registered variant changes (`defaults`, e.g. GMH-o's one
head) and the official code's / PFLlib's values (`official`, applied by `--set preset=official`;
keys may be engine options too, e.g. drop_last). `OPTION_SETS` has one per algorithm name;
`fedgmh.algorithms.base.register` gives each class the set of its name (`cls.Options`,
`cls.defaults`, `cls.official`). A class registered without an entry here (e.g. one defined in a
test) declares them on itself. What each option means: docs/fedgmh.md and docs/baselines.md.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
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

    def __post_init__(self) -> None:
        if self.finetune_epochs < 0:
            raise UserError(f"finetune_epochs must be >= 0, got {self.finetune_epochs}")


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
        if not 0 < self.delta < math.inf:
            raise UserError(f"delta must be a finite number > 0, got {self.delta}")
        if self.eval_steps < 0:
            raise UserError(f"eval_steps must be >= 0, got {self.eval_steps}")


@dataclass(frozen=True)
class OptionSet:
    """One algorithm's options: its Options dataclass, the defaults its registered variant changes,
    and the official code's / PFLlib's values."""

    Options: type = NoOptions
    defaults: Mapping[str, Any] = field(default_factory=dict)
    official: Mapping[str, Any] = field(default_factory=dict)


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
    # FedBABU: PFLlib fine-tunes the whole model once, after the last round, as the defaults do
    "fedbabu": OptionSet(FedBABUOptions, official=PFLLIB_LOADER),
    # Per-FedAvg: the paper's simple mean; PFLlib weights by train size, trains twice per round with a fixed beta
    "perfedavg": OptionSet(PerFedAvgOptions, defaults={"weighting": "uniform"},
                           official={**PFLLIB_LOADER, "weighting": "size", "beta_decay": False, "double_train": True}),
}


def option_set(algorithm: str) -> OptionSet:
    if algorithm not in OPTION_SETS:
        raise UserError(f"unknown algorithm {algorithm!r}; available: {', '.join(sorted(OPTION_SETS))}")
    return OPTION_SETS[algorithm]


def resolve_options(algorithm: str, overrides: dict[str, Any]) -> tuple[Any, EngineOptions]:
    """Split `--set` values into (algorithm options, engine options), applying `preset` first."""
    options = option_set(algorithm)
    explicit = dict(overrides)
    preset = explicit.get("preset", "paper")
    if preset not in PRESETS:
        raise UserError(f"option preset={preset!r}: choose one of {', '.join(PRESETS)}")
    values = {**options.defaults, **(options.official if preset == "official" else {}), **explicit}
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
                         "choices": PRESETS, "help": PRESET_HELP})
    return rows
