"""Global models made to be adapted on each client: FedBABU and Per-FedAvg.

Both train ONE shared model and personalise it only when a client is evaluated, by a short local
training from the shared model on the client's own train split (never stored, never sent):
- FedBABU (Oh et al., ICLR 2022): FedAvg on the body while every client keeps the common random
  head frozen; fine-tuning of the whole model before the final evaluation (or every evaluation).
- Per-FedAvg (Fallah et al., NeurIPS 2020): a MAML-style local update, so that the averaged model
  is good after one local SGD step; evaluated after that one step on one batch of train samples.

The personalisation draws its random numbers (fine-tuning shuffles, the adaptation batch) from
`engine.eval_generator(seed, round, client)`, never from the training generator: the training, and
every evaluation, are the same whichever rounds are evaluated (`eval_every`, `eval_last`), except
FedBABU's finetune_from=best, whose starting point is the best of the evaluated rounds.
Per-FedAvg's meta-step is a loss (`PerFedAvg.meta_loss`: the inner step inside it) on the
engine's `local_train`, over batches of 2B samples split into D and D'. See docs/baselines.md.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch
from torch import Tensor

from fedgmh.algorithms.averaging import ParameterAveraging
from fedgmh.cards.adaptation import FedBABUOptions, PerFedAvgOptions
from fedgmh.algorithms.sharing import FedPer
from fedgmh.engine import Extra, Federation, GradHook, LocalResult, Params, Phase, cross_entropy, eval_generator, local_train, predict
from fedgmh.model import is_body, is_head

#: what FedBABU's fine-tuning trains (finetune_parts)
FINETUNED = {"all": None, "head": is_head, "body": is_body}


def evaluation_fed(fed: Federation, rnd: int, client: int) -> Federation:
    """`fed` whose random numbers (batch shuffles) come from the evaluation generator of
    (seed, rnd, client): local training on it personalises a model for `client`'s evaluation
    without moving the run's training generator. Drawn on the CPU (device-independent numbers)."""
    return fed.view(generator=eval_generator(fed.seed, rnd, client))


def momentum(factor: float) -> GradHook | None:
    """A grad_hook making local_train's steps torch.optim.SGD's with momentum (no dampening): the
    step is b <- factor * b + g (b = g at the first step); None for factor 0 (plain SGD)."""
    if not factor:
        return None
    buffers: dict[str, Tensor] = {}

    def step(name: str, param: Tensor, grad: Tensor, extra: Extra) -> Tensor:
        buffers[name] = grad.clone() if name not in buffers else buffers[name].mul_(factor).add_(grad)
        return buffers[name]

    return step


class RecordsAdaptation(ABC):
    """Mixed into an algorithm whose evaluated models are adapted copies of one shared model: at the
    final evaluation it also counts what the shared model itself gets right on each client's test
    split, written as adaptation.csv (client, test_samples, correct_before, budget) beside the metrics."""

    record_tables = ("adaptation",)
    fed: Federation
    _before: dict[int, int]

    @abstractmethod
    def adaptation_budget(self) -> str:
        """What the adaptation of one client costs, in words (the report shows it beside the number)."""

    def note_unadapted(self, client: int, params: Params) -> None:
        if self.fed.current_round == self.fed.total_rounds and client not in self._before:
            correct, _ = predict(self.fed, params, self.fed.test_idx[client], self.forward)  # type: ignore[attr-defined]
            self._before[client] = int(correct.sum())

    def extra_records(self) -> dict:
        import pandas as pd

        clients = sorted(self._before)
        return {"adaptation": pd.DataFrame({"client": clients, "test_samples": [len(self.fed.test_idx[c]) for c in clients],
                                            "correct_before": [self._before[c] for c in clients],
                                            "budget": [self.adaptation_budget()] * len(clients)},
                                           columns=["client", "test_samples", "correct_before", "budget"])}


# --------------------------------------------------------------------------------------- FedBABU


class FedBABU(RecordsAdaptation, FedPer):
    """FedPer whose head is never trained: the common initial head, frozen on every client (stored
    once), and FedAvg on the body; evaluated with the global body and that head, except where it
    fine-tunes (`finetune_at`): there each client's copy of the starting model (`finetune_from`) is
    first trained `finetune_epochs` epochs on its own train split (`finetune_parts`).

    finetune_from=best keeps one body, `best_body`: that of the evaluated round (from round 1 on)
    whose global model scored the best pooled test accuracy so far (`best_acc`, first of equals,
    as the authors' main_fed.py), part of the checkpointed state."""

    transient = ("_tuned", "_before", "_start")
    # exchange: FedPer's (the body up from the trained clients, down to every client each round)

    def __init__(self, fed: Federation, options: FedBABUOptions) -> None:
        super().__init__(fed, options)  # global_params: the body; initial_local: the frozen head, for all
        self._tuned: dict[int, Params] = {}
        self._before: dict[int, int] = {}
        self._start: Params | None = None  # the model this round's fine-tuning starts from
        self.best_body: Params | None = None
        self.best_acc = -1.0
        self.best_round = -1

    def adaptation_budget(self) -> str:
        o = self.options
        if o.finetune_epochs == 0:
            return "none"
        lr = f"lr {o.finetune_lr:g}" if o.finetune_lr else "the client's lr"
        start = f" from round {self.best_round} (best test acc)" if self.keeps_best() and self.best_round >= 0 else ""
        return f"{o.finetune_epochs} epochs ({o.finetune_parts}, {lr}, momentum {o.finetune_momentum:g}){start}"

    def start_training(self, rnd: int, client: int) -> list[Phase]:
        return [Phase(self.client_params(client), trainable=is_body)]

    def keep(self, client: int, params: Params) -> None:
        """Upload the body; the head did not move, so nothing is kept on the client."""
        self.uploads[client] = self.fed.channel.upload({k: params[k] for k in self.global_params})

    def send(self, rnd: int, selected: list[int]) -> None:
        self._tuned, self._start = {}, None
        super().send(rnd, selected)

    def fine_tunes(self, rnd: int) -> bool:
        """Whether the models evaluated in round `rnd` are the fine-tuned ones."""
        if self.options.finetune_epochs == 0:
            return False
        return self.options.finetune_at == "every_eval" or rnd == self.fed.total_rounds

    def keeps_best(self) -> bool:
        return self.options.finetune_from == "best" and self.options.finetune_epochs > 0

    def eval_params(self, client: int) -> Params:
        rnd = self.fed.current_round
        if self._start is None:  # the round's first evaluated client
            self._start = self.starting_model(rnd)
        if not self.fine_tunes(rnd):
            return self.client_params(client)  # the same tensors for every client
        if client not in self._tuned:
            self.note_unadapted(client, self._start)
            self._tuned[client] = self.fine_tuned(rnd, client, self._start)
        return self._tuned[client]

    def starting_model(self, rnd: int) -> Params:
        """What fine-tuning in (evaluated) round `rnd` starts from: the global body, or with
        finetune_from=best the best round's body up to this one; the initial head."""
        if not self.keeps_best():
            return {**self.global_params, **self.initial_local}
        if rnd >= 1:  # the authors evaluate (and may keep) a model only after its first round
            accuracy = self.global_test_accuracy()
            if accuracy > self.best_acc:
                self.best_body = {k: v.detach().clone() for k, v in self.global_params.items()}
                self.best_acc, self.best_round = accuracy, rnd
        return {**(self.best_body if self.best_body is not None else self.global_params), **self.initial_local}

    def global_test_accuracy(self) -> float:
        """The global model's (global body, initial head) correct predictions over all clients' test
        splits / their samples: the authors' test_img_local_all (per-client accuracies weighted by
        test share). One pass per client, as the engine evaluates; no label prior."""
        fed, model = self.fed, {**self.global_params, **self.initial_local}
        correct = sum(int(predict(fed, model, idx, self.forward)[0].sum()) for idx in fed.test_idx)
        return correct / max(sum(len(idx) for idx in fed.test_idx), 1)

    def fine_tuned(self, rnd: int, client: int, start: Params) -> Params:
        """The client's copy of `start` after its fine-tuning epochs, at `finetune_lr` (0: its
        current lr) with `finetune_momentum`."""
        fed, o = self.fed, self.options
        return local_train(evaluation_fed(fed, rnd, client), start, client, epochs=o.finetune_epochs,
                           lr=o.finetune_lr or fed.client_lr(client), trainable=FINETUNED[o.finetune_parts],
                           grad_hook=momentum(o.finetune_momentum)).params


# ------------------------------------------------------------------------------------ Per-FedAvg


def split_bounds(n, parts: int) -> list:
    """Where a batch of n samples is cut into `parts` consecutive pieces: at ceil(j * n / parts),
    so the first pieces get the extra samples (D gets the odd one of 2B)."""
    return [(j * n + parts - 1) // parts for j in range(1, parts)]


def gradient(loss_of, params: Params) -> Params:
    """The gradient of `loss_of(params)` w.r.t. `params` (torch.func.grad: it works on both of the
    engine's paths, inside the batched path's vmap as well)."""
    return torch.func.grad(loss_of)(params)


class PerFedAvg(RecordsAdaptation, ParameterAveraging):
    """Fallah et al. 2020: minimise (1/N) sum_i f_i(w - alpha grad f_i(w)).

    Local training: E epochs over batches of 2B (3B for order=hf) samples, each split into D, D'
    (and D''); per batch w <- w - beta * meta-gradient (`meta_loss`). alpha is the client's current
    lr, beta the `beta` option (0: the client's current lr). The server averages the uploaded w
    (uniform by default, the paper's mean). Evaluation: w - alpha grad f_c(w; one batch of B train
    samples), from the evaluation generator (`eval_steps`, `eval_data`).
    """

    transient = ("train_fed", "_adapted", "_before")
    # exchange: ParameterAveraging's (the whole model up from the trained clients, down to all clients)

    def __init__(self, fed: Federation, options: PerFedAvgOptions) -> None:
        super().__init__(fed, options)
        self.parts = 3 if options.order == "hf" else 2
        # the training view: batches of parts * B samples, its SGD step being beta
        self.train_fed = fed.view(batch_size=self.parts * fed.batch_size, lr=self.outer_lr)
        self._adapted: dict[int, Params] = {}
        self._before: dict[int, int] = {}

    def adaptation_budget(self) -> str:
        o = self.options
        if o.eval_steps == 0:
            return "none"
        unit = "steps on one batch" if o.eval_data == "batch" else "epochs"
        return f"{o.eval_steps} {unit} (the client's lr)"

    def outer_lr(self, client: int) -> float:
        """beta: the option, or the client's current lr when it is 0; decayed like the lr
        (beta_decay) or fixed (PFLlib)."""
        fed, beta = self.fed, self.options.beta
        if not self.options.beta_decay:
            return beta or fed.lr
        return fed.client_lr(client) if not beta else beta * fed.client_lr(client) / fed.lr

    def training_fed(self) -> Federation:
        return self.train_fed

    # -- local training ------------------------------------------------------------------------

    def start_training(self, rnd: int, client: int) -> list[Phase]:
        """One phase from w (two with double_train: PFLlib's second train() call, at the lr after
        one more decay step; beta decays with it when beta_decay)."""
        fed, dtype = self.fed, next(iter(self.global_params.values())).dtype
        alpha = fed.client_lr(client)
        phase = Phase(self.global_params, loss_fn=self.meta_loss, extra={"alpha": torch.tensor(alpha, dtype=dtype, device=fed.device)})
        if not self.options.double_train:
            return [phase]
        decay = fed.decay_per_training
        second = {"alpha": torch.tensor(alpha * decay, dtype=dtype, device=fed.device),
                  "beta_factor": torch.tensor(decay if self.options.beta_decay else 1.0, dtype=dtype, device=fed.device)}
        return [phase, Phase(None, loss_fn=self.meta_loss, grad_hook=scaled_step, extra=second)]

    def finish_training(self, rnd: int, client: int, phases: list[Phase], results: list[LocalResult]) -> LocalResult:
        self.keep(client, results[-1].params)
        if len(results) == 1:
            return results[0]
        return LocalResult.in_a_row(results).as_trainings(2)  # PFLlib's scheduler stepped by each of its two train() calls

    def meta_loss(self, params: Params, x: Tensor, y: Tensor, mask: Tensor | None, extra: Extra) -> Tensor:
        """A loss whose gradient w.r.t. `params` is Per-FedAvg's meta-gradient on this batch, and
        whose value is f(w~; D'), the loss after the inner step w~ = w - alpha grad f(w; D).

        order=first: the inner gradient is a constant, so d f(w~; D') / dw = grad f(w~; D').
        order=exact: it is differentiated too: (I - alpha H(w; D)) grad f(w~; D').
        order=hf: grad f(w~; D') - alpha (grad f(w + delta v; D'') - grad f(w - delta v; D'')) / (2 delta),
        v = grad f(w~; D'), the correction entering as a zero-valued linear term.
        A batch with fewer samples than pieces makes no step (value and gradient 0)."""
        parts = self.parts
        if mask is None:  # the sequential path: slices of the batch
            n = len(y)
            if n < parts:
                return sum((p * 0).sum() for p in params.values())
            cuts = [0, *split_bounds(n, parts), n]
            pieces = [(x[a:b], y[a:b], None) for a, b in zip(cuts, cuts[1:])]
            enough = None
        else:  # the batched path (vmap): a mask per piece over the padded batch
            n, position = mask.sum(), torch.arange(len(y), device=y.device)
            cuts = [torch.zeros_like(n), *split_bounds(n, parts), n]
            pieces = [(x, y, mask * ((position >= a) & (position < b))) for a, b in zip(cuts, cuts[1:])]
            enough = (n >= parts).to(mask.dtype)

        def loss_on(piece):
            px, py, pmask = piece
            return lambda q: cross_entropy(self.fed.forward(q, px), py, pmask)

        alpha = extra["alpha"]
        inner = gradient(loss_on(pieces[0]), params)
        if self.options.order != "exact":
            inner = {k: g.detach() for k, g in inner.items()}
        adapted = {k: p - alpha * inner[k] for k, p in params.items()}
        loss = loss_on(pieces[1])(adapted)
        if self.options.order == "hf":
            delta = self.options.delta
            v = {k: g.detach() for k, g in gradient(loss_on(pieces[1]), {k: t.detach() for k, t in adapted.items()}).items()}
            plus = gradient(loss_on(pieces[2]), {k: p.detach() + delta * v[k] for k, p in params.items()})
            minus = gradient(loss_on(pieces[2]), {k: p.detach() - delta * v[k] for k, p in params.items()})
            correction = sum(((p - p.detach()) * (plus[k] - minus[k]).detach()).sum() for k, p in params.items())
            loss = loss - alpha / (2 * delta) * correction
        return loss if enough is None else loss * enough

    # -- evaluation ----------------------------------------------------------------------------

    def send(self, rnd: int, selected: list[int]) -> None:
        self._adapted = {}
        super().send(rnd, selected)

    def eval_params(self, client: int) -> Params:
        if self.options.eval_steps == 0:
            return self.global_params
        if client not in self._adapted:
            self.note_unadapted(client, self.global_params)
            self._adapted[client] = self.adapted(self.fed.current_round, client)
        return self._adapted[client]

    def adapted(self, rnd: int, client: int) -> Params:
        """w personalised for `client`: eval_steps SGD steps at its current lr on its adaptation
        batch E_c (eval_data=batch: B of its train samples, all of them when fewer, drawn by the
        evaluation generator), or eval_steps epochs over its train split (eval_data=epoch)."""
        fed = self.fed
        view = evaluation_fed(fed, rnd, client)
        if self.options.eval_data == "batch":
            idx = fed.train_idx[client]
            batch = idx[torch.randperm(len(idx), generator=view.generator)[: fed.batch_size].to(idx.device)]
            view = view.view(batches=lambda c: iter((batch,)))  # every epoch: that batch
        return local_train(view, self.global_params, client, epochs=self.options.eval_steps, lr=fed.client_lr(client)).params


def scaled_step(name: str, param: Tensor, grad: Tensor, extra: Extra) -> Tensor:
    """The gradient scaled by extra["beta_factor"]: Per-FedAvg's second training call (double_train)
    steps with beta times that factor (beta after one more decay step, or beta itself)."""
    return grad * extra["beta_factor"]
