"""The federation: everything fixed during a run (data, clients' splits, model, hyper-parameters, the
run's generator), the types the engine and the algorithms share, and the traffic counter.

Client models are plain dicts of tensors (`Params`); a single `FedAvgCNN` instance does all the
compute through `torch.func.functional_call`. The pooled dataset lives in memory, normalised once,
and client batches are index tensors.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np
import torch
from torch.func import functional_call

from fedgmh.config import EngineOptions
from fedgmh.engine.eval_buckets import EvalBucket, bucket_by_length
from fedgmh.model import FedAvgCNN

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
#: [correct, loss sum] rows (`batched_evaluation.evaluate_many`)
EvaluateMany = Callable[..., torch.Tensor]


class LocalResult:
    """What a call of `local_train` returns: the new parameters and the training loss it saw.

    `loss_sum` may be given as a 0-d tensor on the device; it is read (a host sync on a GPU) only
    when asked for, so that `play_round` reads the losses of all of a round's clients at once.
    Reading it gives the float the tensor holds, exactly as `float(tensor)` at creation would.
    """

    def __init__(self, params: Params, loss_sum: float | torch.Tensor = 0.0, num_samples: int = 0, trainings: int = 1) -> None:
        self.params, self.num_samples, self._loss = params, num_samples, loss_sum
        #: local training calls the result stands for, each one lr decay step (`Federation.client_lr`):
        #: the engine adds it to the client's participation count
        self.trainings = trainings

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

    def as_trainings(self, trainings: int) -> LocalResult:
        """This result, standing for `trainings` local training calls (e.g. Per-FedAvg's two train() calls)."""
        self.trainings = trainings
        return self


class SamplePasses:
    """Sample passes of a run's training or evaluation: those executed and the useful ones among them
    (real samples; the batched training step also executes the masked padding of partial batches, a
    batched evaluation pass the padding of its bucket and its filled-up models). Client by client every
    executed pass is useful."""

    def __init__(self) -> None:
        self.useful = self.executed = 0
        self.known = True  # False after resuming a snapshot that did not count them: the record gets none

    def add(self, useful: int, executed: int) -> None:
        self.useful += useful
        self.executed += executed

    def state(self) -> tuple[int, int]:
        return self.useful, self.executed

    def restore(self, state: tuple[int, int] | None) -> None:
        """The counts of a snapshot (None: one taken before they were counted, so the run's total is unknown)."""
        self.known = state is not None
        self.useful, self.executed = state if state is not None else (0, 0)

    def record(self) -> dict[str, int | float] | None:
        """run.json's `sample_passes` or `evaluation_sample_passes`; None before any pass, or when a resumed
        snapshot did not count them."""
        if not (self.executed and self.known):
            return None
        return {"useful": self.useful, "executed": self.executed, "useful_share": self.useful / self.executed}


#: the least share of real samples among the padded test samples of a bucket (`bucket_by_length`)
EVAL_BUCKET_FILL = 0.95


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
    #: shared with every `view` (by reference), so the batched step of a view counts for the run
    sample_passes: SamplePasses = field(init=False)
    #: the evaluation's sample passes (shared with every `view` as `sample_passes` is)
    evaluation_passes: SamplePasses = field(init=False)
    current_round: int = field(init=False, default=0)  # set by play_round; lr_decay_unit=round reads it
    #: the run's number of rounds, set by `run_rounds` on every start (also on a resume; never
    #: checkpointed): an algorithm that acts in the last training round (rounds - 1) reads it
    total_rounds: int | None = field(init=False, default=None)
    #: the `group.RunGroup` whose runs' clients train in one batched step with this run's (None: alone)
    group: Any = field(init=False, default=None)

    def __post_init__(self) -> None:
        if self.options.memory_format == "channels_last" and self.images.dim() == 4:
            self.images = self.images.contiguous(memory_format=torch.channels_last)  # batches keep the layout
        self.generator = torch.Generator().manual_seed(self.seed)
        self.participations = np.zeros(self.num_clients, dtype=np.int64)
        self.channel = Channel()
        self.sample_passes = SamplePasses()
        self.evaluation_passes = SamplePasses()

    def view(self, *, train_idx: list[torch.Tensor] | None = None, batch_size: int | None = None,
             lr: Callable[[int], float] | None = None, generator: torch.Generator | None = None,
             shuffle: bool = True, batches: Callable[[int], Iterator[torch.Tensor]] | None = None) -> Federation:
        """This federation as `local_train` should see it for an algorithm that trains on other terms:
        other train splits (`train_idx`, e.g. FedFomo's without its validation part), another
        `batch_size`, another lr rule (`lr(client)`, e.g. Per-FedAvg's beta), another `generator` (an
        evaluation-side one), batches in stored order (`shuffle=False`) or given by `batches(client)`
        (every epoch). What is not given stays shared with this federation, by reference: data,
        model, options, the run's generator, participation counts, traffic counter, and the lr
        rule, which reads this federation's round counter. The run's Federation itself never changes."""
        view = copy.copy(self)
        view.train_idx = self.train_idx if train_idx is None else train_idx
        if train_idx is not None:
            view.__dict__.pop("train_labels", None)  # its own splits' labels, read when asked for
        view.batch_size = self.batch_size if batch_size is None else batch_size
        view.generator = self.generator if generator is None else generator
        view.client_lr = self.client_lr if lr is None else lr  # type: ignore[method-assign]
        if batches is not None:
            view.shuffled_batches = batches  # type: ignore[method-assign]
        elif not shuffle:
            view.shuffled_batches = lambda client: iter(split_batches(view.epoch_indices(client, shuffle=False), view.batch_size))  # type: ignore[method-assign]
        return view

    @property
    def num_clients(self) -> int:
        return len(self.train_idx)

    @functools.cached_property
    def test_buckets(self) -> list[EvalBucket]:
        """The clients grouped by the length of their test split (`bucket_by_length`), each bucket's
        splits padded to its longest: built once (test splits are fixed during a run), so a client is
        always in the same bucket and a batched evaluation pass gathers its rows in one indexing."""
        lengths = [len(idx) for idx in self.test_idx]
        return [EvalBucket.of(self.test_idx, clients, self.device) for clients in bucket_by_length(lengths, EVAL_BUCKET_FILL)]

    @property
    def device(self) -> torch.device:
        return self.images.device

    @property
    def vectorised(self) -> bool:
        """Whether algorithms that allow it train all selected clients in one vmap step (engine/vectorised.py)."""
        if self.options.vectorise == "auto":
            return self.device.type == "cuda"
        return self.options.vectorise == "on"

    @property
    def evaluates_batched(self) -> bool:
        """Whether clients are evaluated in a few vmap passes (engine option eval_batched; auto = on CUDA)."""
        decided = self.options.batched_evaluation
        return self.device.type == "cuda" if decided is None else decided

    def train_sizes(self) -> np.ndarray:
        return np.array([len(idx) for idx in self.train_idx])

    def client_lr(self, client: int) -> float:
        """lr * gamma^k after k participations (ExponentialLR stepped once per local training call),
        or after k rounds with `lr_decay_unit=round`."""
        steps = self.current_round if self.options.lr_decay_unit == "round" else int(self.participations[client])
        return self.lr * self.options.lr_decay ** steps

    @property
    def decay_per_training(self) -> float:
        """The factor by which a client's lr falls with one more local training call (`client_lr`):
        lr_decay, or 1 with `lr_decay_unit=round`."""
        return self.options.lr_decay if self.options.lr_decay_unit == "participation" else 1.0

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

    def labelled_epoch_samples(self, client: int) -> tuple[torch.Tensor, np.ndarray]:
        """`epoch_samples(client)` (the same draw) and their labels on the host, known without reading
        the device (the shuffle is drawn on the host; `train_labels`)."""
        idx, labels = self.train_idx[client], self.train_labels[client]
        if not self.options.drop_last:
            return idx, labels
        order = torch.randperm(len(idx), generator=self.generator)
        keep = len(idx) - len(idx) % self.batch_size
        return idx[order.to(idx.device, non_blocking=True)][:keep], labels[order.numpy()[:keep]]

    @functools.cached_property
    def train_labels(self) -> list[np.ndarray]:
        """Each client's train labels in the order of its split, on the host: read from the device
        once per run (one transfer for all clients)."""
        sizes = [len(idx) for idx in self.train_idx]
        flat = self.labels[torch.cat(self.train_idx)].cpu().numpy() if sum(sizes) else np.zeros(0, dtype=np.int64)
        return np.split(flat, np.cumsum(sizes)[:-1]) if sizes else []

    def forward(self, params: Params, x: torch.Tensor) -> torch.Tensor:
        return functional_call(self.model, params, (x,))

    def features(self, params: Params, x: torch.Tensor) -> torch.Tensor:
        return functional_call(self.model.body, {k[5:]: v for k, v in params.items() if k.startswith("body.")}, (x,))

    def initial_params(self) -> Params:
        return {name: p.detach().clone() for name, p in self.model.named_parameters()}


def to_device(values: torch.Tensor | list | np.ndarray, device: torch.device, dtype: torch.dtype | None = None) -> torch.Tensor:
    """`values` (a host list, array or tensor) on `device`. A copy to a GPU goes through pinned memory
    without blocking: a plain copy from pageable memory waits until every kernel queued before it has run."""
    tensor = values if isinstance(values, torch.Tensor) else torch.as_tensor(values, dtype=dtype)
    if device.type != "cuda" or tensor.device.type != "cpu":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)


def split_batches(indices: torch.Tensor, batch_size: int) -> tuple[torch.Tensor, ...]:
    """Consecutive batches of `indices`, the last one possibly smaller (none when it is empty)."""
    return indices.split(batch_size) if len(indices) else ()

