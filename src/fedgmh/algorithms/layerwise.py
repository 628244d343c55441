"""pFedLA and HeurpFedLA (Ma et al., CVPR 2022): layer-wise personalised aggregation by per-client hypernetworks.

The server holds one intermediate model theta_j per client and, per client i, a hypernetwork HN_i
(a learnable embedding v_i, three hidden FC layers, one FC output layer per model layer l) whose
ReLU outputs alpha_i^l, normalised to a_i^l (sum 1; all zero -> one-hot on i), mix the clients'
intermediate layers into client i's personalised model:

    mixed_i^l = sum_j a_ij^l theta_j^l.

The client trains mixed_i with plain local SGD and uploads its update delta_i. The server takes one
SGD step of HN_i on 1/2 ||mixed_i(HN_i) - trained_i||^2 (`hn_sign=descent`; the anchors' sign is
`hn_sign=anchor`), then stores theta_i = trained_i. HeurpFedLA (k >= 1) lets client i keep its own
copy of the k layers with the largest self-weight a_ii^l: they are neither mixed nor downloaded.

The hypernetworks are dicts of tensors run with torch.nn.functional, drawn at the start from their
own generator seeded by the run's seed (`hn_generator`: the training's shuffles stay those of every
other algorithm), and checkpointed with the rest of the state. The hypergradient J_i^T g_i is
computed without a graph through N models: mixed_i is linear in a_i, so it is the gradient of
S_i = sum_l sum_j a_ij^l <theta_j^l, g_i^l> (`hn_gradient`). Spec: docs/baselines.md, "pFedLA".
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from fedgmh.algorithms.base import Algorithm, Exchange
from fedgmh.cards.layerwise import LayerwiseOptions
from fedgmh.engine import Federation, LocalResult, Params, Phase
from fedgmh.errors import UserError

HN_HIDDEN_LAYERS = 3
#: names the stream of the hypernetworks' initial draw (`hn_generator`)
HN_STREAM = 0x9FED1A
#: names the stream of the per-client initial models (init=per_client)
INIT_STREAM = 0x9FED1B


def hn_generator(seed: int, stream: int = HN_STREAM) -> torch.Generator:
    """A generator of the start-up draws (hypernetworks, per-client models): seeded from (run seed,
    stream) by numpy's SeedSequence, so the run's own generator (batch shuffles) is left as for every
    algorithm."""
    state = np.random.SeedSequence([seed, stream]).generate_state(2, dtype=np.uint32)
    return torch.Generator().manual_seed(int(state[0]) << 31 | int(state[1]) >> 1)


def default_draw(initial: Params, layers: dict[str, list[str]], gen: torch.Generator) -> Params:
    """A fresh draw of torch's default init of nn.Linear / nn.Conv2d for every layer: weight and bias
    ~ U(+-1/sqrt(fan_in)), fan_in that of the layer's weight (kaiming_uniform with a = sqrt(5))."""
    drawn = {}
    for names in layers.values():
        weight = next(initial[n] for n in names if n.endswith("weight"))
        bound = weight[0].numel() ** -0.5
        for name in names:
            drawn[name] = (torch.rand(initial[name].shape, generator=gen, dtype=initial[name].dtype) * 2 - 1) * bound
    return drawn


def initial_models(initial: Params, num_clients: int, init: str, seed: int) -> Params:
    """Every client's starting intermediate model, stacked (theta[name][j]): the run's initial model
    for all (init=shared), or one default draw per client from its own stream (init=per_client)."""
    if init == "shared":
        return {name: p.unsqueeze(0).repeat(num_clients, *([1] * p.dim())) for name, p in initial.items()}
    gen = hn_generator(seed, INIT_STREAM)
    modules = layer_groups(list(initial), "module")
    draws = [default_draw(initial, modules, gen) for _ in range(num_clients)]
    return {name: torch.stack([d[name] for d in draws]).to(p.device) for name, p in initial.items()}


def layer_of(name: str, granularity: str) -> str:
    """The layer a parameter belongs to: its module ("body.0.weight" -> "body.0") or itself (tensor)."""
    return name.rsplit(".", 1)[0] if granularity == "module" else name


def layer_groups(names: list[str], granularity: str) -> dict[str, list[str]]:
    """The model's layers in model order, each with its parameter names."""
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(layer_of(name, granularity), []).append(name)
    return groups


def init_hypernetwork(num_clients: int, num_layers: int, embedding_dim: int, hidden_dim: int, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """One client's HN as tensors: embedding ~ N(0, 1) (nn.Embedding), hidden layers as nn.Linear's
    default init (U(+-1/sqrt(fan_in)) for weight and bias), output layers W ~ U(0, 1), b = 0 (anchors)."""
    hn = {"embedding": torch.randn(embedding_dim, generator=gen)}
    fan_in = embedding_dim
    for i in range(HN_HIDDEN_LAYERS):
        bound = fan_in ** -0.5
        hn[f"mlp.{i}.weight"] = (torch.rand(hidden_dim, fan_in, generator=gen) * 2 - 1) * bound
        hn[f"mlp.{i}.bias"] = (torch.rand(hidden_dim, generator=gen) * 2 - 1) * bound
        fan_in = hidden_dim
    for layer in range(num_layers):
        hn[f"fc.{layer}.weight"] = torch.rand(num_clients, hidden_dim, generator=gen)
        hn[f"fc.{layer}.bias"] = torch.zeros(num_clients)
    return hn


def hn_alpha(hn: dict[str, torch.Tensor], num_layers: int) -> torch.Tensor:
    """The raw weights alpha_i (num_layers x num_clients): ReLU outputs of the HN's output layers."""
    h = hn["embedding"]
    for i in range(HN_HIDDEN_LAYERS):
        h = F.relu(F.linear(h, hn[f"mlp.{i}.weight"], hn[f"mlp.{i}.bias"]))
    return torch.stack([F.relu(F.linear(h, hn[f"fc.{layer}.weight"], hn[f"fc.{layer}.bias"])) for layer in range(num_layers)])


def normalise(alpha: torch.Tensor, client: int) -> torch.Tensor:
    """a^l = alpha^l / sum_j alpha_j^l per row; a row that is all zero (a dead ReLU layer) -> e_client."""
    total = alpha.sum(dim=1, keepdim=True)
    alive = total > 0
    own = torch.zeros_like(alpha)
    own[:, client] = 1.0
    return torch.where(alive, alpha / torch.where(alive, total, torch.ones_like(total)), own)


class LayerwiseAggregation(Algorithm):
    """pFedLA / HeurpFedLA; `options.k` chooses (0: every layer mixed)."""

    record_tables = ("layer_weights",)

    transient = ("layers", "_mixed", "_memo", "_uploads")

    @classmethod
    def exchange(cls, options: LayerwiseOptions, sizes, labels, models=None) -> Exchange:
        """Up: the update delta_i (whole model). Down: the mixed model without its retained layers;
        which k layers a client retains is the HNs' choice, so the down value is the largest one:
        the model without its k smallest layers (all layers downloaded under intermediate=accumulate)."""
        layers = layer_groups([name for name, _ in sizes.parameters], options.granularity)
        nbytes = dict(sizes.parameters)
        layer_bytes = sorted(sum(nbytes[n] for n in names) for names in layers.values())
        kept = 0 if options.intermediate == "accumulate" else min(options.k, len(layer_bytes))
        return Exchange(sizes.model, sizes.model - sum(layer_bytes[:kept]), 0)

    def __init__(self, fed: Federation, options: LayerwiseOptions) -> None:
        super().__init__(fed, options)
        initial = fed.initial_params()
        n = fed.num_clients
        self.layers = layer_groups(list(initial), options.granularity)
        if options.k > len(self.layers):
            raise UserError(f"k={options.k} retained layers, but the model has {len(self.layers)} layers (granularity={options.granularity})")
        # every client's intermediate model, stacked: theta[name][j] = theta_j's tensor `name`
        self.theta: Params = initial_models(initial, n, options.init, fed.seed)
        gen = hn_generator(fed.seed)
        self.hn: list[dict[str, torch.Tensor]] = [
            {k: v.to(fed.device) for k, v in init_hypernetwork(n, len(self.layers), options.embedding_dim, options.hidden_dim, gen).items()}
            for _ in range(n)
        ]
        self.dead_layers = torch.zeros((), dtype=torch.int64)  # training mixes that fell back to e_i (pitfall 9)
        self._mixed: dict[int, tuple[Params, list[int]]] = {}  # the training mixes (and retained layers) of the round
        self._memo: dict[int, Params] = {}  # evaluation mixes of the current state
        self._uploads: dict[int, tuple[Params, Params, list[int]]] = {}  # client -> (start, trained, retained)

    # ------------------------------------------------------------------ the HNs' weights and the mix

    def weights(self, client: int, hn: dict[str, torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(raw alpha, normalised a), each num_layers x num_clients, of client's HN (or `hn`)."""
        alpha = hn_alpha(self.hn[client] if hn is None else hn, len(self.layers))
        return alpha, normalise(alpha, client)

    def retained(self, client: int, alpha: torch.Tensor, a: torch.Tensor) -> list[int]:
        """The k layers with the largest self-weight (ties: lower layer first), in layer order."""
        if self.options.k == 0:
            return []
        score = (alpha if self.options.topk_score == "raw" else a)[:, client].detach()
        return sorted(torch.sort(score, descending=True, stable=True).indices[: self.options.k].tolist())

    @torch.no_grad()
    def mix(self, client: int) -> tuple[Params, list[int], bool]:
        """Client's personalised model from the current intermediate models: (model, retained
        layers, whether a mixed layer's alpha was all zero, i.e. fell back to e_client)."""
        alpha, a = self.weights(client)
        keep = self.retained(client, alpha, a)
        model = {}
        for index, names in enumerate(self.layers.values()):
            for name in names:
                stacked = self.theta[name]
                model[name] = stacked[client].clone() if index in keep else torch.tensordot(a[index].to(stacked.dtype), stacked, dims=1)
        mixed = [i for i in range(len(self.layers)) if i not in keep]
        return model, keep, bool((alpha[mixed].sum(dim=1) == 0).any())

    def download(self, client: int) -> tuple[Params, list[int]]:
        """The mix client trains from and its retained layers; the mix is counted as downloaded
        without the retained layers (which the client holds: its own latest model's)."""
        model, keep, dead = self.mix(client)
        self.dead_layers += int(dead)
        retained = {n for i, names in enumerate(self.layers.values()) if i in keep for n in names}
        if self.options.intermediate == "accumulate":
            retained = set()  # the client's own copy is its trained model, not theta_i: every layer comes down
        self.fed.channel.download({k: v for k, v in model.items() if k not in retained})
        self._memo[client] = model  # the same model is what this client is evaluated on now
        return model, keep

    # ----------------------------------------------------------------------------- the hooks

    def why_sequential(self) -> str | None:
        if self.options.order == "sequential":
            return "order=sequential: a client's mix holds the updates of the clients before it in the round"
        return super().why_sequential()

    def send(self, rnd: int, selected: list[int]) -> None:
        self._mixed = {client: self.download(client) for client in selected} if self.options.order == "parallel" else {}

    def eval_params(self, client: int) -> Params:
        if client not in self._memo:
            self._memo[client] = self.mix(client)[0]
        return self._memo[client]

    def start_training(self, rnd: int, client: int) -> list[Phase]:
        if self.options.order == "sequential":  # from the models as they are now, earlier clients' updates included
            self._mixed[client] = self.download(client)
        return [Phase(self._mixed[client][0])]

    def finish_training(self, rnd: int, client: int, phases: list[Phase], results: list[LocalResult]) -> LocalResult:
        start, keep = self._mixed.pop(client)
        trained = results[-1].params
        self.fed.channel.upload({k: trained[k] - start[k] for k in trained})  # delta_i
        self._uploads[client] = (start, trained, keep)
        if self.options.order == "sequential":
            self.aggregate(rnd, [client])
        return results[-1]

    def aggregate(self, rnd: int, selected: list[int]) -> None:
        """HN steps of all clients from the models as they are, then their new intermediate models."""
        done = [(c, *self._uploads.pop(c)) for c in selected if c in self._uploads]
        if self.options.hn_lr > 0:
            for client, start, trained, keep in done:
                self.hn_step(client, start, trained, keep)
        for client, start, trained, _ in done:
            for name, stacked in self.theta.items():
                new = trained[name] if self.options.intermediate == "latest" else stacked[client] + (trained[name] - start[name])
                stacked[client] = new
        self._memo = {}

    # ------------------------------------------------------------------------- the HN step

    def hn_gradient(self, client: int, g: Params, keep: list[int]) -> dict[str, torch.Tensor]:
        """J_i^T g for J_i = d mixed_i / d HN_i, as the gradient of the surrogate
        S = sum over mixed layers l and clients j of a_ij^l <theta_j^l, g^l> (exact: the mix is linear in a_i)."""
        n = self.fed.num_clients
        with torch.no_grad():
            inner = torch.zeros(len(self.layers), n, dtype=torch.float64, device=self.fed.device)
            for index, names in enumerate(self.layers.values()):
                if index in keep:
                    continue
                for name in names:
                    inner[index] += (self.theta[name].reshape(n, -1) @ g[name].reshape(-1)).double()
        hn = {k: v.detach().requires_grad_(True) for k, v in self.hn[client].items()}
        _, a = self.weights(client, hn)
        mixed = torch.tensor([i not in keep for i in range(len(self.layers))], device=a.device)
        surrogate = (a[mixed].double() * inner[mixed]).sum()
        if not surrogate.requires_grad:  # every layer retained: nothing mixed, nothing to learn
            return {k: torch.zeros_like(v) for k, v in hn.items()}
        grads = torch.autograd.grad(surrogate, list(hn.values()), allow_unused=True)
        return {k: torch.zeros_like(v) if gr is None else gr for (k, v), gr in zip(hn.items(), grads)}

    def hn_step(self, client: int, start: Params, trained: Params, keep: list[int]) -> None:
        """One SGD step of HN_i on 1/2 ||mixed_i - trained_i||^2 (g = mixed - trained; anchor: g = trained - mixed)."""
        sign = 1.0 if self.options.hn_sign == "descent" else -1.0
        g = {k: sign * (start[k] - trained[k]) for k in trained}
        grads = self.hn_gradient(client, g, keep)
        if self.options.hn_clip > 0:
            norm = torch.sqrt(sum(torch.sum(v.double() ** 2) for v in grads.values()))
            scale = torch.clamp(self.options.hn_clip / (norm + 1e-6), max=1.0)
            grads = {k: v * scale.to(v.dtype) for k, v in grads.items()}
        self.hn[client] = {k: v - self.options.hn_lr * grads[k] for k, v in self.hn[client].items()}

    # ------------------------------------------------------------------------------- records

    @torch.no_grad()
    def extra_records(self) -> dict[str, Any]:
        """layer_weights.csv: every client's final layer-wise weights, one row per (layer, client, peer)."""
        import pandas as pd

        rows = []
        for client in range(self.fed.num_clients):
            alpha, a = self.weights(client)
            keep = self.retained(client, alpha, a)
            alpha, a = alpha.double().cpu().numpy(), a.double().cpu().numpy()
            for index, layer in enumerate(self.layers):
                for peer in range(self.fed.num_clients):
                    rows.append({"layer": layer, "layer_index": index, "client": client, "peer": peer,
                                 "alpha": alpha[index, peer], "weight": a[index, peer], "retained": index in keep})
        return {"layer_weights": pd.DataFrame(rows)}


class PFedLA(LayerwiseAggregation):
    """Ma et al. 2022: every layer of a client's model mixed from all clients' layers by its hypernetwork."""


class HeurPFedLA(LayerwiseAggregation):
    """Ma et al. 2022, heuristic variant: the k (default 1) layers with the largest self-weight are kept, not mixed."""
