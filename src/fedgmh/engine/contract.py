"""The engine-algorithm contract: what `run_rounds` and `play_round` call on an algorithm.

`fedgmh.algorithms.base.Algorithm` implements it (with defaults for every optional hook); a test may
hand the engine any object that does. Every round: choose_clients(rnd, proposed) -> send(rnd,
selected) -> eval_params(client) for every client (when evaluating) -> the engine trains the
selected clients (`Trainable`) -> aggregate(rnd, selected). Checkpoints go through state() /
load_state(state).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from torch import Tensor

from fedgmh.engine.federation import Federation, LocalResult, Params
from fedgmh.engine.training import Phase


@runtime_checkable
class Trainable(Protocol):
    """How the engine trains an algorithm's clients (`engine.rounds.train_clients`): a client's
    local training is start_training -> its phases -> draw_after_training -> finish_training, run
    client by client (`train_client`) or for all chosen clients at once (vectorised), which
    `why_sequential` allows or forbids."""

    def start_training(self, rnd: int, client: int) -> list[Phase]: ...

    def finish_training(self, rnd: int, client: int, phases: list[Phase], results: list[LocalResult]) -> LocalResult: ...

    def draw_after_training(self, rnd: int, client: int) -> None: ...

    def training_fed(self) -> Federation: ...

    def train_client(self, rnd: int, client: int) -> LocalResult: ...

    def why_sequential(self) -> str | None: ...


@runtime_checkable
class RoundHooks(Protocol):
    """What the round loop calls every round, and the facts it reads."""

    name: str
    #: False when evaluating the same model twice can give different numbers: no cached or batched evaluation
    deterministic_eval: bool
    #: False when a client that trains uploads nothing: `clients_up` counts only `extra_uploads`
    trained_clients_upload: bool
    #: uploads this round besides the trained clients' (the engine sets it to 0 before `send`)
    extra_uploads: int

    def choose_clients(self, rnd: int, proposed: list[int]) -> list[int]: ...

    def send(self, rnd: int, selected: list[int]) -> None: ...

    def eval_params(self, client: int) -> Params: ...

    def forward(self, params: Params, x: Tensor) -> Tensor: ...

    def aggregate(self, rnd: int, selected: list[int]) -> None: ...

    def state(self) -> dict[str, Any]: ...

    def load_state(self, state: dict[str, Any]) -> None: ...


@runtime_checkable
class EngineAlgorithm(RoundHooks, Trainable, Protocol):
    """The whole contract, as `Algorithm` implements it."""
