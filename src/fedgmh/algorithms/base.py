"""The algorithm interface: a few hooks on the engine's one round loop."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from fedgmh.engine import Federation, LocalResult, Params, Phase, train_phases

@dataclass(frozen=True)
class Exchange:
    """Bytes one client moves in one training round."""

    up: int  # a participating client uploads
    down: int  # a participating client downloads (at the round's start and after aggregation)
    down_other: int  # a client that does not participate downloads


class Algorithm(ABC):
    """The engine's contract (`engine.EngineAlgorithm`), with a default for every optional hook; the
    hooks every algorithm must define (exchange, eval_params, start_training, finish_training) are
    abstract, so a class lacking one cannot be instantiated (nor named by a card: `get_algorithm`).
    Hooks called by `engine.run_rounds` / `engine.play_round`, in this order every round:

    choose_clients(rnd, proposed) -> send(rnd, selected) -> eval_params(client) for every client
    (when evaluating) -> the engine trains the selected clients -> aggregate(rnd, selected).

    A client's local training is `start_training` (its phases: `engine.Phase`, each one
    `local_train` call described as data) -> the phases -> `finish_training`. The engine decides
    how the selected clients train (`engine.train_chosen`, which also does the bookkeeping): client
    by client (`train_client`), or all at once (`vectorised.train_phases_many`, engine option
    `vectorise`) when `why_sequential` allows it. An algorithm that trains a client in its own way
    overrides `train_client`, which makes it train client by client.
    """

    #: the name of the card that names this class (set by `fedgmh.algorithms.get_algorithm`)
    name: ClassVar[str] = ""
    #: True when what a client exchanges grows with its number of labels |S_m|
    traffic_per_label: ClassVar[bool] = False
    #: False when evaluating the same model twice can give different numbers (random forward
    #: passes): then no evaluation result is reused
    deterministic_eval: ClassVar[bool] = True
    #: the names of the tables `extra_records` returns (NAME.csv in the record): a run folder's
    #: record files are known by name, so `fedgmh train` replaces only those
    record_tables: ClassVar[tuple[str, ...]] = ()
    #: attributes that `__init__` rebuilds and a checkpoint therefore leaves out (views of the
    #: federation, per-round caches)
    transient: ClassVar[tuple[str, ...]] = ()
    #: False when a client that trains uploads nothing (Local): the round row's `clients_up` then
    #: counts only `extra_uploads`
    trained_clients_upload: ClassVar[bool] = True
    #: True when its phases' bound-method seams (loss_fn, grad_hook, draw) read nothing of the algorithm
    #: but its `options` and the model's architecture: two runs' seams with equal options are then the
    #: same function, so `fedgmh train-group` trains their clients in one step (`vectorised._same_function`)
    seams_read_options_only: ClassVar[bool] = False
    #: uploads this round besides those of the clients that trained (e.g. extra clients of a
    #: cluster round): `engine.play_round` sets it to 0 before `send`, an algorithm adds to it, and
    #: the round row's `clients_up` adds it to the trained clients. Never checkpointed.
    extra_uploads: int = 0

    def __init__(self, fed: Federation, options: Any) -> None:
        self.fed = fed
        self.options = options

    @classmethod
    @abstractmethod
    def exchange(cls, options: Any, sizes: Any, labels: int, models: int | None = None) -> Exchange:
        """What one client with `labels` = |S_m| local labels passes through `fed.channel` per training
        round, from `costs.Sizes` and the resolved `options`; `models` bounds how many uploaded models
        a client can download (None: no bound)."""

    @classmethod
    def aliased_bytes(cls, options: Any, sizes: Any) -> int:
        """Bytes of server state that IS client 0's (up when client 0 trains, down to it every round)."""
        return 0

    def state(self) -> dict[str, Any]:
        """Everything the algorithm keeps between rounds (client and server state), for checkpoints."""
        skip = {"fed", "options", "extra_uploads", *self.transient}
        return {k: v.get_state() if isinstance(v, torch.Generator) else v for k, v in vars(self).items() if k not in skip}

    def load_state(self, state: dict[str, Any]) -> None:
        """Restore `state()` into a freshly constructed algorithm (same federation and options)."""
        for key, value in state.items():
            current = getattr(self, key, None)
            if isinstance(current, torch.Generator):
                current.set_state(value)
            else:
                setattr(self, key, value)

    def choose_clients(self, rnd: int, proposed: list[int]) -> list[int]:
        """The clients that take part in round `rnd` (they are sent to, then train), given the
        `proposed` ones the engine drew uniformly (`engine.select_clients`). The engine draws
        `proposed` every round whatever the answer, so its RNG stream (and checkpoints) never depend
        on it; an answer must be distinct client indices (it may be empty). Default: `proposed`."""
        return proposed

    def send(self, rnd: int, selected: list[int]) -> None:
        """Server -> clients before evaluation and training."""

    @abstractmethod
    def eval_params(self, client: int) -> Params:
        """The model that is evaluated on `client`'s test split."""

    def forward(self, params: Params, x: Tensor) -> Tensor:
        """Logits of a model at evaluation (an algorithm with extra heads combines them here)."""
        return self.fed.forward(params, x)

    @abstractmethod
    def start_training(self, rnd: int, client: int) -> list[Phase]:
        """The client's local training, as phases run one after the other."""

    @abstractmethod
    def finish_training(self, rnd: int, client: int, phases: list[Phase], results: list[LocalResult]) -> LocalResult:
        """Keep/upload what the client's phases produced; returns the result reported for the client."""

    def training_fed(self) -> Federation:
        """The federation whose train splits local training uses (FedFomo holds out validation samples)."""
        return self.fed

    def draw_after_training(self, rnd: int, client: int) -> None:
        """Random numbers the client draws after its local training, before the next client's,
        kept for `finish_training` (FedGMH with drop_last: its prototype epoch's shuffle). Both
        paths call it at this point of the generator's sequence."""

    def train_client(self, rnd: int, client: int) -> LocalResult:
        """One client's local training on the sequential path: start -> its phases -> finish."""
        phases = self.start_training(rnd, client)
        results = train_phases(self.training_fed(), phases, client)
        self.draw_after_training(rnd, client)
        return self.finish_training(rnd, client, phases, results)

    def why_sequential(self) -> str | None:
        """Why the selected clients cannot train in one batched step, or None when they can: when
        training a client is exactly start -> its phases -> finish, drawing no random numbers other
        than its phases' shuffles and draws and `draw_after_training` (a batched pass draws all
        clients' before any training)."""
        if type(self).train_client is not Algorithm.train_client:
            return "it trains a client with its own train_client"
        return None

    def aggregate(self, rnd: int, selected: list[int]) -> None:
        """Server step after the selected clients have trained."""

    def extra_records(self) -> dict[str, Any]:
        """Tables (pandas DataFrames) of the finished run's algorithm state, by name: `fedgmh train`
        writes each as NAME.csv beside metrics.csv, part of the run's record (stores copy and compare
        it); NAME: lower-case letters, digits and _, not metrics or clients. Default: none."""
        return {}
