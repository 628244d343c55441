"""The one round loop and the one local-SGD routine that every algorithm runs on.

Client models are plain dicts of tensors (`Params`); a single `FedAvgCNN` instance does all the
compute through `torch.func.functional_call`. The pooled dataset lives in memory, normalised once,
and client batches are index tensors.

Round order follows PFLlib (serverbase.py): select clients, send, evaluate ALL clients, train the
selected ones, aggregate. Round indices run 0..rounds (rounds + 1 iterations, like PFLlib); the
last iteration only evaluates, because training after the last evaluation cannot change a result.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import pickle
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch
import torch.nn.functional as F
from torch.func import functional_call

from fedgmh.config import EngineOptions
from fedgmh.errors import Interrupted, UserError
from fedgmh.model import FedAvgCNN, use_unfold_convolutions
from fedgmh.stopping import sigterm_at_round_end

Params = dict[str, torch.Tensor]
#: a client's own tensors that its loss and gradient hook read (a dict of tensors or of dicts of tensors)
Extra = dict[str, Any]
#: loss(params, x, y, mask, extra): the batch's mean loss; `mask` is None on the sequential path and
#: marks the real samples (1) of a padded batch on the batched one (`batch_mean`, `cross_entropy`)
LossFn = Callable[[Params, torch.Tensor, torch.Tensor, "torch.Tensor | None", Extra], torch.Tensor]
#: grad_hook(name, param, grad, extra) -> the gradient the SGD step uses
GradHook = Callable[[str, torch.Tensor, torch.Tensor, Extra], torch.Tensor]
#: draw(batch) -> random numbers a batch's loss needs, drawn from the federation's generator right
#: after the batch; the loss reads them as extra["noise"] (zero at padded samples of the batched path)
Draw = Callable[[torch.Tensor], torch.Tensor]
Forward = Callable[[Params, torch.Tensor], torch.Tensor]
#: evaluates many clients' models at once: (fed, models, clients, forward, priors or None) -> their
#: [correct, loss sum] rows (`vectorised.evaluate_many`)
EvaluateMany = Callable[..., torch.Tensor]


class LocalResult:
    """What a call of `local_train` returns: the new parameters and the training loss it saw.

    `loss_sum` may be given as a 0-d tensor on the device; it is read (a host sync on a GPU) only
    when asked for, so that `play_round` reads the losses of all of a round's clients at once.
    Reading it gives the float the tensor holds, exactly as `float(tensor)` at creation would.
    """

    def __init__(self, params: Params, loss_sum: float | torch.Tensor = 0.0, num_samples: int = 0) -> None:
        self.params, self.num_samples, self._loss = params, num_samples, loss_sum

    @property
    def loss_sum(self) -> float:
        if isinstance(self._loss, torch.Tensor):
            self._loss = float(self._loss)
        return self._loss

    @loss_sum.setter
    def loss_sum(self, value: float | torch.Tensor) -> None:
        self._loss = value

    def __repr__(self) -> str:
        return f"LocalResult(params={sorted(self.params)}, loss_sum={self._loss!r}, num_samples={self.num_samples})"

    @staticmethod
    def in_a_row(results: list[LocalResult]) -> LocalResult:
        """Several trainings of one client one after the other (e.g. FedRep's head, then body) as one
        result: the last parameters, the summed losses and sample counts. Losses still on the device
        are summed there, in float64 and in order, without a host read: the same float as summing
        the values read one by one."""
        loss = 0.0
        for result in results:
            loss = loss + (result._loss.double() if isinstance(result._loss, torch.Tensor) else result._loss)
        return LocalResult(results[-1].params, loss, sum(r.num_samples for r in results))


class Channel:
    """Counts the bytes that really cross the network: algorithms pass what they send through it.

    `upload(tensors)` / `download(tensors)` return their argument unchanged and add its size
    (numel x element size, summed over tensors) to this round's totals.
    """

    def __init__(self) -> None:
        self.up = self.down = 0

    @staticmethod
    def size(tensors) -> int:
        if isinstance(tensors, torch.Tensor):
            return tensors.numel() * tensors.element_size()
        values = tensors.values() if isinstance(tensors, dict) else tensors
        return sum(Channel.size(t) for t in values)

    def upload(self, tensors):
        self.up += self.size(tensors)
        return tensors

    def download(self, tensors):
        self.down += self.size(tensors)
        return tensors

    def take_round(self) -> dict[str, int]:
        """This round's totals (all clients together), then reset."""
        totals = {"bytes_up": self.up, "bytes_down": self.down}
        self.up = self.down = 0
        return totals


@dataclass
class Federation:
    """Everything fixed during a run: data, clients, architecture, hyper-parameters and RNGs."""

    model: FedAvgCNN
    images: torch.Tensor
    labels: torch.Tensor
    train_idx: list[torch.Tensor]
    test_idx: list[torch.Tensor]
    num_classes: int
    batch_size: int
    local_epochs: int
    lr: float
    options: EngineOptions
    seed: int
    generator: torch.Generator = field(init=False)
    participations: np.ndarray = field(init=False)
    channel: Channel = field(init=False)
    current_round: int = field(init=False, default=0)  # set by play_round; lr_decay_unit=round reads it
    #: the run's number of rounds, set by `run_rounds` on every start (also on a resume; never
    #: checkpointed): an algorithm that acts in the last training round (rounds - 1) reads it
    total_rounds: int | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        if self.options.memory_format == "channels_last" and self.images.dim() == 4:
            self.images = self.images.contiguous(memory_format=torch.channels_last)  # batches keep the layout
        if self.options.conv == "unfold":
            use_unfold_convolutions(self.model)
        self.generator = torch.Generator().manual_seed(self.seed)
        self.participations = np.zeros(self.num_clients, dtype=np.int64)
        self.channel = Channel()

    @property
    def num_clients(self) -> int:
        return len(self.train_idx)

    @functools.cached_property
    def padded_test_idx(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Every client's test samples padded to the longest split ([clients, longest], padded with
        sample 0) and the mask of its real ones: built once (test splits are fixed during a run), so a
        batched evaluation pass gathers its rows in one indexing instead of writes per client."""
        longest = max((len(idx) for idx in self.test_idx), default=0)
        index = torch.zeros(self.num_clients, longest, dtype=torch.long, device=self.device)
        for client, idx in enumerate(self.test_idx):
            index[client, : len(idx)] = idx
        lengths = torch.tensor([len(idx) for idx in self.test_idx], device=self.device)
        return index, torch.arange(longest, device=self.device) < lengths[:, None]

    @property
    def device(self) -> torch.device:
        return self.images.device

    @property
    def vectorised(self) -> bool:
        """Whether algorithms that allow it train all selected clients in one vmap step (vectorised.py)."""
        if self.options.vectorise == "auto":
            return self.device.type == "cuda"
        return self.options.vectorise == "on"

    def train_sizes(self) -> np.ndarray:
        return np.array([len(idx) for idx in self.train_idx])

    def client_lr(self, client: int) -> float:
        """lr * gamma^k after k participations (ExponentialLR stepped once per local training call),
        or after k rounds with `lr_decay_unit=round`."""
        steps = self.current_round if self.options.lr_decay_unit == "round" else int(self.participations[client])
        return self.lr * self.options.lr_decay ** steps

    def epoch_indices(self, client: int, shuffle: bool = True) -> torch.Tensor:
        """The samples of one epoch over the client's train split, in batch order: shuffled (one
        draw from the run's generator) or in stored order; without the last partial batch when
        `drop_last` (PFLlib's DataLoader)."""
        idx = self.train_idx[client]
        if shuffle:
            idx = idx[torch.randperm(len(idx), generator=self.generator).to(idx.device, non_blocking=True)]  # no host sync
        return idx[: len(idx) - len(idx) % self.batch_size] if self.options.drop_last else idx

    def shuffled_batches(self, client: int) -> Iterator[torch.Tensor]:
        """One epoch of a shuffled DataLoader over the client's train split, as index tensors."""
        yield from split_batches(self.epoch_indices(client), self.batch_size)

    def epoch_samples(self, client: int) -> torch.Tensor:
        """The client's train samples as one epoch of PFLlib's DataLoader sees them: all of them,
        or with drop_last those of one shuffled epoch without its last partial batch (drawn now)."""
        return self.epoch_indices(client) if self.options.drop_last else self.train_idx[client]

    def forward(self, params: Params, x: torch.Tensor) -> torch.Tensor:
        return functional_call(self.model, params, (x,))

    def features(self, params: Params, x: torch.Tensor) -> torch.Tensor:
        return functional_call(self.model.body, {k[5:]: v for k, v in params.items() if k.startswith("body.")}, (x,))

    def initial_params(self) -> Params:
        return {name: p.detach().clone() for name, p in self.model.named_parameters()}


def split_batches(indices: torch.Tensor, batch_size: int) -> tuple[torch.Tensor, ...]:
    """Consecutive batches of `indices`, the last one possibly smaller (none when it is empty)."""
    return indices.split(batch_size) if len(indices) else ()


_MASK64 = (1 << 64) - 1


def splitmix64(x: int) -> int:
    """SplitMix64's output function (Steele et al. 2014, the seeding mix of java.util.SplittableRandom
    and of xoshiro): a fixed bijection of 64-bit integers that spreads every input bit."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def mix_seed(*values: int) -> int:
    """A 63-bit seed from integers: h = 0, then h = splitmix64(h ^ (v mod 2^64)) for each value in
    order. Fixed and documented (not Python's `hash`), so the same values give the same seed on
    every machine and Python version; different values, or another order, give unrelated seeds."""
    h = 0
    for v in values:
        h = splitmix64(h ^ (int(v) & _MASK64))
    return h >> 1  # torch.Generator.manual_seed takes any 64-bit value; 63 bits fit every platform's int64


#: `eval_generator`'s default stream; an algorithm that needs several independent evaluation-side
#: streams (e.g. an adaptation batch and a fine-tuning shuffle) passes stream=1, 2, ...
EVAL_STREAM = 0


def eval_generator(seed: int, rnd: int, client: int, stream: int = EVAL_STREAM, device: torch.device | str = "cpu") -> torch.Generator:
    """A fresh generator for the random numbers that `client`'s evaluation in round `rnd` needs
    (an adaptation batch, a fine-tuning shuffle...), seeded with `mix_seed(seed, rnd, client, stream)`.

    It never touches the run's training generator (`Federation.generator`) nor the client-draw
    RNG, and depends only on (seed, rnd, client, stream): evaluating more or fewer rounds
    (`eval_every`, `eval_last`), or the clients in another order, changes no number, neither of
    training nor of any other evaluation; a resumed run draws the same. `device`: where the
    generator lives (a CUDA generator draws other numbers than a CPU one from the same seed; draw
    on the CPU and move the result for numbers that do not depend on the device)."""
    return torch.Generator(device=device).manual_seed(mix_seed(seed, rnd, client, stream))


def proximal_hook(coef: float) -> GradHook:
    """g -> g + coef * (p - anchor): adds the gradient of (coef / 2) * ||p - anchor||^2, the anchor
    being the client's extra["anchor"] (a model)."""
    return lambda name, p, g, extra: g + coef * (p - extra["anchor"][name])


def batch_mean(values: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """The mean of per-sample `values` over the batch's real samples: all of them (mask None) or
    those marked 1 (`where`, not a product: a padded sample's value may be inf)."""
    if mask is None:
        return values.mean()
    return torch.where(mask > 0, values, 0.0).sum() / mask.sum().clamp(min=1.0)


def cross_entropy(logits: torch.Tensor, y: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean cross-entropy over the batch's real samples (mask None: exactly F.cross_entropy)."""
    if mask is None:
        return F.cross_entropy(logits, y)
    return batch_mean(F.cross_entropy(logits, y, reduction="none"), mask)


def cross_entropy_loss(fed: Federation) -> LossFn:
    return lambda params, x, y, mask, extra: cross_entropy(fed.forward(params, x), y, mask)


@dataclass
class Phase:
    """One `local_train` call of a client's local training, described as data, so that
    `vectorised.train_phases_many` can run it for all selected clients at once.

    `params`: where it starts (None: where the client's previous phase ended); `epochs`,
    `trainable`, `loss_fn`, `grad_hook`, `draw` as in `local_train`. The functions must be the same
    for every client (the batched path runs one for all of them): what differs between clients goes
    in `extra`.
    """

    params: Params | None
    epochs: int | None = None
    trainable: Callable[[str], bool] | None = None
    loss_fn: LossFn | None = None
    grad_hook: GradHook | None = None
    extra: Extra = field(default_factory=dict)
    draw: Draw | None = None

    def seams(self) -> dict[str, Any]:
        return {"epochs": self.epochs, "trainable": self.trainable, "loss_fn": self.loss_fn, "grad_hook": self.grad_hook,
                "extra": self.extra, "draw": self.draw}


def local_train(
    fed: Federation,
    params: Params,
    client: int,
    *,
    epochs: int | None = None,
    lr: float | None = None,
    trainable: Callable[[str], bool] | None = None,
    loss_fn: LossFn | None = None,
    grad_hook: GradHook | None = None,
    extra: Extra | None = None,
    draw: Draw | None = None,
) -> LocalResult:
    """Plain SGD (as torch.optim.SGD: p <- p - lr * g) on the client's train split.

    `trainable` selects the parameters that move (others are frozen but still used), `loss_fn`
    replaces cross-entropy, `grad_hook(name, param, grad, extra)` may change a gradient before the
    step (e.g. a proximal term), `extra` holds the client's tensors that both read, `draw(batch)`
    the random numbers each batch's loss needs (`Phase`). Returns NEW tensors; `params` is not
    modified. `vectorised.train_phases_many` is the batched counterpart. The loss is summed on the
    device and left there (LocalResult reads it when asked): no host sync in the loop.
    """
    epochs = fed.local_epochs if epochs is None else epochs
    lr = fed.client_lr(client) if lr is None else lr
    loss_fn = loss_fn or cross_entropy_loss(fed)
    extra = {} if extra is None else extra
    params = {k: v.detach().clone() for k, v in params.items()}
    names = [k for k in params if trainable is None or trainable(k)]
    for k in names:
        params[k].requires_grad_(True)
    # float64 on the device: the same sum as adding float(loss) * len(batch) in Python, without a sync
    loss_sum, seen = torch.zeros((), dtype=torch.float64, device=fed.device), 0
    for _ in range(epochs):
        for batch in fed.shuffled_batches(client):
            x, y = fed.images[batch], fed.labels[batch]
            loss = loss_fn(params, x, y, None, extra if draw is None else {**extra, "noise": draw(batch)})
            grads = torch.autograd.grad(loss, [params[k] for k in names])
            with torch.no_grad():
                for k, g in zip(names, grads):
                    if grad_hook is not None:
                        g = grad_hook(k, params[k], g, extra)
                    params[k].add_(g, alpha=-lr)
            loss_sum += loss.detach().double() * len(batch)
            seen += len(batch)
    return LocalResult({k: v.detach() for k, v in params.items()}, loss_sum, seen)


def train_phases(fed: Federation, phases: list[Phase], client: int) -> list[LocalResult]:
    """A client's local training phases, one `local_train` call after the other."""
    results: list[LocalResult] = []
    for phase in phases:
        start = results[-1].params if phase.params is None else phase.params
        results.append(local_train(fed, start, client, **phase.seams()))
    return results


@torch.no_grad()
def predict(fed: Federation, params: Params, idx: torch.Tensor, forward: Forward | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample correctness (bool) and cross-entropy of the model on samples `idx`."""
    forward = forward or fed.forward
    correct, losses = [], []
    for start in range(0, len(idx), fed.options.eval_batch_size):
        batch = idx[start : start + fed.options.eval_batch_size]
        logits = forward(params, fed.images[batch])
        y = fed.labels[batch]
        correct.append(logits.argmax(dim=1) == y)
        losses.append(F.cross_entropy(logits, y, reduction="none"))
    if not correct:
        return torch.zeros(0, dtype=torch.bool, device=fed.device), torch.zeros(0, device=fed.device)
    if len(correct) == 1:  # a client's test split is usually one batch: no copy
        return correct[0], losses[0]
    return torch.cat(correct), torch.cat(losses)


def summed_loss(fed: Federation, params: Params, idx: torch.Tensor, forward: Forward | None = None) -> float:
    """Summed cross-entropy of the model on samples `idx`."""
    return float(predict(fed, params, idx, forward)[1].double().sum())


class EvalCache:
    """Each client's last evaluation result, reused while its model is unchanged.

    "Unchanged" = made of the very same tensor objects, none modified in place since (tensor
    version counters), so a reused result is exactly what a new pass would give. Results are per
    client, also when several clients shared one pass (e.g. those still holding the initial model).
    """

    def __init__(self) -> None:
        self.entries: dict[int, tuple[tuple, tuple[float, float]]] = {}

    @staticmethod
    def _signature(params: Params) -> tuple:
        return tuple((t, t._version) for t in params.values())  # holds the tensors: ids stay unique

    def get(self, client: int, params: Params) -> tuple[float, float] | None:
        entry = self.entries.get(client)
        if entry is None or len(entry[0]) != len(params):
            return None
        same = all(old is t and version == t._version for (old, version), t in zip(entry[0], params.values()))
        return entry[1] if same else None

    def put(self, client: int, params: Params, result: tuple[float, float], signature: tuple | None = None) -> None:
        """Remember `result` for `params`; `signature`: `_signature(params)` taken when the result
        was computed, if the tensors may have changed in place since."""
        self.entries[client] = (self._signature(params) if signature is None else signature, result)


def _label_prior(fed: Federation, client: int) -> torch.Tensor:
    from fedgmh.priors import label_prior

    return label_prior(fed.labels[fed.train_idx[client]], fed.num_classes, fed.options.eval_prior).to(fed.device)


def with_label_prior(fed: Federation, client: int, forward: Forward | None) -> Forward:
    """`forward` with the client's mask prior added (engine option eval_prior=mask)."""
    forward, prior = forward or fed.forward, _label_prior(fed, client)
    return lambda params, x: forward(params, x) + prior


def evaluate_clients(
    fed: Federation, params_of: Callable[[int], Params], forward: Forward | None = None, cache: EvalCache | None = None,
    many: EvaluateMany | None = None,
) -> dict[str, float]:
    """Evaluate each client's model on its own test split: pooled accuracy, mean / std over clients,
    loss, and `client_acc`, the array of each client's accuracy.

    One pass per client, also when clients share a model: a sample's logits then never depend on
    which other clients happen to be in the same batch, so a cached result is bit-identical to a
    fresh one (and on CPU batches of a client's ~150-200 samples run as fast as batches of 1000).
    With `many` (`Algorithm.evaluate_together`: `vectorised.evaluate_many` under engine option
    eval_batched) the clients to evaluate go through a few vmap passes instead, where their models
    can be stacked (the same sums to float tolerance, and as independent of the other clients). Each
    client's counts are summed on the device and all of them read in one transfer at the end (one
    host sync per call, not two per client).
    """
    correct = np.zeros(fed.num_clients)
    losses = np.zeros(fed.num_clients)
    total = np.array([len(idx) for idx in fed.test_idx], dtype=float)
    fresh = []  # (client, params, their signature now)
    for client in range(fed.num_clients):
        params = params_of(client)
        cached = cache.get(client, params) if cache is not None else None
        if cached is None:
            fresh.append((client, params, EvalCache._signature(params) if cache is not None else None))
        else:
            correct[client], losses[client] = cached
    read = _evaluation_sums(fed, [c for c, *_ in fresh], [p for _, p, _ in fresh], forward, many).tolist() if fresh else []
    for (client, params, signature), (hits, loss) in zip(fresh, read):
        correct[client], losses[client] = hits, loss
        if cache is not None:
            cache.put(client, params, (hits, loss), signature)
    loss_sum = float(losses.sum())
    accs = correct / np.maximum(total, 1)
    return {
        "test_acc": float(correct.sum() / total.sum()),
        "test_acc_mean": float(accs.mean()),
        "test_acc_std": float(accs.std()),
        "test_loss": float(loss_sum / total.sum()),
        "client_acc": accs,  # per client, for the run's clients.csv (not a metrics.csv column)
    }


def _evaluation_sums(fed: Federation, clients: list[int], models: list[Params], forward: Forward | None,
                     many: EvaluateMany | None) -> torch.Tensor:
    """[correct, loss sum] of each client's model on its test split, as one float64 tensor on the device."""
    forward, masked = forward or fed.forward, fed.options.eval_prior != "none"
    if many is not None and can_stack(models):
        return many(fed, models, clients, forward, [_label_prior(fed, c) for c in clients] if masked else None)
    sums = []
    for client, params in zip(clients, models):
        hits, sample_losses = predict(fed, params, fed.test_idx[client], with_label_prior(fed, client, forward) if masked else forward)
        sums.append(torch.stack([hits.sum().double(), sample_losses.double().sum()]))
    return torch.stack(sums)


def can_stack(models: list[Params]) -> bool:
    """Whether the models can be stacked: the same parameter names (in the same order), shapes and dtypes."""
    first = models[0]
    return all(list(m) == list(first) and all(m[k].shape == v.shape and m[k].dtype == v.dtype for k, v in first.items())
               for m in models[1:])


def should_evaluate(rnd: int, rounds: int, options: EngineOptions) -> bool:
    return options.evaluates(rnd, rounds)


_PACKED = "__fedgmh_packed__"  # marks a value that `_pack` turned into tensors and plain values
#: globals that older snapshots (numpy arrays pickled as such) need; allowed for them, nothing else
_LEGACY_GLOBALS = ("numpy._core.multiarray._reconstruct", "numpy.core.multiarray._reconstruct", "numpy.ndarray", "numpy.dtype")


def _pack(value):
    """A checkpoint value as tensors and plain Python values only, which `torch.load(weights_only=True)`
    reads without running code: numpy arrays and scalars become raw bytes in a uint8 tensor (exact,
    any dtype), sets become tagged lists."""
    if isinstance(value, (np.ndarray, np.generic)):
        array = np.array(value, order="C")  # a copy; 0-d for a scalar
        raw = torch.from_numpy(array.reshape(-1).view(np.uint8))
        kind = "ndarray" if isinstance(value, np.ndarray) else "scalar"
        return {_PACKED: kind, "dtype": array.dtype.str, "shape": list(array.shape), "bytes": raw}
    if isinstance(value, dict):
        return {k: _pack(v) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return {_PACKED: "set", "items": [_pack(v) for v in value]}
    if isinstance(value, (list, tuple)):
        return type(value)(_pack(v) for v in value)
    return value


def _unpack(value):
    """The inverse of `_pack` (values that were never packed pass through unchanged)."""
    if isinstance(value, dict):
        kind = value.get(_PACKED)
        if kind in ("ndarray", "scalar"):
            array = np.frombuffer(value["bytes"].numpy().tobytes(), dtype=np.dtype(value["dtype"])).reshape(value["shape"]).copy()
            return array if kind == "ndarray" else array[()]
        if kind == "set":
            return {_unpack(v) for v in value["items"]}
        return {k: _unpack(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_unpack(v) for v in value)
    return value


def _identity_text(identity) -> str:
    return identity if isinstance(identity, str) else json.dumps(identity, sort_keys=True, default=str)


def _same_identity(stored, identity) -> bool:
    """Whether a snapshot's identity is `identity`, compared without what does not decide a run's numbers:
    of its config only the store's `CONFIG_KEYS` (not the data's and the partition's paths, which may name
    the same files otherwise, nor device or threads), options added since the snapshot counting at their
    defaults (`store.with_option_defaults`, so that a new option does not orphan the snapshots of runs under way)."""
    if _identity_text(stored) == _identity_text(identity):
        return True
    from fedgmh.store import CONFIG_KEYS, with_option_defaults  # here: the store imports the algorithms, which import the engine

    try:
        filled = [with_option_defaults(json.loads(_identity_text(x))) for x in (stored, identity)]
        deciding = [{**run, "config": {k: run["config"][k] for k in CONFIG_KEYS if k in run["config"]}} for run in filled]
    except (ValueError, KeyError, TypeError, AttributeError, UserError):  # not a run's identity: only equal text matches
        return False
    return _identity_text(deciding[0]) == _identity_text(deciding[1])


class _WriteRecorder:
    """A file for torch.save that keeps what stopped a write: torch.save turns any exception of the
    file's `write` (a full disk's OSError, a Ctrl-C's KeyboardInterrupt) into a RuntimeError of its own."""

    def __init__(self, handle) -> None:
        self.handle, self.error = handle, None

    def write(self, data) -> int:
        try:
            return self.handle.write(data)
        except BaseException as err:
            self.error = err
            raise

    def flush(self) -> None:
        self.handle.flush()


def rows_digest(identity: dict | str, rows: list[dict]) -> str:
    """A checksum of a snapshot's metric rows and the run they belong to (exact: floats by their hex
    form, arrays by dtype, shape and bytes), so rows edited in a snapshot are not resumed into a record.
    It catches edits and corruption, not a forger who recomputes it."""
    digest = hashlib.sha256(_identity_text(identity).encode())
    for row in rows:
        for key in sorted(row):
            value = row[key]
            if isinstance(value, (np.ndarray, np.generic)):
                array = np.ascontiguousarray(value)
                text = f"{array.dtype.str}{array.shape}{hashlib.sha256(array.tobytes()).hexdigest()}"
            elif isinstance(value, float):
                text = value.hex()
            else:
                text = repr(value)
            digest.update(f"{key}={text};".encode())
        digest.update(b"\n")
    return digest.hexdigest()


class Checkpoint:
    """Periodic snapshots of a run (written atomically), so a killed run resumes where it stopped.

    A snapshot holds the algorithm's state, every RNG state and the metrics so far; resuming
    from it gives exactly the metrics of an uninterrupted run. `identity` describes the run; a
    snapshot of another run is refused rather than silently mixed in.

    A snapshot holds only tensors and plain values (`_pack`) and is read with
    `torch.load(weights_only=True)`: a file that would run code when loaded (a crafted pickle) is
    refused with a UserError before anything in it is used, and so is one of other settings.
    Older snapshots, which hold numpy arrays, are still read, with only numpy's array classes allowed
    in addition (a run started before this change resumes).
    """

    def __init__(self, path: Path | str, every: int, identity: dict) -> None:
        self.path, self.every, self.identity = Path(path), every, identity

    def due(self, rnd: int, rounds: int) -> bool:
        return self.every > 0 and rnd < rounds and (rnd + 1) % self.every == 0

    def save(self, snapshot: dict) -> None:
        """Write the snapshot atomically: a failed or interrupted write (a full disk, Ctrl-C) leaves the
        previous one as it was and raises what stopped it (`_WriteRecorder`)."""
        from fedgmh.io import atomic_path

        with atomic_path(self.path) as tmp, open(tmp, "wb") as handle:
            writer = _WriteRecorder(handle)
            try:
                torch.save({"identity": _identity_text(self.identity), "rows_digest": rows_digest(self.identity, snapshot.get("rows", [])),
                            **_pack(snapshot)}, writer)
            except RuntimeError:
                if writer.error is None:
                    raise
                raise writer.error from None

    def _read(self) -> dict:
        """The file's contents, read without running code from it."""
        try:
            return torch.load(self.path, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError:
            needs = _unsafe_globals(self.path)
            if needs and set(needs) <= set(_LEGACY_GLOBALS):  # an older snapshot
                try:
                    with torch.serialization.safe_globals(_legacy_safe_globals()):
                        return torch.load(self.path, map_location="cpu", weights_only=True)
                except pickle.UnpicklingError:
                    pass
            what = f"objects other than tensors and plain values ({', '.join(needs[:5])})" if needs else \
                "objects other than tensors and plain values, or is unreadable"
            raise UserError(f"checkpoint {self.path} holds {what}, so it was not loaded (such a file can run code "
                            "when loaded); delete it to start the run afresh") from None

    def load(self) -> dict | None:
        if not self.path.exists():
            return None
        try:
            snapshot = self._read()
        except UserError:
            raise
        except Exception as err:  # noqa: BLE001 - any unreadable file gets the same advice
            raise UserError(f"checkpoint {self.path} is unreadable ({err}); delete it to start the run afresh") from err
        if not isinstance(snapshot, dict) or "identity" not in snapshot:
            raise UserError(f"checkpoint {self.path} is not a fedgmh checkpoint; delete it to start the run afresh")
        if not _same_identity(snapshot["identity"], self.identity):  # checked before anything is used
            raise UserError(f"checkpoint {self.path} belongs to a run with other settings; delete it to start afresh")
        try:
            unpacked = _unpack({k: v for k, v in snapshot.items() if k not in ("identity", "rows_digest")})
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise UserError(f"checkpoint {self.path} is unreadable ({err}); delete it to start the run afresh") from None
        # snapshots written before the checksum existed have none: they are resumed as they are
        if "rows_digest" in snapshot and snapshot["rows_digest"] != rows_digest(snapshot["identity"], unpacked.get("rows", [])):
            raise UserError(f"checkpoint {self.path} holds metric rows that do not match its checksum (edited or corrupt), "
                            "so it was not resumed; delete it to start the run afresh")
        return unpacked

    def holds_other_run(self) -> bool:
        """Whether the snapshot file belongs to a run of other settings (False when there is none or it
        cannot be read as one: `load` then says what is wrong)."""
        if not self.path.is_file():
            return False
        try:
            snapshot = self._read()
        except Exception:  # noqa: BLE001 - unreadable: not known to be another run's
            return False
        return isinstance(snapshot, dict) and "identity" in snapshot and not _same_identity(snapshot["identity"], self.identity)

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def _legacy_safe_globals() -> list:
    """numpy's array reconstruction, ndarray and the numeric dtypes: what an older snapshot holds."""
    reconstruct = np.zeros(1).__reduce__()[0]  # numpy.core or numpy._core .multiarray._reconstruct
    dtypes = (np.bool_, np.uint8, np.int8, np.uint16, np.int16, np.uint32, np.int32, np.uint64, np.int64,
              np.float16, np.float32, np.float64)
    return [reconstruct, np.ndarray, np.dtype, *{type(np.dtype(t)) for t in dtypes}]


def _unsafe_globals(path: Path) -> list[str] | None:
    """The globals a pickle needs beyond what weights_only allows (read from its opcodes, nothing
    run); None when this torch cannot tell."""
    finder = getattr(torch.serialization, "get_unsafe_globals_in_checkpoint", None)
    if finder is None or not hasattr(torch.serialization, "safe_globals"):
        return None
    try:
        return list(finder(path))
    except Exception:  # noqa: BLE001 - not a zip checkpoint: nothing to allow
        return None


def _restore(fed: Federation, algorithm, snapshot: dict, rng: np.random.RandomState) -> None:
    fed.generator.set_state(snapshot["generator"])
    fed.participations[:] = snapshot["participations"]  # in place: algorithms may hold views of fed
    rng.set_state(snapshot["rng"])
    algorithm.load_state({k: _to_device(v, fed.device) for k, v in snapshot["algorithm"].items()})


def _to_device(value, device: torch.device):
    """Move the tensors of a (nested) checkpoint value to `device`, keeping shared tensors shared."""
    if device.type == "cpu":
        return value
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, dict):
        return {k: _to_device(v, device) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_device(v, device) for v in value)
    return value


class Diverged(UserError):
    """A run's model diverged: it cannot produce meaningful numbers, so it stops."""


def divergence(result: LocalResult, all_finite: bool | None = None) -> str | None:
    """What shows that a client's local training diverged: a NaN loss or a parameter that is no
    longer finite. An infinite loss alone is not divergence: FedRoD's Balanced Softmax gives +inf,
    with finite gradients, for a sample of a class its counted epoch lacked (PFLlib does the same).
    `all_finite`: whether every parameter is known to be finite already (see `_check_trained`)."""
    if math.isnan(result.loss_sum):
        return "the training loss is nan"
    if all_finite:
        return None
    for name, tensor in result.params.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            return f"its parameter {name} is no longer finite (training loss {result.loss_sum})"
    return None


def _check_trained(results: list[LocalResult]) -> list[str | None]:
    """`divergence` of each result, reading from the device once for all of them: the losses still
    on the device and, per client, whether all its parameters are finite (instead of a host sync
    per client and per parameter)."""
    flags, pending = [], []
    for result in results:
        floating = [t.reshape(-1) for t in result.params.values() if t.is_floating_point()]
        flags.append(torch.isfinite(torch.cat(floating)).all().double() if floating else None)
        if isinstance(result._loss, torch.Tensor):
            pending.append(result)
    values = [f for f in flags if f is not None] + [r._loss.double() for r in pending]
    read = iter(torch.stack(values).tolist() if values else [])
    finite = [None if f is None else bool(next(read)) for f in flags]
    for result in pending:
        result.loss_sum = next(read)  # the float the device holds, as float(tensor) would give
    return [divergence(result, ok if ok is not None else True) for result, ok in zip(results, finite)]


def play_round(
    fed: Federation, algorithm, rnd: int, selected: list[int], *, evaluate: bool = True, train: bool = True, cache: EvalCache | None = None
) -> dict | None:
    """One round: send to `selected`, evaluate every client (if `evaluate`), train `selected` (if
    `train`), aggregate. Returns the round's metrics row, or None when it was not evaluated.

    The row's `clients_up` counts the clients that uploaded this round: those that trained (none
    when the algorithm's `trained_clients_upload` is False, e.g. Local) plus the algorithm's
    `extra_uploads`, which the engine sets to 0 before `send` and an algorithm raises for uploads
    besides its trained clients' (e.g. a cluster round of extra clients).

    A diverged model (`divergence`: a NaN training loss or a non-finite parameter of a trained
    client; a NaN test loss) raises `Diverged`, naming the round (and client): such a run would only
    produce NaN losses and chance accuracy."""
    start = time.perf_counter()
    fed.current_round = rnd
    algorithm.extra_uploads = 0
    algorithm.send(rnd, selected)
    many = algorithm.evaluate_together() if hasattr(algorithm, "evaluate_together") else None
    metrics = evaluate_clients(fed, algorithm.eval_params, algorithm.forward, cache, many) if evaluate else None
    if metrics is not None and math.isnan(metrics["test_loss"]):
        raise Diverged(f"round {rnd}: the test loss is nan (the models diverged; try a smaller --lr); "
                       "the run is stopped and nothing is written")
    trained = selected if train else []
    results = list(algorithm.train_clients(rnd, trained)) if trained else []
    loss_sum, seen = 0.0, 0
    for client, result, problem in zip(trained, results, _check_trained(results)):
        if problem:
            raise Diverged(f"round {rnd}, client {client}: {problem} (the model diverged; try a smaller --lr); "
                           "the run is stopped and nothing is written")
        loss_sum += result.loss_sum
        seen += result.num_samples
    if trained:
        fed.participations[trained] += 1
        algorithm.aggregate(rnd, trained)
    traffic = fed.channel.take_round()
    if metrics is None:
        return None
    uploaders = len(trained) if getattr(algorithm, "trained_clients_upload", True) else 0
    return {"round": rnd, **metrics, "train_loss": loss_sum / seen if seen else math.nan, **traffic,
            "clients_up": uploaders + int(algorithm.extra_uploads), "seconds": time.perf_counter() - start}


def check_vectorise(fed: Federation, algorithm) -> None:
    """With vectorise=on, an algorithm that must train client by client stops the run before any
    training, with its reason (`Algorithm.why_sequential`), instead of silently training sequentially."""
    reason = algorithm.why_sequential() if fed.options.vectorise == "on" else None
    if reason:
        raise UserError(f"vectorise=on: {algorithm.name} cannot train its clients in one batched step ({reason}); "
                        "use vectorise=auto or off")


def make_eval_cache(fed: Federation, algorithm) -> EvalCache | None:
    """A cache of evaluation results, unless switched off or the algorithm evaluates at random."""
    return EvalCache() if fed.options.eval_cache and getattr(algorithm, "deterministic_eval", True) else None


def select_clients(rng: np.random.RandomState, num_clients: int, join_ratio: float) -> list[int]:
    """One round's clients: int(num_clients * join_ratio) of them (at least one), drawn uniformly
    without replacement from `rng` (run_rounds' RandomState(seed); tools/pflib_compare replays it)."""
    num_selected = max(1, int(num_clients * join_ratio))
    return [int(c) for c in rng.choice(num_clients, num_selected, replace=False)]


def chosen_clients(algorithm, rnd: int, proposed: list[int], num_clients: int) -> list[int]:
    """The algorithm's answer to `choose_clients(rnd, proposed)` (`proposed` for an object without
    the hook), checked: distinct client indices."""
    choose = getattr(algorithm, "choose_clients", None)
    if choose is None:
        return proposed
    chosen = [int(c) for c in choose(rnd, list(proposed))]
    if len(set(chosen)) != len(chosen) or any(not 0 <= c < num_clients for c in chosen):
        name = getattr(algorithm, "name", type(algorithm).__name__)
        raise ValueError(f"round {rnd}: {name}.choose_clients returned {chosen}; expected distinct clients in 0..{num_clients - 1}")
    return chosen


def run_rounds(
    fed: Federation,
    algorithm,
    rounds: int,
    join_ratio: float,
    seed: int,
    on_round: Callable[[dict], None] | None = None,
    checkpoint: Checkpoint | None = None,
    snapshot: dict | None = None,
    on_played: Callable[[int], None] | None = None,
) -> list[dict]:
    """The round loop shared by all algorithms; returns one metrics row per evaluated round.

    Stopped by Ctrl-C or SIGTERM (a KeyboardInterrupt), it raises `errors.Interrupted` with the
    round it stopped at and `resume_round`, the round its last checkpoint resumes from (None: no
    checkpoint was written). A checkpoint being written at that moment is left as it was (atomic).
    With a `checkpoint` that snapshots (every > 0), SIGTERM instead stops at the end of the round it
    arrives in, after snapshotting that round (`stopping`), and `resume_round` is the next round:
    a scheduler's stop loses no training. Arriving in the last training round or in the final
    evaluation, it lets the run finish. A second SIGTERM stops at once.

    Every round draws its `proposed` clients from the RandomState(seed) (`select_clients`), then
    plays the round with the algorithm's `choose_clients(rnd, proposed)` (by default `proposed`):
    the draws, and so the checkpoints, are the same whatever an algorithm chooses.
    `fed.total_rounds` is set to `rounds` before the first round (on every start, resume included).
    `snapshot`: the checkpoint's contents when the caller has loaded them already (read once, not
    twice: a 100-client snapshot is hundreds of MB); otherwise the checkpoint is loaded here.
    `on_round(row)` is called for every evaluated round, `on_played(rnd)` after every round (progress)."""
    check_vectorise(fed, algorithm)
    fed.total_rounds = rounds
    rng = np.random.RandomState(seed)
    rows: list[dict] = []
    first = 0
    cache = make_eval_cache(fed, algorithm)
    if snapshot is None and checkpoint is not None:
        snapshot = checkpoint.load()
    if snapshot is not None:
        _restore(fed, algorithm, snapshot, rng)
        rows, first = snapshot["rows"], snapshot["next_round"]
    rnd, resume_round = first, first if snapshot is not None else None
    snapshots, stopped = checkpoint is not None and checkpoint.every > 0, False
    try:
        with sigterm_at_round_end(enabled=snapshots) as stop_request:
            for rnd in range(first, rounds + 1):
                proposed = select_clients(rng, fed.num_clients, join_ratio)
                selected = chosen_clients(algorithm, rnd, proposed, fed.num_clients)
                # the last iteration only evaluates: PFLlib trains once more, but nothing could evaluate it
                row = play_round(fed, algorithm, rnd, selected, evaluate=should_evaluate(rnd, rounds, fed.options),
                                 train=rnd < rounds, cache=cache)
                if row is not None:
                    rows.append(row)
                    if on_round is not None:
                        on_round(row)
                if on_played is not None:
                    on_played(rnd)
                if snapshots and checkpoint.due(rnd, rounds):
                    resume_round = _snapshot(checkpoint, fed, algorithm, rng, rows, rnd)
                # read after the periodic snapshot, so that a SIGTERM during it counts for this round;
                # in the last training round, finishing the run (one evaluation) beats a resume
                stopped = stop_request.signum is not None and rnd < rounds - 1
                if stopped:
                    if resume_round != rnd + 1:
                        resume_round = _snapshot(checkpoint, fed, algorithm, rng, rows, rnd)
                    break
    except Diverged:
        if checkpoint is not None:
            checkpoint.remove()  # resuming would only diverge again at the same round
        raise
    except KeyboardInterrupt as stop:  # Ctrl-C, or the CLI's SIGTERM handler (errors.Interrupted)
        raise Interrupted(getattr(stop, "signum", signal.SIGINT), f"interrupted at round {rnd}", round=rnd,
                          resume_round=resume_round) from None
    if stopped:
        raise Interrupted(stop_request.signum, f"stopped by SIGTERM after round {rnd}", round=rnd, resume_round=resume_round)
    return rows


def _snapshot(checkpoint: Checkpoint, fed: Federation, algorithm, rng: np.random.RandomState, rows: list[dict], rnd: int) -> int:
    """Snapshot the run after round `rnd`; returns the round it resumes from."""
    checkpoint.save({
        "next_round": rnd + 1,
        "rows": rows,
        "rng": rng.get_state(),
        "generator": fed.generator.get_state(),
        "participations": fed.participations.copy(),
        "algorithm": algorithm.state(),
    })
    return rnd + 1
