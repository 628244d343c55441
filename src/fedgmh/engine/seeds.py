"""Seeds derived from the run's seed: a fixed, documented mix (not Python's `hash`), and the
generators of evaluation-side random numbers, independent of the training generator."""

from __future__ import annotations

import torch

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
