"""Baselines that split the classifier into a global and a personal part: FedRoD and FedCP.

The parts the engine's model does not have (FedRoD's personal head, FedCP's policy network and
frozen global head, FedCP's client vector) are extra keys of a client's params dict, computed with
torch.nn.functional; `fed.features` gives the body output and ignores those keys. Both build on
`ParameterAveraging` (the server's weighted average, clients keeping their local keys).
See docs/baselines.md for the paper / PFLlib differences.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from fedgmh.algorithms.averaging import ParameterAveraging
from fedgmh.algorithms.base import Exchange
from fedgmh.cards.decoupled import FedCPOptions
from fedgmh.engine import Channel, Extra, Federation, Params, Phase, cross_entropy
from fedgmh.model import is_body, is_head


def linear(params: Params, prefix: str, x: Tensor) -> Tensor:
    return F.linear(x, params[prefix + "weight"], params[prefix + "bias"])


def train_label_counts(fed: Federation, client: int) -> Tensor:
    """n_c of the client's train split; with drop_last (PFLlib) counted, like PFLlib, over one
    shuffled epoch without its last partial batch."""
    return torch.bincount(fed.labels[fed.epoch_samples(client)], minlength=fed.num_classes)


def balanced_softmax_loss(logits: Tensor, y: Tensor, counts: Tensor, mask: Tensor | None = None) -> Tensor:
    """Balanced Softmax (Ren et al. 2020): CE(logits + log n_c, y) (mask: `engine.cross_entropy`).

    A class with n_c = 0 gets log 0 = -inf, i.e. it drops out of the softmax (PFLlib and the
    reference implementation do the same); its logit receives no gradient.
    """
    return cross_entropy(logits + counts.to(logits).log(), y, mask)


# ---------------------------------------------------------------------------------------------
# FedRoD


class FedRoD(ParameterAveraging):
    """Chen & Chao 2022: body + generic head averaged (Balanced Softmax); personal head local.

    Personal head `phead.*` starts as a copy of the initial head on every client (PFLlib:
    deepcopy of the model's head when the client is created). Both losses are summed in ONE
    `local_train` call: the personal loss sees the body output and the generic logits detached,
    so each part gets exactly the gradient of its own loss, at the same parameters as PFLlib's
    two optimisers (generic step, then personal step on the same batch's detached outputs).
    """

    seams_read_options_only = True  # local_loss: the model and the client's counts (in extra)

    def __init__(self, fed, options) -> None:
        super().__init__(fed, options)  # shared: every model key (body + generic head)
        self.initial_local = {"p" + k: v for k, v in self.global_params.items() if is_head(k)}
        self.counts = [train_label_counts(fed, c) for c in range(fed.num_clients)]

    def forward(self, params: Params, x: Tensor) -> Tensor:
        f = self.fed.features(params, x)
        return linear(params, "head.", f) + linear(params, "phead.", f)

    def losses(self, params: Params, x: Tensor, y: Tensor, counts: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """(generic Balanced Softmax loss, personal CE(out_g.detach() + phead(f.detach())))."""
        f = self.fed.features(params, x)
        out_g = linear(params, "head.", f)
        generic = balanced_softmax_loss(out_g, y, counts, mask)
        personal = cross_entropy(out_g.detach() + linear(params, "phead.", f.detach()), y, mask)
        return generic, personal

    def local_loss(self, params: Params, x: Tensor, y: Tensor, mask: Tensor | None, extra: Extra) -> Tensor:
        generic, personal = self.losses(params, x, y, extra["counts"], mask)
        return generic + personal

    def start_training(self, rnd: int, client: int) -> list[Phase]:
        return [Phase(self.client_params(client), loss_fn=self.local_loss, extra={"counts": self.counts[client]})]


# ---------------------------------------------------------------------------------------------
# FedCP

MMD_BANDWIDTHS = (10.0, 15.0, 20.0, 50.0)  # PFLlib clientcp.py MMD(kernel="rbf")
FROZEN = ("ghead.", "context")  # FedCP keys that local training never moves


def locally_trained(name: str) -> bool:
    """Whether FedCP's local training moves the parameter `name`."""
    return not name.startswith(FROZEN)


def mmd(x: Tensor, y: Tensor, mask: Tensor | None = None, bandwidths: tuple[float, ...] = MMD_BANDWIDTHS) -> Tensor:
    """Biased MMD^2 estimate mean(K_xx + K_yy - 2 K_xy), K = sum over a of exp(-||u - v||^2 / (2a)),
    over the samples marked 1 in `mask` (None: all; see `engine.batch_mean`)."""

    def kernel(a: Tensor, b: Tensor) -> Tensor:
        sq = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2 * a @ b.T
        return sum(torch.exp(-0.5 * sq / bw) for bw in bandwidths)

    pairs = kernel(x, x) + kernel(y, y) - 2 * kernel(x, y)
    if mask is None:
        return pairs.mean()
    weights = mask / mask.sum().clamp(min=1.0)
    return weights @ pairs @ weights


def client_vector(params: Params) -> Tensor:
    """v = sum of the rows of the personal head's weight (paper sec. 3.2; PFLlib set_head_g)."""
    return params["head.weight"].detach().sum(dim=0)


def initial_cpn(dim: int, generator: torch.Generator, device: torch.device) -> Params:
    """CPN = Linear(d, 2d) -> LayerNorm(2d) -> ReLU, with nn.Linear's default init drawn from
    `generator` (the run's: PFLlib makes one CPN on the server and copies it to every client)."""
    bound = 1 / math.sqrt(dim)
    uniform = lambda *shape: (torch.rand(*shape, generator=generator) * 2 - 1) * bound  # noqa: E731
    cpn = {"cpn.fc.weight": uniform(2 * dim, dim), "cpn.fc.bias": uniform(2 * dim), "cpn.ln.weight": torch.ones(2 * dim), "cpn.ln.bias": torch.zeros(2 * dim)}
    return {k: v.to(device) for k, v in cpn.items()}


#: PFLlib's Client.__init__ calls torch.manual_seed(0) and clientCP's then draws torch.rand(1, d)
#: before any other draw, so every client, in every run, starts from the same vector
PFLLIB_CONTEXT_SEED = 0


def shared_random_context(dim: int, device: torch.device) -> Tensor:
    """The client vector every PFLlib FedCP client starts with: torch.rand(d) right after seeding
    with 0 (drawn on the CPU, as PFLlib does before `.to(device)`); not from the run's generator."""
    return torch.rand(dim, generator=torch.Generator().manual_seed(PFLLIB_CONTEXT_SEED)).to(device)


class FedCP(ParameterAveraging):
    """Zhang et al. 2023: a per-sample policy {r, s} splits the features between a frozen global
    head and a personal head; the personal body is aligned to the frozen global body by MMD.

    Client keys: `body.*` (personal body; with sync=after_round the global body), `head.*`
    (personal head), `cpn.*` (policy network), `ghead.*` (frozen global head) and `context` (the
    client vector v, constant during local training). The server averages, weighted by train
    size, the bodies, the upload heads (head + ghead) / 2 and the CPNs.
    """

    transient = ("feature_dim",)

    @classmethod
    def exchange(cls, options, sizes, labels, models=None) -> Exchange:
        """Up: body, (head + global head) / 2, CPN; down: global body, head (kept frozen as ghead), CPN,
        at the round's start (paper) or after aggregation, the body then to every client (PFLlib)."""
        cpn = Channel.size(initial_cpn(sizes.feature_dim, torch.Generator(), torch.device("meta")))
        part = sizes.body + sizes.head + cpn
        if options.sync == "round_start":
            return Exchange(part, part, 0)
        return Exchange(part, part, sizes.body)

    seams_read_options_only = True  # local_loss: the model, options lamda; the noise and global body in extra

    def __init__(self, fed, options: FedCPOptions) -> None:
        super().__init__(fed, options)  # global: body + head of the initial model
        self.eval_noise = torch.Generator().manual_seed(fed.seed + 1)
        head = {k: v for k, v in self.global_params.items() if is_head(k)}
        self.feature_dim = dim = head["head.weight"].shape[1]
        self.global_params.update(initial_cpn(dim, fed.generator, fed.device))
        local_keys = [k for k in self.global_params if not is_body(k) or options.sync == "round_start"]
        self.initial_local = {**{k: self.global_params[k] for k in local_keys}, **{"g" + k: v for k, v in head.items()}}
        self.initial_local["context"] = client_vector(head)
        if options.context == "random":  # uniform random per client, until its first training
            contexts = torch.rand(fed.num_clients, dim, generator=fed.generator).to(fed.device)
            self.local = {c: {**self.initial_local, "context": contexts[c]} for c in range(fed.num_clients)}
        elif options.context == "random_shared":
            self.initial_local["context"] = shared_random_context(dim, fed.device)

    # -- the model ------------------------------------------------------------------------
    def gumbel_noise(self, n: int, generator: torch.Generator) -> Tensor:
        """Gumbel(0, 1) noise -log E, E ~ Exp(1), for n samples' (2, d) policy logits (on the CPU)."""
        return -torch.empty(n, 2, self.feature_dim).exponential_(generator=generator).log()

    def training_noise(self, batch: Tensor) -> Tensor:
        """A training batch's Gumbel noise, from the run's generator (`Phase.draw`)."""
        return self.gumbel_noise(len(batch), self.fed.generator)

    def policy(self, params: Params, features: Tensor, gumbel: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """(s, r): personal and global shares of every feature, s + r = 1.

        CPN input C = f * v / ||v||; a = ReLU(LayerNorm(fc(C))) of size 2d is viewed as (2, d)
        (PFLlib's layout: feature j's pair is (a_j, a_{d+j}), the first going to the personal
        head) and normalised over the pair by a softmax (with `gumbel` noise added: PFLlib's
        gumbel_softmax, tau 1).
        """
        c = features * F.normalize(params["context"], dim=-1)
        a = F.linear(c, params["cpn.fc.weight"], params["cpn.fc.bias"])
        a = F.relu(F.layer_norm(a, a.shape[-1:], params["cpn.ln.weight"], params["cpn.ln.bias"]))
        a = a.view(len(features), 2, -1)
        if gumbel is not None:
            a = a + gumbel.to(a)
        shares = a.softmax(dim=1)
        return shares[:, 0], shares[:, 1]

    def outputs(self, params: Params, x: Tensor, gumbel: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """(logits = head_p(s * f) + head_g(r * f), body features f)."""
        f = self.fed.features(params, x)
        s, r = self.policy(params, f, gumbel)
        return linear(params, "head.", s * f) + linear(params, "ghead.", r * f), f

    @property
    def deterministic_eval(self) -> bool:
        return self.options.policy != "gumbel"

    def forward(self, params: Params, x: Tensor) -> Tensor:
        # Evaluation draws its Gumbel noise from its own generator, so evaluating more or fewer
        # rounds (eval_every, eval_last) never changes the training.
        gumbel = self.gumbel_noise(len(x), self.eval_noise) if self.options.policy == "gumbel" else None
        return self.outputs(params, x, gumbel)[0]

    # -- rounds ---------------------------------------------------------------------------
    def receive(self, client: int, context: Tensor | None = None) -> None:
        """The client takes the global head (frozen, as `ghead`) and CPN, and optionally a context."""
        local = self.local.get(client, self.initial_local)
        update = {k: v for k, v in self.global_params.items() if k.startswith("cpn.") or (is_body(k) and k in local)}
        update.update({"g" + k: v for k, v in self.global_params.items() if is_head(k)})
        self.fed.channel.download(update)  # the context is computed on the client, not sent
        if context is not None:
            update["context"] = context
        self.local[client] = {**local, **update}

    def send(self, rnd: int, selected: list[int]) -> None:
        if self.options.sync == "round_start":
            for client in selected:
                local = self.local.get(client, self.initial_local)
                trained = self.options.context == "head" or self.fed.participations[client] > 0
                self.receive(client, client_vector(local) if trained else None)

    def local_loss(self, params: Params, x: Tensor, y: Tensor, mask: Tensor | None, extra: Extra) -> Tensor:
        """CE of the policy-mixed logits + lamda * MMD(personal body features, global body features)."""
        logits, f = self.outputs(params, x, extra.get("noise"))
        with torch.no_grad():
            f_global = self.fed.features(extra["global_body"], x)
        return cross_entropy(logits, y, mask) + self.options.lamda * mmd(f, f_global, mask)

    def start_training(self, rnd: int, client: int) -> list[Phase]:
        params = self.client_params(client)
        global_body = {k: v for k, v in params.items() if is_body(k)}  # the personal body starts as the global body
        draw = self.training_noise if self.options.policy == "gumbel" else None
        return [Phase(params, trainable=locally_trained, loss_fn=self.local_loss, extra={"global_body": global_body}, draw=draw)]

    def keep(self, client: int, params: Params) -> None:
        super().keep(client, params)
        self.uploads[client].update({k: (params[k] + params["g" + k]) / 2 for k in self.uploads[client] if is_head(k)})

    def aggregate(self, rnd: int, selected: list[int]) -> None:
        super().aggregate(rnd, selected)
        if self.options.sync == "after_round":
            body = {k: v for k, v in self.global_params.items() if is_body(k)}
            for _ in range(self.fed.num_clients):  # every client's model uses the averaged body
                self.fed.channel.download(body)
            for client in selected:
                self.receive(client, client_vector(self.local[client]))
