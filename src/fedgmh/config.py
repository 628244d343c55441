"""Typed run configuration and `--set key=value` options.

A run is a `TrainConfig` (the flags of `fedgmh train`) plus options given as `--set key=value`.
Each option belongs either to the engine (`EngineOptions`) or to the algorithm (its `Options`
dataclass). Values are converted to the field's type; unknown keys, wrong types and values outside
a field's choices fail with a message before any training starts.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from types import UnionType
from typing import Any, Union, get_args, get_origin, get_type_hints

from fedgmh.errors import UserError, did_you_mean

TRUE_WORDS = {"true", "1", "yes", "on"}
FALSE_WORDS = {"false", "0", "no", "off"}


def choice(default: str, *choices: str, help: str = "", aliases: dict[str, str] | None = None) -> Any:
    """A string field restricted to `choices` (the first one documented as the default); `aliases`:
    other words taken for a choice (e.g. the words of a former bool option), case-insensitive."""
    metadata: dict[str, Any] = {"choices": (default, *choices), "help": help}
    if aliases:
        metadata["aliases"] = aliases
    return field(default=default, metadata=metadata)


#: a former bool option's values as on / off (`choice` aliases)
BOOL_WORDS = {**{word: "on" for word in TRUE_WORDS}, **{word: "off" for word in FALSE_WORDS}}


def unalias(f: dataclasses.Field, value: Any) -> Any:
    """The choice `value` stands for under field `f`'s aliases (`choice`), else `value`."""
    aliases = f.metadata.get("aliases")
    if not aliases or not isinstance(value, (str, bool)):
        return value
    return aliases.get(str(value).lower(), value)


def option(default: Any, help: str = "", *, low: float | None = None, high: float | None = None, low_open: bool = False,
           high_open: bool = False, why: str = "") -> Any:
    """A field with its help and, given a bound, the `Range` its values must lie in (checked by
    `RangedOptions`); `why` is said with a value out of range."""
    metadata: dict[str, Any] = {"help": help}
    if low is not None or high is not None:
        metadata["range"] = Range(low, high, low_open, high_open, why)
    return field(default=default, metadata=metadata)


def _bound_text(value: float) -> str:
    return f"{value:g}"


@dataclass(frozen=True)
class Range:
    """The values a numeric option takes: each bound closed unless marked open, None = unbounded.
    An int option takes integers only, a float option finite numbers only."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    why: str = ""

    def requirement(self, integer: bool) -> str:
        """What a value must be, in words: 'in [0, 1]', 'an integer >= 1', 'a finite number > 0'."""
        if self.low is not None and self.high is not None:
            if integer and not (self.low_open or self.high_open):
                return f"an integer from {_bound_text(self.low)} to {_bound_text(self.high)}"
            return (f"in {'(' if self.low_open else '['}{_bound_text(self.low)}, "
                    f"{_bound_text(self.high)}{')' if self.high_open else ']'}")
        if self.low is not None:
            bound = f"{'>' if self.low_open else '>='} {_bound_text(self.low)}"
        else:
            bound = f"{'<' if self.high_open else '<='} {_bound_text(self.high)}"
        return f"{'an integer' if integer else 'a finite number'} {bound}"

    def admits(self, value: Any, integer: bool) -> bool:
        if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)) or not math.isfinite(value):
            return False
        above = self.low is None or (value > self.low if self.low_open else value >= self.low)
        below = self.high is None or (value < self.high if self.high_open else value <= self.high)
        return above and below


class RangedOptions:
    """Base of an options dataclass whose fields carry a `Range`: constructing one with a value out
    of its field's range fails with a one-line `UserError`. A subclass's own `__post_init__` (checks
    across fields) calls this one first."""

    def __post_init__(self) -> None:
        hints = get_type_hints(type(self))
        for f in dataclasses.fields(self):
            limits = f.metadata.get("range")
            value = getattr(self, f.name)
            if limits is not None and not limits.admits(value, integer=hints[f.name] is int):
                why = f" ({limits.why})" if limits.why else ""
                raise UserError(f"{f.name} must be {limits.requirement(hints[f.name] is int)}, got {value!r}{why}")


@dataclass(frozen=True)
class EngineOptions:
    """Engine options shared by every algorithm (settable with --set)."""

    lr_decay: float = option(0.99, "ExponentialLR gamma, stepped once per lr_decay_unit")
    lr_decay_unit: str = choice(
        "participation", "round",
        help="the lr decays once per participation of a client (PFLlib's scheduler, stepped after each local "
        "training) or once per round for every client (the paper's words: 1 percent per round)",
    )
    drop_last: bool = option(False, "drop each client's last partial batch (PFLlib's DataLoader does; the paper uses all samples)")
    eval_every: int = option(1, "evaluate every k-th round (the paper: every round)")
    eval_last: int = option(0, "evaluate only the last k rounds (0 = all; the official FedGMH code uses 20)")
    eval_batch_size: int = option(1000, "batch size of evaluation passes (does not change results)")
    eval_cache: bool = option(True, "reuse a client's last evaluation while its model is unchanged (same numbers, less work)")
    eval_batched: str = choice(
        "auto", "on", "off",
        help="evaluate the clients in a few vmap passes instead of one pass each (the same sums to float tolerance, "
        "not bit-identical); auto = on for CUDA, where 100 small passes wait on kernel launches, off on CPU, where "
        "it is slower (BENCHMARKS.md); true / false (the former bool) read as on / off",
        aliases=BOOL_WORDS,
    )
    vectorise: str = choice(
        "auto", "on", "off",
        help="train the selected clients in one vmap step, every algorithm (same results to float "
        "tolerance on CPU; on CUDA see BENCHMARKS.md); auto = on for CUDA, off on CPU, where it is slower",
    )
    eval_prior: str = choice(
        "none", "mask",
        help="at evaluation, remove the logits of labels absent from the client's train split (the label-prior "
        "control for any algorithm: how much of its accuracy is knowing the label set)",
    )
    tf32: bool = option(
        False,
        "allow TensorFloat-32 on CUDA for convolutions and matrix products (~1e-3 relative error); off = as numerics says",
    )
    numerics: str = choice(
        "strict", "pytorch",
        help="float arithmetic on CUDA: strict = plain fp32 (TF32 off); pytorch = PyTorch's defaults, which the "
        "authors' PFLlib runs used: TF32 for cuDNN convolutions, not for matrix products; cuDNN deterministic either "
        "way, nothing changes on CPU (engine.numerics; tf32=true adds matrix products)",
    )
    memory_format: str = choice(
        "contiguous", "channels_last",
        help="layout of the images in memory; channels_last is faster for CIFAR-shaped data on CPU but not "
        "bit-identical, so it is opt-in (BENCHMARKS.md)",
    )
    conv: str = choice(
        "direct", "unfold",
        help="how convolutions are computed: direct = torch's conv2d (cuDNN on a GPU; under vmap a grouped "
        "convolution), unfold = im2col + one matrix product (one batched GEMM under vmap); the same results "
        "to float tolerance, not bit-identical, so opt-in (BENCHMARKS.md)",
    )

    def evaluates(self, rnd: int, rounds: int) -> bool:
        """Whether round `rnd` (0 = the initial models, `rounds` = the final evaluation) of a run of
        `rounds` rounds is evaluated, i.e. has a metrics.csv row: every `eval_every`-th and the last,
        and with `eval_last` only the last `eval_last`."""
        if self.eval_last and rnd <= rounds - self.eval_last:
            return False
        return rnd % self.eval_every == 0 or rnd == rounds

    @property
    def batched_evaluation(self) -> bool | None:
        """eval_batched as a decision: True (on), False (off), None (auto: for CUDA)."""
        return {"on": True, "off": False}.get(self.eval_batched)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):  # a former bool option given as a bool (a record's, a caller's)
            object.__setattr__(self, f.name, unalias(f, getattr(self, f.name)))
        if not 0 < self.lr_decay <= 1:
            raise UserError(f"lr_decay must be in (0, 1], got {self.lr_decay}")
        if self.eval_every < 1 or self.eval_last < 0 or self.eval_batch_size < 1:
            raise UserError("eval_every and eval_batch_size must be >= 1 and eval_last >= 0")


@dataclass(frozen=True)
class TrainConfig:
    """The flags of `fedgmh train` (their defaults are the CLI's)."""

    dataset: str
    root: str
    partition: str
    algorithm: str
    rounds: int
    join_ratio: float = 0.2
    local_epochs: int = 2
    batch_size: int = 100
    lr: float = 0.01
    seed: int = 0
    device: str = "auto"
    threads: int | None = None
    overrides: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        hints = get_type_hints(TrainConfig)
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if not _of_type(value, hints[f.name]):
                raise UserError(f"{f.name} must be {_type_text(hints[f.name])}, got {value!r}")
        checks = [
            (self.rounds >= 1, f"rounds must be >= 1 (a run of 0 rounds would record an untrained model), got {self.rounds}"),
            (0 < self.join_ratio <= 1, f"join ratio must be in (0, 1], got {self.join_ratio}"),
            (self.local_epochs >= 1, f"local epochs must be >= 1, got {self.local_epochs}"),
            (self.batch_size >= 1, f"batch size must be >= 1, got {self.batch_size}"),
            (math.isfinite(self.lr) and self.lr > 0, f"learning rate must be a finite number > 0, got {self.lr}"),
            (self.threads is None or self.threads >= 1, f"threads must be >= 1, got {self.threads}"),
            (0 <= self.seed < 2**32, f"seed must be in 0..{2**32 - 1} (numpy's seed range), got {self.seed}"),
        ]
        for ok, message in checks:
            if not ok:
                raise UserError(message)


def _of_type(value: Any, kind: Any) -> bool:
    """Whether `value` is of type `kind` (int, float, str, X | None, dict[str, ...]); an int is a
    float too, a bool neither."""
    if get_origin(kind) in (Union, UnionType):
        return any(_of_type(value, part) for part in get_args(kind))
    if kind is type(None):
        return value is None
    if get_origin(kind) is dict:
        return isinstance(value, dict) and all(isinstance(key, str) for key in value)
    if isinstance(value, bool):
        return kind is bool
    return isinstance(value, (int, float) if kind is float else kind)


def _type_text(kind: Any) -> str:
    if get_origin(kind) in (Union, UnionType):
        return " or ".join(_type_text(part) for part in get_args(kind))
    names = {int: "a whole number", float: "a number", str: "text", bool: "true or false", type(None): "empty"}
    return names.get(kind, "a mapping" if get_origin(kind) is dict else str(kind))


def parse_overrides(pairs: list[str]) -> dict[str, str]:
    """['beta=0.3', 'drop_last=true'] -> {'beta': '0.3', 'drop_last': 'true'}; a key given twice is
    refused (which of its values was meant?)."""
    result: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UserError(f"--set expects KEY=VALUE, got {pair!r}")
        if key in result:
            raise UserError(f"--set {key} is given more than once ({result[key]!r} and {value.strip()!r}); give each key once")
        result[key] = value.strip()
    return result


def selects_a_client(num_clients: int, join_ratio: float) -> bool:
    """Whether rounds of `join_ratio` draw at least one of `num_clients` clients (`fedgmh train`
    refuses a run whose rounds draw none; the workflow's plan refuses its config)."""
    return num_clients * join_ratio >= 1


def _convert(cls: type, name: str, kind: type, raw: Any) -> Any:
    if not isinstance(raw, str):
        if kind is float and isinstance(raw, (int, float)) and not isinstance(raw, bool):
            raw = str(float(raw))
        elif isinstance(raw, kind):
            return raw
        else:
            raw = str(raw)
    try:
        if kind is bool:
            word = raw.lower()
            if word in TRUE_WORDS | FALSE_WORDS:
                return word in TRUE_WORDS
            raise ValueError
        value = kind(raw)
        if kind is float and not math.isfinite(value):
            raise ValueError
        return value
    except ValueError:
        expected = "a finite float" if kind is float else f"a value of type {kind.__name__}"
        raise UserError(f"option {name}={raw!r}: expected {expected}") from None


def build_options(cls: type, values: dict[str, Any]) -> Any:
    """Instantiate the options dataclass `cls` from strings (or typed values), with clear errors."""
    hints = get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for name, raw in values.items():
        if name not in fields:
            raise UserError(f"unknown option {name!r}{did_you_mean(name, fields)}; known: {', '.join(sorted(fields)) or 'none'}")
        value = unalias(fields[name], _convert(cls, name, hints[name], raw))
        choices = fields[name].metadata.get("choices")
        if choices and value not in choices:
            raise UserError(f"option {name}={value!r}: choose one of {', '.join(choices)}")
        kwargs[name] = value
    return cls(**kwargs)


def option_names(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}
