"""Baselines that keep a whole personalised model per client: Ditto, FedAMP and FedFomo.

Ditto trains a FedAvg global model and, beside it, a personal model pulled toward it. FedAMP pulls
each client toward a "cloud model" that the server mixes from the uploaded models with attention
weights. FedFomo lets each client mix downloaded models with weights from their validation-loss
gain. FedAMP and FedFomo keep each client's model on the server (`HeldModels`) and move it
toward other models (`pull_toward`, on flattened models), Ditto and FedAMP add a proximal
gradient (`engine.proximal_hook`, shared with FedProx).

Every point where PFLlib departs from the papers is an option; `preset=official` selects them all.
See docs/baselines.md.
"""

from __future__ import annotations

from typing import Callable

import torch

from fedgmh.algorithms.averaging import ParameterAveraging
from fedgmh.algorithms.base import Algorithm, Exchange
from fedgmh.cards.personal import AMPOptions, DittoOptions, FomoOptions
from fedgmh.engine import Federation, LocalResult, Params, Phase, evaluate_clients, proximal_hook, summed_loss
from fedgmh.errors import UserError


def flatten(params: Params) -> torch.Tensor:
    return torch.cat([v.reshape(-1) for v in params.values()])


def unflatten(flat: torch.Tensor, like: Params) -> Params:
    parts = torch.split(flat, [v.numel() for v in like.values()])
    return {k: part.view_as(v) for (k, v), part in zip(like.items(), parts)}


def squared_distances(own: torch.Tensor, others: torch.Tensor) -> torch.Tensor:
    """||own - others_j||^2 for each row j of `others` (flat models), accumulated in float64."""
    return torch.sum(torch.square(others - own), dim=1, dtype=torch.float64)


def pull_toward(own: torch.Tensor, others: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """own + sum_j weights_j * (others_j - own) = (1 - sum w) * own + sum_j w_j * others_j (flat models)."""
    return own + weights.to(device=own.device, dtype=own.dtype) @ (others - own)


# ----------------------------------------------------------------------------------------- Ditto


class Ditto(ParameterAveraging):
    """Li et al. 2021: FedAvg global model + per-client personal model with a proximal pull to it.

    Each participation: the personal step (CE + (mu/2)||v - w_g||^2 for plocal_epochs, w_g the
    global model just received), then the global step (FedAvg local training, uploaded and
    averaged by ParameterAveraging), in PFLlib's order. Personal models are evaluated.
    """

    transient = ("_reported",)

    @classmethod
    def exchange(cls, options, sizes, labels, models=None) -> Exchange:
        """The global model up and down; to every client when it is evaluated there (max_of_both)."""
        return Exchange(sizes.model, sizes.model, sizes.model if options.report == "max_of_both" else 0)

    def __init__(self, fed: Federation, options: DittoOptions) -> None:
        super().__init__(fed, options)
        self.personal: list[Params] = [self.global_params] * fed.num_clients  # never modified in place
        self._reported: Callable[[int], Params] | None = None

    def send(self, rnd: int, selected: list[int]) -> None:
        self._reported = None
        # the global model goes to the selected clients (for the proximal pull and the global step);
        # report=max_of_both evaluates it on every client, so then it goes to all (as in PFLlib)
        receivers = len(selected) if self.options.report == "personal" else self.fed.num_clients
        for _ in range(receivers):
            self.fed.channel.download(self.global_params)

    def eval_params(self, client: int) -> Params:
        if self.options.report == "personal":
            return self.personal[client]
        if self._reported is None:
            self._reported = self.better_of_both()
        return self._reported(client)

    def better_of_both(self) -> Callable[[int], Params]:
        """PFLlib's quirk: of the global and the personal models, the one with the higher accuracy now.

        PFLlib appends both accuracies of a round to one list and reports its maximum; picking the
        better one per round gives the same best accuracy (costs two extra evaluation passes).
        """
        global_acc = evaluate_clients(self.fed, lambda c: self.global_params)["test_acc"]
        personal_acc = evaluate_clients(self.fed, self.personal.__getitem__)["test_acc"]
        return (lambda c: self.global_params) if global_acc > personal_acc else self.personal.__getitem__

    def start_training(self, rnd: int, client: int) -> list[Phase]:
        """The personal step, then the global step (FedAvg's; its upload is averaged in aggregate)."""
        hook = proximal_hook(self.options.mu) if self.options.mu else None
        personal = Phase(self.personal[client], epochs=self.options.plocal_epochs, grad_hook=hook, extra={"anchor": self.global_params})
        return [personal, *super().start_training(rnd, client)]

    def finish_training(self, rnd: int, client: int, phases: list[Phase], results: list[LocalResult]) -> LocalResult:
        self.personal[client] = results[0].params
        super().finish_training(rnd, client, phases[1:], results[1:])
        return results[0]  # the personal model's training loss is reported


# ------------------------------------------------------- models held by the server (FedAMP, FedFomo)


class HeldModels(Algorithm):
    """A client's model is its last upload, which the server holds (stored once, in `models`);
    each client is evaluated on its own model. A subclass's `__init__` sets `models`, `uploaded`
    (the clients that ever uploaded) and `last_round` (the clients that trained last round)."""

    models: list[Params]
    uploaded: set[int]
    last_round: list[int]

    def eval_params(self, client: int) -> Params:
        return self.models[client]

    def finish_training(self, rnd: int, client: int, phases: list[Phase], results: list[LocalResult]) -> LocalResult:
        self.models[client] = self.fed.channel.upload(results[0].params)
        return results[0]

    def aggregate(self, rnd: int, selected: list[int]) -> None:
        self.last_round = list(selected)
        self.uploaded.update(selected)


# ---------------------------------------------------------------------------------------- FedAMP


def attention_weights(own: torch.Tensor, others: torch.Tensor, alphaK: float, sigma: float) -> torch.Tensor:
    """xi_ij = alphaK * A'(||w_i - w_j||^2) with A(x) = 1 - exp(-x / sigma) (flat models); xi_ii = 1 - sum."""
    return alphaK * torch.exp(-squared_distances(own, others) / sigma) / sigma


class FedAMP(HeldModels):
    """Huang et al. 2021: attentive message passing; each client keeps and is evaluated on its own model.

    Server: for each selected client i, u_i = xi_ii w_i + sum_{j != i} xi_ij w_j over the models it
    holds. Client: local SGD on CE + (lamda / (2 alphaK)) ||w - u_i||^2 starting from w_i (PFLlib's
    starting point; the paper's proximal step does not fix one). The server's copy of a client's
    model IS the client's model (uploaded right after training), so it is stored once.
    """

    @classmethod
    def exchange(cls, options, sizes, labels, models=None) -> Exchange:
        return Exchange(sizes.model, sizes.model, 0)  # down: the cloud model u_i; up: the trained w_i

    def __init__(self, fed: Federation, options: AMPOptions) -> None:
        super().__init__(fed, options)
        self.models: list[Params] = [fed.initial_params()] * fed.num_clients
        self.uploaded: set[int] = set()
        self.last_round: list[int] = []
        self.clouds: dict[int, Params] = {}

    def pool(self) -> list[int]:
        """Clients whose held model may enter a cloud model (a client's own entry is skipped)."""
        return self.last_round if self.options.cloud == "last_round" else sorted(self.uploaded)

    def cloud_models(self, clients: list[int]) -> dict[int, Params]:
        """u_i = w_i + sum_{j != i} xi_ij (w_j - w_i) for each of `clients`, on flattened models."""
        pool = self.pool()
        if not pool:
            return {c: self.models[c] for c in clients}
        held = torch.stack([flatten(self.models[j]) for j in pool])
        clouds = {}
        for client in clients:
            own = flatten(self.models[client])
            weights = attention_weights(own, held, self.options.alphaK, self.options.sigma)
            weights[torch.tensor([j == client for j in pool], device=weights.device)] = 0.0  # j != i
            clouds[client] = unflatten(pull_toward(own, held, weights), self.models[client])
        return clouds

    def send(self, rnd: int, selected: list[int]) -> None:
        if self.options.proximal == "gradient":  # detached: u_i cannot change the training, skip it
            self.clouds = self.cloud_models(selected)
        for client in selected:  # u_i goes to each selected client; when skipped, counted at its size (= w_i's)
            self.fed.channel.download(self.clouds[client] if self.options.proximal == "gradient" else self.models[client])

    def start_training(self, rnd: int, client: int) -> list[Phase]:
        if self.options.proximal == "detached":  # the term has no gradient: plain SGD
            return [Phase(self.models[client])]
        hook = proximal_hook(self.options.lamda / self.options.alphaK)
        return [Phase(self.models[client], grad_hook=hook, extra={"anchor": self.clouds.pop(client)})]


# --------------------------------------------------------------------------------------- FedFomo

WEIGHT_DTYPE = torch.float64  # the weights w_n a client uploads with its model


def fomo_weights(loss_old: float, losses: list[float], distances: list[float]) -> tuple[torch.Tensor, torch.Tensor]:
    """Raw w_n = (L_old - L_n) / (||theta_n - theta_old|| + 1e-5) and their positive parts normalised
    to sum 1 (all zero when no model improves on theta_old)."""
    raw = torch.tensor([(loss_old - ln) / (d + 1e-5) for ln, d in zip(losses, distances)], dtype=WEIGHT_DTYPE)
    positive = raw.clamp(min=0)
    total = positive.sum()
    return raw, positive / total if total > 0 else positive


class FedFomo(HeldModels):
    """Zhang et al. 2021: each selected client mixes downloaded models by validation-loss gain per distance.

    A client's validation set is the last val_ratio of its train split (fixed); it trains on the
    rest. The server holds every client's last upload (= its current model, stored once) and an
    N x N affinity matrix P; row i gains the raw weights w_n each time client i combines.
    """

    transient = ("train_fed",)

    @classmethod
    def exchange(cls, options, sizes, labels, models=None) -> Exchange:
        """Down: n = min(M, models) models; up: its model and one weight w_n per downloaded model."""
        n = options.M if models is None else min(options.M, models)
        return Exchange(sizes.model + n * torch.empty(0, dtype=WEIGHT_DTYPE).element_size(), n * sizes.model, 0)

    def __init__(self, fed: Federation, options: FomoOptions) -> None:
        super().__init__(fed, options)
        if options.M > fed.num_clients:
            raise UserError(f"M={options.M} is larger than the number of clients ({fed.num_clients})")
        self.initial = fed.initial_params()
        self.models: list[Params] = [self.initial] * fed.num_clients
        self.pre_training: dict[int, Params] = {}  # baseline=pre_training only
        self.affinity = torch.eye(fed.num_clients, dtype=torch.float64)
        train, self.val_idx = [], []
        for idx in fed.train_idx:
            cut = len(idx) - int(options.val_ratio * len(idx))
            train.append(idx[:cut])
            self.val_idx.append(idx[cut:])
        self.train_fed = fed.view(train_idx=train, shuffle=options.local_order != "fixed")
        self.uploaded: set[int] = set()
        self.last_round: list[int] = []
        self.downloads: dict[int, list[tuple[int, Params]]] = {}

    def choose(self, rnd: int, client: int) -> list[int]:
        """The ids of the models `client` downloads this round."""
        row = self.affinity[client]
        if self.options.selection == "top_m":  # PFLlib: as many as uploaded last round, ties by lower id
            order = torch.sort(row, descending=True, stable=True).indices
            return order[: min(self.options.M, len(self.last_round))].tolist()
        candidates = torch.tensor(sorted(self.uploaded - {client}), dtype=torch.long)
        if len(candidates) == 0:
            return []
        gen = self.fed.generator
        tiebreak = candidates[torch.randperm(len(candidates), generator=gen)]
        top = tiebreak[torch.sort(row[tiebreak], descending=True, stable=True).indices].tolist()
        rand = candidates[torch.randperm(len(candidates), generator=gen)].tolist()
        epsilon = max(0.0, self.options.epsilon - rnd * self.options.epsilon_decay)
        chosen: list[int] = []
        for _ in range(min(self.options.M, len(candidates))):
            source = rand if float(torch.rand((), generator=gen)) < epsilon else top
            while source[0] in chosen:
                source.pop(0)
            chosen.append(source.pop(0))
        return chosen

    def send(self, rnd: int, selected: list[int]) -> None:
        # references to the models held now, so clients training earlier this round do not leak in
        self.downloads = {c: [(j, self.models[j]) for j in self.choose(rnd, c)] for c in selected}
        for chosen in self.downloads.values():
            self.fed.channel.download([m for _, m in chosen])

    @torch.no_grad()
    def validation_loss(self, client: int, params: Params) -> float:
        idx = self.val_idx[client]
        if self.options.val_loss == "sample_mean":
            return summed_loss(self.fed, params, idx) / len(idx)
        batches = idx.split(self.fed.batch_size)
        return sum(summed_loss(self.fed, params, b) / len(b) for b in batches) / len(batches)

    def personalise(self, client: int, downloads: list[tuple[int, Params]]) -> tuple[Params, torch.Tensor]:
        """The combined model theta_old + sum_n w_n (theta_n - theta_old) and the raw weights w_n."""
        current = self.models[client]
        if not downloads or len(self.val_idx[client]) == 0:
            return current, torch.zeros(len(downloads), dtype=torch.float64)
        old = current if self.options.baseline == "current" else self.pre_training.get(client, self.initial)
        losses = [self.validation_loss(client, m) for _, m in downloads]
        flat_old, others = flatten(old), torch.stack([flatten(m) for _, m in downloads])
        distances = squared_distances(flat_old, others).sqrt().tolist()
        raw, weights = fomo_weights(self.validation_loss(client, old), losses, distances)
        if weights.sum() == 0:
            return current, raw
        return unflatten(pull_toward(flat_old, others, weights), old), raw

    def training_fed(self) -> Federation:
        return self.train_fed

    def start_training(self, rnd: int, client: int) -> list[Phase]:
        """Combine the downloads into the client's model (no random numbers), which then trains."""
        downloads = self.downloads.pop(client)
        combined, raw = self.personalise(client, downloads)
        self.fed.channel.upload(raw)  # the server keeps the affinity matrix: the client sends its weights w_n
        for (j, _), w in zip(downloads, raw.tolist()):
            self.affinity[client, j] += w
        if self.options.baseline == "pre_training":
            self.pre_training[client] = combined
        return [Phase(combined)]
