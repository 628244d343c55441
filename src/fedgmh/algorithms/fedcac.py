"""FedCAC (Wu et al., ICCV 2023): critical parameters collaborate only with similar clients, the
rest with everyone.

After local training a client marks its critical parameters: per parameter tensor, the top `tau`
share by |delta * theta| (`fedgmh.critical_mask`, the score FedGMH borrowed from FedCAC, here over
the whole model). The server averages the trained models into the global model w (FedAvg: this is
`ParameterAveraging`), and gives each trained client i a customised model u_i: the unweighted mean
of the trained models of the clients whose critical positions overlap i's enough (a threshold that
rises every round, so critical parameters end up purely local). A client's model is
theta_i = M_i * u_i + (1 - M_i) * w, rebuilt whenever w changes; a client that never trained has w.

Every point where PFLlib (`servercac.py`, `clientcac.py`) departs from the authors' code (Fling)
that changes results is an option (CACOptions in fedgmh.cards.fedcac); `preset=official`
selects PFLlib's. See docs/baselines.md.
"""

from __future__ import annotations

import logging

import torch

from fedgmh.algorithms.averaging import ParameterAveraging
from fedgmh.algorithms.base import Exchange
from fedgmh.algorithms.fedgmh import critical_mask
from fedgmh.cards.fedcac import CACOptions
from fedgmh.engine import Federation, LocalResult, Params, Phase

_log = logging.getLogger(__name__)

#: columns of the flattened masks multiplied at once when counting shared critical positions
CHUNK = 1 << 16


def shared_counts(masks: list[Params]) -> torch.Tensor:
    """P x P float64: entry (i, j) = number of positions critical in both masks i and j (the
    diagonal: |M_i|). Counted in chunks of float32 0/1 products, whose sums stay exact integers."""
    count = len(masks)
    first = next(iter(masks[0].values()))
    shared = torch.zeros(count, count, dtype=torch.float64, device=first.device)
    for name in masks[0]:
        stacked = torch.stack([m[name].reshape(-1) for m in masks])
        for part in stacked.split(CHUNK, dim=1):
            part = part.float()
            shared += (part @ part.T).double()
    return shared


def overlap_rates(masks: list[Params]) -> torch.Tensor:
    """O_ij = 1 - ||M_i - M_j||_1 / (2 ||M_i||_1) for binary masks (the diagonal is meaningless).

    ||M_i - M_j||_1 = |M_i| + |M_j| - 2 |M_i and M_j|; asymmetric when |M_i| != |M_j| (kept, as
    both codes do); NaN for a client without critical positions (tau = 0), which then matches
    no threshold.
    """
    shared = shared_counts(masks)
    size = shared.diagonal()
    return 1 - (size[:, None] + size[None, :] - 2 * shared) / (2 * size[:, None])


def collaboration_threshold(overlaps: torch.Tensor, rnd: int, beta: int) -> torch.Tensor:
    """T_t = mean + ((t + 1) / beta) * (max - mean) over the off-diagonal overlaps (t: 0-based round).

    Computed as a lerp, exact at its end point: at t + 1 = beta the threshold is the largest
    overlap itself (only the pairs that reach it still collaborate), after that it is above it.
    """
    off = overlaps[~torch.eye(len(overlaps), dtype=torch.bool, device=overlaps.device)]
    mean, top = off.mean(), off.max()
    return torch.lerp(mean, top, (rnd + 1) / beta)


def collaborators(overlaps: torch.Tensor, threshold: torch.Tensor) -> list[list[int]]:
    """Per row i: [i] + the other columns j (ascending) with O_ij >= threshold."""
    chosen = (overlaps >= threshold).tolist()
    return [[i] + [j for j, ok in enumerate(row) if ok and j != i] for i, row in enumerate(chosen)]


def mean_model(models: list[Params]) -> Params:
    """The unweighted mean of full models: the first plus the others, in order, divided by their
    number (PFLlib's and Fling's order of operations); one model is returned as it is."""
    if len(models) == 1:
        return models[0]
    total = {k: v.clone() for k, v in models[0].items()}
    for model in models[1:]:
        for k, v in model.items():
            total[k] += v
    return {k: v / float(len(models)) for k, v in total.items()}


class FedCAC(ParameterAveraging):
    """The global model w is FedAvg's (`ParameterAveraging` sharing the whole model); masks M_i and
    customised models u_i are kept per client that has trained (the server's copies; clients that
    never trained share w)."""

    transient = ("pending_masks", "mixed")

    @classmethod
    def exchange(cls, options, sizes, labels, models=None) -> Exchange:
        """Up: the trained model and its mask (one byte per parameter); down: w to every client,
        and u_i to each client that just trained."""
        entries = sizes.model * sizes.head_entries // sizes.head  # parameters of the model
        mask = entries * (sizes.psi // sizes.head_entries)  # bytes of a bool mask over them
        return Exchange(sizes.model + mask, 2 * sizes.model, sizes.model)

    def __init__(self, fed: Federation, options: CACOptions) -> None:
        super().__init__(fed, options)
        n = fed.num_clients
        self.masks: list[Params | None] = [None] * n  # M_i: True = critical (bool per parameter)
        self.custom: list[Params | None] = [None] * n  # u_i
        self.latest: list[Params | None] = [None] * n  # pool=all_uploaded: each client's last trained model
        self.pending_masks: dict[int, Params] = {}  # this round's uploaded masks, until aggregate
        self.mixed: dict[int, Params] = {}  # theta_i for the current w (rebuilt after every aggregate)

    def eval_params(self, client: int) -> Params:
        """theta_i = where(M_i, u_i, w), or w for a client that never trained (memoised until w changes)."""
        mask = self.masks[client]
        if mask is None:
            return self.global_params
        if client not in self.mixed:
            custom, w = self.custom[client], self.global_params
            self.mixed[client] = {k: torch.where(mask[k], custom[k], w[k]) for k in w}
        return self.mixed[client]

    def start_training(self, rnd: int, client: int) -> list[Phase]:
        return [Phase(self.eval_params(client))]

    def finish_training(self, rnd: int, client: int, phases: list[Phase], results: list[LocalResult]) -> LocalResult:
        result = results[0]
        mask = critical_mask(phases[0].params, result.params, self.options.tau, "delta_theta", "per_tensor")
        if result.num_samples == 0:
            # PFLlib's "Abnormal!!!": no batch, every score 0, the fallback keeps threshold 0
            _log.info("fedcac: client %d had no batch to train on in round %d: all its parameters count as critical", client, rnd)
        self.pending_masks[client] = self.fed.channel.upload(mask)
        self.keep(client, result.params)  # uploads the trained model (ParameterAveraging)
        return result

    def aggregate(self, rnd: int, selected: list[int]) -> None:
        trained = {c: self.uploads[c] for c in selected}
        super().aggregate(rnd, selected)  # w: the train-size weighted mean of the trained models
        for client in selected:
            self.masks[client] = self.pending_masks.pop(client)
        if self.options.pool == "all_uploaded":
            for client in selected:
                self.latest[client] = trained[client]
            pool = [c for c in range(self.fed.num_clients) if self.latest[c] is not None]
            models = {c: self.latest[c] for c in pool}
        else:
            pool, models = list(selected), trained
        if self.options.round0_reset and rnd == 0:
            # PFLlib skips the customisation after round 0: its clients' customised models are
            # still the initial model, which their critical positions now take
            initial = self.fed.initial_params()
            customised = {c: initial for c in selected}
        else:
            customised = self.customise(rnd, selected, pool, models)
        for client in selected:
            self.custom[client] = self.fed.channel.download(customised[client])
        self.mixed = {}

    def customise(self, rnd: int, selected: list[int], pool: list[int], models: dict[int, Params]) -> dict[int, Params]:
        """u_i for each selected i: the unweighted mean of the models of C_i = {i} + {j in pool :
        O_ij >= T_t}; with fewer than two clients in the pool, u_i = theta_i'."""
        if len(pool) < 2:
            return {c: models[c] for c in selected}
        overlaps = overlap_rates([self.masks[c] for c in pool])
        threshold = collaboration_threshold(overlaps, rnd, self.options.beta)
        circles = collaborators(overlaps, threshold)
        position = {c: i for i, c in enumerate(pool)}
        return {c: mean_model([models[pool[j]] for j in circles[position[c]]]) for c in selected}
