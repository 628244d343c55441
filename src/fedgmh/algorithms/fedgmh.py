"""FedGMH (Sun & Ni, 2026), its ablations GMH-o, GMH-a, GMH-oa, and FedGH (one global head).

Bodies and heads stay on the clients. The server keeps one head per label (S = K heads; one head
in the "-o" ablations) trained on the clients' per-label mean features (eq. 6). A selected client
mixes the heads of its labels, weighted by its label shares, into its own head (eq. 9: at the
positions marked by its mask psi; eq. 10/11 in the "-a" ablations), trains the whole model,
computes a new mask from the head's criticality (Algorithm 1, eq. 7-8) and uploads prototypes
(eq. 4-5).

Every point where the official code (youcaihua1/FedGMH) departs from the paper's text is an
option (GMHOptions, with each variant's official values, in fedgmh.cards.fedgmh);
`preset=official` selects all of them at once. See docs/fedgmh.md (FedGH: docs/baselines.md).
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from fedgmh.algorithms.base import Algorithm, Exchange
from fedgmh.cards.fedgmh import GMHOptions
from fedgmh.engine import Federation, LocalResult, Params, Phase
from fedgmh.engine.federation import to_device
from fedgmh.errors import UserError
from fedgmh.model import is_head

NEAR_ZERO = 1e-10  # official code: a threshold at or below this counts as "zero"
TINY = 1e-20  # official code: fallback threshold = the smallest score above this
LABEL_DTYPE = torch.int32  # uploaded labels: 4 bytes each, as the paper's 0.39 KB for 100 labels


def critical_mask(before: Params, after: Params, beta: float, score: str, selection: str) -> Params:
    """Algorithm 1: True at the head positions whose criticality is among the top B = beta * L.

    global: exactly B = floor(beta * L) positions over all head tensors, ties broken by position.
    per_tensor (official): per tensor, threshold = the floor(beta * n)-th largest score; if it is
    ~0 the threshold becomes the smallest score > 1e-20; every score >= threshold is critical.
    """
    scores = {}
    for name, theta in after.items():
        delta = theta - before[name]
        scores[name] = (delta * theta if score == "delta_theta" else delta * delta * theta).abs()
    if selection == "global":
        flat = torch.cat([s.flatten() for s in scores.values()])
        budget = math.floor(beta * flat.numel() + 1e-9)  # B = beta * L without float fuzz (0.7 * 5130)
        order = torch.sort(flat, descending=True, stable=True).indices
        chosen = torch.zeros_like(flat, dtype=torch.bool)
        chosen[order[:budget]] = True
        parts = torch.split(chosen, [s.numel() for s in scores.values()])
        return {name: part.view_as(scores[name]) for name, part in zip(scores, parts)}
    masks = {}
    for name, s in scores.items():
        flat = s.flatten()
        budget = int(beta * flat.numel())
        threshold = torch.topk(flat, budget).values[-1] if budget > 0 else flat.new_tensor(float("inf"))
        # on the device, without reading it: a threshold ~0 becomes the smallest score > TINY, if any
        smallest = torch.where(flat > TINY, flat, torch.inf).min()
        threshold = torch.where((threshold <= NEAR_ZERO) & torch.isfinite(smallest), smallest, threshold)
        masks[name] = s >= threshold
    return masks


@torch.no_grad()
def class_means(fed: Federation, params: Params, idx: torch.Tensor, labels: np.ndarray) -> list[tuple[int, torch.Tensor]]:
    """Per label present among the samples `idx`, the mean body feature f(params, x) of those samples,
    as (label, mean feature) in increasing label order; [] when `idx` is empty. FedGMH's and FedGH's
    prototypes (eq. 4-5), CE-pFL's class centres (clustered.py). `labels`: the samples' labels on the
    host (`Federation.train_labels`, `labelled_epoch_samples`), so that nothing is read from the
    device. Features are computed in batches of the engine's eval_batch_size."""
    if len(idx) == 0:
        return []
    feats = torch.cat([fed.features(params, fed.images[b]) for b in idx.split(fed.options.eval_batch_size)])
    # each label's rows in sample order, gathered by index: the rows a boolean mask would select
    return [(int(s), feats[to_device(np.flatnonzero(labels == s), fed.device)].mean(dim=0)) for s in np.unique(labels)]


class GlobalMultiHead(Algorithm):
    """FedGMH with options; the registered variants below only change the defaults."""

    traffic_per_label = True

    @classmethod
    def exchange(cls, options, sizes, labels, models=None) -> Exchange:
        """Up: a prototype and a label per local label; down: the heads of its labels (or the one head)."""
        down = (labels if options.heads == "per_label" else 1) * sizes.head
        return Exchange(labels * (sizes.prototype + sizes.label), down, down if options.broadcast == "all" else 0)

    @classmethod
    def aliased_bytes(cls, options, sizes) -> int:
        return sizes.head if options.head_alias == "client0" else 0
    transient = ("prototype_samples", "mix_terms")

    def __init__(self, fed, options: GMHOptions) -> None:
        super().__init__(fed, options)
        initial = fed.initial_params()
        self.params: list[Params] = [initial] * fed.num_clients  # shared until a client changes
        self.masks: list[Params | None] = [None] * fed.num_clients
        num_heads = fed.num_classes if options.heads == "per_label" else 1
        self.heads = {k: v.unsqueeze(0).repeat(num_heads, *[1] * v.dim()) for k, v in initial.items() if is_head(k)}
        self.label_weights = [self._label_weights(c) for c in range(fed.num_clients)]
        self.uploads: list[tuple[int, torch.Tensor]] = []
        #: drawn after a client's training with their labels on the host, used by finish_training
        self.prototype_samples: dict[int, tuple[torch.Tensor, np.ndarray]] = {}
        self.mix_terms: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # per client: its labels and their weights on the device

    def _label_weights(self, client: int) -> dict[int, float]:
        labels = self.fed.labels[self.fed.train_idx[client]]
        counts = torch.bincount(labels, minlength=self.fed.num_classes).double()
        shares = counts / counts.sum()
        return {int(s): float(shares[s]) for s in torch.nonzero(counts).flatten()}

    def mixed_head(self, client: int) -> Params:
        """H_m = sum_s w_m[s] * h_s over the client's labels (the single head in the -o ablations)."""
        download = self.fed.channel.download  # the client receives the heads of its labels (one head in -o)
        if self.options.heads == "single":
            return download({k: v[0].clone() for k, v in self.heads.items()})  # not a view the server step moves
        if client not in self.mix_terms:  # fixed during the run: copied to the device once
            weights = self.label_weights[client]
            self.mix_terms[client] = (to_device(list(weights), self.fed.device, torch.long),
                                      to_device(list(weights.values()), self.fed.device, self.heads["head.weight"].dtype))
        labels, w = self.mix_terms[client]
        return {k: torch.tensordot(w, v, dims=1) for k, v in download({k: v[labels] for k, v in self.heads.items()}).items()}

    def personalise_head(self, client: int) -> None:
        mixed = self.mixed_head(client)
        current = self.params[client]
        mask = self.masks[client]
        if self.options.combine == "replace" or (self.options.combine == "mask" and mask is None):
            head = mixed
        elif self.options.combine == "average":
            head = {k: (current[k] + mixed[k]) / 2 for k in mixed}
        else:  # eq. 9: marked positions take the global mix, the others keep the local head
            head = {k: torch.where(mask[k], mixed[k], current[k]) for k in mixed}
        self.params[client] = {**current, **head}

    def send(self, rnd: int, selected: list[int]) -> None:
        receivers = selected if self.options.broadcast == "selected" else range(self.fed.num_clients)
        for client in receivers:
            if client == 0 and self.options.gmh_o_zeroing and self.masks[0] is None:
                # official clientgmho.set_parameters: an untrained client's head is zeroed in place
                # before the server head is added; client 0's head is the server head, so it stays 0
                self.heads = {k: torch.zeros_like(v) for k, v in self.heads.items()}
            self.personalise_head(client)

    def eval_params(self, client: int) -> Params:
        return self.params[client]

    def draw_after_training(self, rnd: int, client: int) -> None:
        self.prototype_samples[client] = self.fed.labelled_epoch_samples(client)  # with drop_last a fresh shuffle

    def start_training(self, rnd: int, client: int) -> list[Phase]:
        return [Phase(self.params[client])]

    def finish_training(self, rnd: int, client: int, phases: list[Phase], results: list[LocalResult]) -> LocalResult:
        before, result = phases[0].params, results[0]
        self.params[client] = result.params
        heads_before = {k: v for k, v in before.items() if is_head(k)}
        heads_after = {k: v for k, v in result.params.items() if is_head(k)}
        critical = critical_mask(heads_before, heads_after, self.options.beta, self.options.score, self.options.selection)
        self.masks[client] = critical if self.options.mix == "critical" else {k: ~m for k, m in critical.items()}
        # eq. 4-5; with drop_last (official) the samples are those of one shuffled epoch without its last
        # partial batch, like the official DataLoader (`Federation.epoch_samples`, drawn right after the
        # client's training); a client smaller than a batch uploads nothing
        prototypes = class_means(self.fed, result.params, *self.prototype_samples.pop(client))
        # upload: one d_f-float prototype per label, and the labels (LABEL_DTYPE); the server uses
        # them as Python ints
        self.fed.channel.upload([p for _, p in prototypes] + [torch.tensor([s for s, _ in prototypes], dtype=LABEL_DTYPE)])
        self.uploads.extend(prototypes)
        if self.options.head_alias == "client0" and client == 0:  # client 0's head becomes the server head
            self.heads = {k: self.fed.channel.upload(result.params[k]).unsqueeze(0).clone() for k in self.heads}
        return result

    def aggregate(self, rnd: int, selected: list[int]) -> None:
        uploads, self.uploads = self.uploads, []
        if uploads:
            self.train_heads(uploads)
        if self.options.head_alias == "client0":  # the server head goes back into client 0's model
            self.params[0] = {**self.params[0], **self.fed.channel.download({k: v[0].clone() for k, v in self.heads.items()})}

    def train_heads(self, uploads: list[tuple[int, torch.Tensor]]) -> None:
        if self.options.server_pass == "per_prototype":
            labels = to_device([label for label, _ in uploads], self.fed.device, torch.long)  # one copy, not one per prototype
            for i, (label, proto) in enumerate(uploads):
                self.server_step(0 if self.options.heads == "single" else label, proto.unsqueeze(0), labels[i : i + 1])
        else:
            order = torch.randperm(len(uploads), generator=self.fed.generator)
            for batch in order.split(self.fed.batch_size):
                protos = torch.stack([uploads[i][1] for i in batch])
                labels = to_device([uploads[i][0] for i in batch], self.fed.device, torch.long)
                self.server_step(0, protos, labels)

    def server_step(self, head: int, features: torch.Tensor, labels: torch.Tensor) -> None:
        """One SGD step (lr eta_h) of global head `head` on CE(head(features), labels) (eq. 6)."""
        weight = self.heads["head.weight"][head].clone().requires_grad_(True)
        bias = self.heads["head.bias"][head].clone().requires_grad_(True)
        loss = F.cross_entropy(F.linear(features, weight, bias), labels)
        grad_w, grad_b = torch.autograd.grad(loss, [weight, bias])
        with torch.no_grad():
            self.heads["head.weight"][head] -= self.options.eta_h * grad_w
            self.heads["head.bias"][head] -= self.options.eta_h * grad_b


class FedGMH(GlobalMultiHead):
    """FedGMH: S global heads (one per label), critical-position mixing (the paper's method)."""


class GMHOneHead(GlobalMultiHead):
    """GMH-o: one global head trained on all prototypes; critical-position mixing kept."""


class GMHAverage(GlobalMultiHead):
    """GMH-a: S heads, no mask: h_m <- (h_m + H_m) / 2 (eq. 10); official code: h_m <- H_m."""


class GMHOneHeadAverage(GlobalMultiHead):
    """GMH-oa: one head, no mask: h_m <- (h_m + h) / 2 (eq. 11); official code: FedGH."""


class FedGH(GlobalMultiHead):
    """Yi et al. 2023: bodies local; one global head trained on the uploaded class-mean features.

    GlobalMultiHead with one head (`heads=single`) that replaces the client's head
    (`combine=replace`); the server head lr is `eta_h` (PFLlib's server_learning_rate). The server
    pass is batched by default (the spec's and PFLlib's): one SGD step of lr 1.0 per prototype
    (`server_pass=per_prototype`) diverges at the paper's MNIST protocol (docs/baselines.md).
    """

    def __init__(self, fed, options) -> None:
        if options.heads != "single" or options.combine != "replace":
            raise UserError("fedgh has one global head that replaces the client's head (heads=single, combine=replace); use the gmh_* algorithms for the other variants")
        super().__init__(fed, options)
