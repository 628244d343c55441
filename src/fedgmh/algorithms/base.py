"""The algorithm interface: a few hooks on the engine's one round loop, and the registry."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from torch import Tensor

from fedgmh.engine import Federation, LocalResult, Params
from fedgmh.errors import UserError

REGISTRY: dict[str, type["Algorithm"]] = {}


@dataclass(frozen=True)
class NoOptions:
    """An algorithm without options of its own."""


class Algorithm:
    """Hooks called by `engine.run_rounds`, in this order every round:

    send(rnd, selected) -> eval_params(client) for every client (when evaluating)
    -> train_client(rnd, client) for each selected client -> aggregate(rnd, selected).
    """

    name: ClassVar[str] = ""
    display_name: ClassVar[str] = ""
    Options: ClassVar[type] = NoOptions
    #: option values that differ from `Options`' defaults for this registered variant
    defaults: ClassVar[dict[str, Any]] = {}
    #: option values of the official code / PFLlib, applied by `--set preset=official`
    #: (keys may be engine options too, e.g. drop_last).
    official: ClassVar[dict[str, Any]] = {}

    def __init__(self, fed: Federation, options: Any) -> None:
        self.fed = fed
        self.options = options

    def send(self, rnd: int, selected: list[int]) -> None:
        """Server -> clients before evaluation and training."""

    def eval_params(self, client: int) -> Params:
        """The model that is evaluated on `client`'s test split."""
        raise NotImplementedError

    def forward(self, params: Params, x: Tensor) -> Tensor:
        """Logits of a model at evaluation (an algorithm with extra heads combines them here)."""
        return self.fed.forward(params, x)

    def train_client(self, rnd: int, client: int) -> LocalResult:
        raise NotImplementedError

    def aggregate(self, rnd: int, selected: list[int]) -> None:
        """Server step after the selected clients have trained."""


def register(cls: type[Algorithm]) -> type[Algorithm]:
    if cls.name in REGISTRY:
        raise ValueError(f"algorithm {cls.name!r} registered twice")
    REGISTRY[cls.name] = cls
    return cls


def get_algorithm(name: str) -> type[Algorithm]:
    if name not in REGISTRY:
        raise UserError(f"unknown algorithm {name!r}; available: {', '.join(sorted(REGISTRY))}")
    return REGISTRY[name]
