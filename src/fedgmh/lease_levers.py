"""The lever measurement of a GPU lease (fedgmh.lease_device, call 1): which execution options the
runs start with.

Only options that are not in the run key (runspec.EXECUTION_OPTIONS) are measured, so that any choice
gives the records the workflow would make: `memory_format` and `conv`, alone and together. Each
setting trains one run of the lease's first algorithm on its partition's real client sizes (random
images of the dataset's shape) at its protocol: one round to warm up, then as many rounds as its
share of the time holds (at least one). Rounds per second of one run alone: a ranking of the
settings, not the rate of many runs sharing the card (the supervisor measures that).
"""

from __future__ import annotations

import time
from pathlib import Path

#: the settings measured, by name: `--set` pairs of the runs
SETTINGS = {"default": {}, "channels_last": {"memory_format": "channels_last"}, "unfold": {"conv": "unfold"},
            "channels_last+unfold": {"memory_format": "channels_last", "conv": "unfold"}}


def _word(words: list[str], flag: str) -> str:
    return words[words.index(flag) + 1]


def _federation(run: dict, files: Path, options: dict, device):
    import numpy as np
    import torch

    from fedgmh.cards import resolve_options
    from fedgmh.datasets import DATASETS
    from fedgmh.engine import Federation, set_numerics
    from fedgmh.model import FedAvgCNN, use_unfold_convolutions
    from fedgmh.partition import load_partition
    from fedgmh.algorithms import get_algorithm

    words = run["words"]
    sets = dict(pair.split("=", 1) for flag, pair in zip(words, words[1:]) if flag == "--set")
    algorithm_options, engine = resolve_options(run["algorithm"], {**sets, **options})
    set_numerics(engine, device)
    info = DATASETS[run["dataset"]]
    partition, _ = load_partition(files / run["partition"])
    sizes = [(len(a), len(b)) for a, b in zip(partition.train, partition.test)]
    total = sum(a + b for a, b in sizes)
    generator = torch.Generator().manual_seed(0)
    images = torch.randn(total, info.channels, info.height, info.width, generator=generator).to(device)
    labels = torch.randint(info.num_classes, (total,), generator=generator).to(device)
    train, test, start = [], [], 0
    for n_train, n_test in sizes:
        train.append(torch.arange(start, start + n_train, device=device))
        test.append(torch.arange(start + n_train, start + n_train + n_test, device=device))
        start += n_train + n_test
    torch.manual_seed(0)
    model = FedAvgCNN(info.channels, info.num_classes, info.height).to(device)
    if engine.conv == "unfold":
        use_unfold_convolutions(model)
    fed = Federation(model=model, images=images, labels=labels, train_idx=train, test_idx=test, num_classes=info.num_classes,
                     batch_size=int(_word(words, "--batch-size")), local_epochs=int(_word(words, "--local-epochs")),
                     lr=float(_word(words, "--lr")), options=engine, seed=0)
    return fed, get_algorithm(run["algorithm"])(fed, algorithm_options), np.random.RandomState(0)


def measure(run: dict, files: Path, seconds: float) -> dict[str, dict]:
    """setting -> {"options": its `--set` pairs, "rounds_per_s": one run's rate}."""
    import torch

    from fedgmh.engine import make_eval_cache, play_round, select_clients

    torch.set_num_threads(int(_word(run["words"], "--threads")))
    device = torch.device(_word(run["words"], "--device").split(":")[0] if torch.cuda.is_available() else "cpu")
    join_ratio = float(_word(run["words"], "--join-ratio"))
    rates = {}
    for name, options in SETTINGS.items():
        fed, algorithm, rng = _federation(run, files, options, device)
        cache = make_eval_cache(fed, algorithm)
        played, began = 0, None
        share_ends = time.perf_counter() + seconds / len(SETTINGS)
        while began is None or played < 1 or time.perf_counter() < share_ends:
            if began is None and played == 1:  # the warm-up round is not timed
                began, played = time.perf_counter(), 0
            play_round(fed, algorithm, played, select_clients(rng, fed.num_clients, join_ratio), cache=cache)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            played += 1
        timed = time.perf_counter() - began
        rates[name] = {"options": options, "rounds_per_s": played / timed}
    return rates
