"""CE-pFL: Huang & Chen 2025 (seed 004), "communication-efficient personalised FL for Non-IID
scenarios" (our abbreviation of its title; the paper names its method only "the proposed algorithm").

FedPer (body averaged, head local) plus two server mechanisms:
- selective participation: after each round the server scores every client by the MMD between its
  class centres and the global class centres and by the time since it last trained (eqs. 7-10),
  and the top r*N scores take part in the next round (`choose_clients`);
- occasional clustering: when the slope of the mean training loss over a sliding window of M
  rounds is >= 0 (eq. 3), the server K-means-clusters the clients by their class-centre vectors
  (eqs. 4-6), each cluster trains one round from the new global body, and the cluster models are
  fused into an enhanced global body.

Readings of what the paper leaves open, each a named option (fedgmh.cards.clustered.CEPFLOptions):
docs/baselines.md, "CE-pFL".
"""

from __future__ import annotations

import math

import numpy as np
import torch

from fedgmh.algorithms.averaging import weighted_mean
from fedgmh.algorithms.base import Exchange
from fedgmh.algorithms.fedgmh import LABEL_DTYPE, class_means
from fedgmh.cards.clustered import CEPFLOptions
from fedgmh.algorithms.sharing import FedPer
from fedgmh.engine import LocalResult, Params, Phase, mix_seed, train_chosen

LOSS_DTYPE = torch.float32  # the uploaded mean training loss: one float


# ----------------------------------------------------------------------- the server's arithmetic

def mmd(a: torch.Tensor, b: torch.Tensor, gamma: float) -> torch.Tensor:
    """Eq. 8 with the Gaussian kernel k(x, y) = exp(-gamma ||x - y||^2): the (biased) MMD between the
    point sets a (m x d) and b (n x d); the radicand is clamped at 0 against rounding."""
    kernel = lambda x, y: torch.exp(-gamma * torch.cdist(x, y).square())  # noqa: E731
    radicand = kernel(a, a).mean() - 2 * kernel(a, b).mean() + kernel(b, b).mean()
    return radicand.clamp(min=0).sqrt()


def median_gamma(a: torch.Tensor, b: torch.Tensor) -> float:
    """The median heuristic: 1 / the median squared distance over the distinct pairs of points of
    a and b together (1.0 when they are all one point: then every gamma gives MMD 0)."""
    points = torch.cat([a, b])
    rows, cols = torch.triu_indices(len(points), len(points), offset=1)
    squared = torch.cdist(points, points).square()[rows, cols]
    median = float(squared.median()) if len(squared) else 0.0
    return 1.0 / median if median > 0 else 1.0


def loss_slope(window: list[tuple[int, float]]) -> float:
    """Eq. 3: the slope a of the least-squares line L = a * t + b through the window's (t, L_t)."""
    t = np.array([r for r, _ in window], dtype=float)
    losses = np.array([v for _, v in window], dtype=float)
    centred = t - t.mean()
    return float((centred * (losses - losses.mean())).sum() / (centred * centred).sum())


def raw_scores(sim: torch.Tensor, last_round: torch.Tensor, t: int, alpha: float, beta: float) -> torch.Tensor:
    """Eq. 9 at round t: alpha * sim_i + beta * (1 - exp(-(t - t'_i))).

    `sim`: each client's similarity term (NaN: the client has no centres yet: the mean of the known
    ones, 0 when none is known); `last_round`: t'_i, -1 for a client that never trained (time term 1)."""
    known = ~torch.isnan(sim)
    neutral = sim[known].mean() if bool(known.any()) else torch.zeros((), dtype=sim.dtype, device=sim.device)
    sim = torch.where(known, sim, neutral)
    elapsed = (t - last_round).to(sim.dtype)
    time_term = torch.where(last_round >= 0, 1 - torch.exp(-elapsed), torch.ones_like(sim))
    return alpha * sim + beta * time_term


def smoothed(raw: torch.Tensor, previous: torch.Tensor, smoothing: float) -> torch.Tensor:
    """Eq. 10: lambda * raw + (1 - lambda) * previous, and raw where there is no previous score (NaN)."""
    return torch.where(torch.isnan(previous), raw, smoothing * raw + (1 - smoothing) * previous)


def top_clients(scores: torch.Tensor, proposed: list[int], count: int) -> list[int]:
    """The `count` clients with the largest scores; equal scores in the order of the engine's random
    draw `proposed`, then by index (so equal scores everywhere give the engine's draw)."""
    drawn = set(proposed)
    order = list(proposed) + [c for c in range(len(scores)) if c not in drawn]
    ranked = torch.sort(-scores[order], stable=True).indices[:count]
    return [order[int(i)] for i in ranked]


def kmeans(rows: np.ndarray, clusters: int, seed: int) -> np.ndarray:
    """Eq. 6: scikit-learn's KMeans (k-means++ starts, best of 10 runs, Lloyd) on the rows, with
    min(clusters, rows) clusters; the cluster of each row."""
    from sklearn.cluster import KMeans

    fitted = KMeans(n_clusters=min(clusters, len(rows)), n_init=10, random_state=seed % 2**32).fit(rows)
    return fitted.labels_.astype(np.int64)


# ----------------------------------------------------------------------------------- the method

class CEPFL(FedPer):
    """FedPer with priority-score selection and loss-triggered cluster rounds (module docstring).

    State between rounds (all tensors / lists / dicts, so a checkpoint resumes bit-identically):
    `centres[c]` the client's latest class centres {label: d-vector} (None before its first
    training), `last_round[c]` t'_c (-1: never trained), `scores` the smoothed priority scores (NaN
    before the first round's end), `window` (round, mean training loss) of the last M rounds,
    `slopes` every fitted slope (round, a), `cluster_events` one dict per cluster round (round, slope,
    clustered clients, their clusters), `received[c]` the body a client last received (only with
    broadcast=selected).
    """

    record_tables = ("participations", "cluster_rounds")
    traffic_per_label = True
    transient = ("trained",)

    @classmethod
    def exchange(cls, options, sizes, labels, models=None) -> Exchange:
        """Up: the body, a centre and a label per local label, the mean loss (one float); down: the body.
        A cluster round's extra trainings are not in this per-round figure (the round row's clients_up)."""
        up = sizes.body + labels * (sizes.prototype + sizes.label) + torch.finfo(LOSS_DTYPE).bits // 8
        return Exchange(up, sizes.body, sizes.body if options.broadcast == "all" else 0)

    def __init__(self, fed, options: CEPFLOptions) -> None:
        super().__init__(fed, options)
        n = fed.num_clients
        self.centres: list[dict[int, torch.Tensor] | None] = [None] * n
        # on the federation's device, where a checkpoint restores them (engine.checkpoint.restore_run)
        self.last_round = torch.full((n,), -1, dtype=torch.int64, device=fed.device)
        self.scores = torch.full((n,), math.nan, dtype=torch.float64, device=fed.device)
        self.window: list[tuple[int, float]] = []
        self.slopes: list[tuple[int, float]] = []
        self.cluster_events: list[dict] = []
        self.received: list[Params] = [self.global_params] * n if options.broadcast == "selected" else []
        self.trained: dict[int, LocalResult] = {}  # this round's trainings, until aggregate reads their losses

    # --- clients ---------------------------------------------------------------------------------

    def choose_clients(self, rnd: int, proposed: list[int]) -> list[int]:
        if self.options.selection == "random" or bool(torch.isnan(self.scores).all()):  # round 0: the engine's draw
            return proposed
        return top_clients(self.scores, proposed, len(proposed))

    def send(self, rnd: int, selected: list[int]) -> None:
        if self.options.broadcast == "all":
            super().send(rnd, selected)
            return
        for client in selected:
            self.received[client] = self.fed.channel.download(self.global_params)

    def client_params(self, client: int) -> Params:
        body = self.received[client] if self.options.broadcast == "selected" else self.global_params
        return {**body, **self.local.get(client, self.initial_local)}

    def finish_training(self, rnd: int, client: int, phases: list[Phase], results: list[LocalResult]) -> LocalResult:
        result = super().finish_training(rnd, client, phases, results)  # head kept, body uploaded
        centres = class_means(self.fed, result.params, self.fed.train_idx[client], self.fed.train_labels[client])  # eq. 2, with the trained body
        self.fed.channel.upload([c for _, c in centres] + [torch.tensor([k for k, _ in centres], dtype=LABEL_DTYPE)])
        self.centres[client] = dict(centres) or None
        self.last_round[client] = rnd
        self.trained[client] = result
        return result

    def mean_losses(self, clients: list[int]) -> list[float]:
        """l_{t,i} of each client's training this round (uploaded: one float each)."""
        losses = []
        for client in clients:
            result = self.trained.pop(client)
            loss = result.loss_sum / result.num_samples if result.num_samples else math.nan
            self.fed.channel.upload(torch.tensor(loss, dtype=LOSS_DTYPE))
            losses.append(loss)
        return losses

    # --- server ----------------------------------------------------------------------------------

    def aggregate(self, rnd: int, selected: list[int]) -> None:
        super().aggregate(rnd, selected)  # eq. 11 (weighting=uniform: the simple mean)
        losses = [v for v in self.mean_losses(selected) if not math.isnan(v)]
        slope = self.watch_loss(rnd, sum(losses) / len(losses)) if losses else None
        if slope is not None:
            self.cluster_round(rnd, selected, slope)
        t = rnd if self.options.wait_term == "current" else rnd + 1
        self.scores = smoothed(self.raw_scores(t), self.scores, self.options.smoothing)

    def watch_loss(self, rnd: int, loss: float) -> float | None:
        """Eq. 3: add L_t to the window of the last M rounds; when it is full, fit its slope a (kept in
        `slopes`). Returns a when a cluster round is due (a >= 0, clustering on), and then empties the
        window (at least M rounds until the next one: docs/baselines.md, pitfall 6); else None."""
        self.window = (self.window + [(rnd, loss)])[-self.options.window:]
        if len(self.window) < self.options.window:
            return None
        slope = loss_slope(self.window)
        self.slopes.append((rnd, slope))
        if slope < 0 or self.options.clustering == "off":
            return None
        self.window = []
        return slope

    def global_centres(self) -> dict[int, torch.Tensor]:
        """Eq. 4: per label, the mean of the latest centres of the clients that hold it (unweighted)."""
        by_label: dict[int, list[torch.Tensor]] = {}
        for centres in self.centres:
            for label, centre in (centres or {}).items():
                by_label.setdefault(label, []).append(centre)
        return {label: torch.stack(found).mean(dim=0) for label, found in sorted(by_label.items())}

    def raw_scores(self, t: int) -> torch.Tensor:
        """Eq. 9 for every client at round t (`wait_term`), from the latest centres and participation rounds."""
        mu = self.global_centres()
        sim = torch.full((self.fed.num_clients,), math.nan, dtype=torch.float64, device=self.scores.device)
        if mu:
            everyone = torch.stack(list(mu.values())).double()
            sign = -1.0 if self.options.mmd_sign == "similarity" else 1.0
            for client, centres in enumerate(self.centres):
                if centres:
                    mine = torch.stack(list(centres.values())).double()
                    gamma = self.options.kernel_gamma() or median_gamma(mine, everyone)
                    sim[client] = sign * float(mmd(mine, everyone, gamma))
        return raw_scores(sim, self.last_round, t, self.options.alpha, self.options.beta)

    def cluster_round(self, rnd: int, selected: list[int], slope: float) -> None:
        """Eqs. 4-6 and Algorithm 1 lines 14-15: cluster the clients with centres by their class-centre
        vectors (missing labels filled with the global centre), train each cluster's members one
        round from the current global body, and fuse the cluster models into the global body."""
        mu = self.global_centres()
        clustered = [c for c, centres in enumerate(self.centres) if centres]
        rows = np.stack([torch.cat([self.centres[c].get(k, mu[k]) for k in mu]).double().cpu().numpy() for c in clustered])
        assignment = kmeans(rows, self.options.clusters, mix_seed(self.fed.seed, rnd))
        chosen = set(selected)
        members = [c for c in clustered if self.options.cluster_members == "all" or c in chosen]
        cluster_of = dict(zip(clustered, assignment.tolist()))
        members.sort(key=lambda c: (cluster_of[c], c))  # trained cluster by cluster
        for client in members:  # each member receives the global body W_t
            self.fed.channel.download(self.global_params)
            if self.options.broadcast == "selected":
                self.received[client] = self.global_params
        train_chosen(self.fed, self, rnd, members, extra="cluster round")
        self.mean_losses(members)  # uploaded with the bodies
        weights = self.aggregation_weights(members)
        cluster_models, cluster_weights = [], []
        for cluster in sorted({cluster_of[c] for c in members}):
            inside = [i for i, c in enumerate(members) if cluster_of[c] == cluster]
            w = weights[inside]
            cluster_models.append(weighted_mean([self.uploads[members[i]] for i in inside], w / w.sum()))
            cluster_weights.append(w.sum())
        for client in members:
            del self.uploads[client]
        if cluster_models:
            fuse = np.array(cluster_weights) if self.options.cluster_fuse == "size" else np.ones(len(cluster_models))
            self.global_params = weighted_mean(cluster_models, fuse / fuse.sum())
        self.cluster_events.append({"round": rnd, "slope": slope, "clients": torch.tensor(clustered),
                                    "cluster": torch.from_numpy(assignment), "trained": torch.tensor(members, dtype=torch.int64)})

    def extra_records(self) -> dict:
        """What explains a run (spec pitfalls 3, 7, 8), written beside its metrics:
        participations.csv, each client's trainings (cluster rounds included) and last round trained
        (-1: never); cluster_rounds.csv, one row per clustered client of each cluster round: the
        fitted slope that triggered it, the client's cluster and whether it trained in it."""
        import pandas as pd

        participations = pd.DataFrame({"client": range(self.fed.num_clients),
                                       "participations": self.fed.participations.tolist(),
                                       "last_round": self.last_round.tolist()})
        rows = []
        for e in self.cluster_events:
            trained = set(e["trained"].tolist())
            rows += [{"round": e["round"], "slope": e["slope"], "client": client, "cluster": cluster, "trained": client in trained}
                     for client, cluster in zip(e["clients"].tolist(), e["cluster"].tolist())]
        clusters = pd.DataFrame(rows, columns=["round", "slope", "client", "cluster", "trained"])
        return {"participations": participations, "cluster_rounds": clusters}
