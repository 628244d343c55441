"""Which engine setting should a GPU lease train with? Measured in its first minutes, and decided.

`prepare` (here, before the lease) writes one file of at most `--budget-mib` (default 40; a device
call carries 64 MiB): the client sizes of the paper's CIFAR-100 ExDir(5, 0.5) partition (100
clients, partition seed 1, 75 % train) and the real images and labels of its first clients, as many
as the budget holds. `run` (there) then

1. speed: J runs at once (default 12, each its own process, as `jobs_per_gpu` runs share a GPU; start
   NVIDIA's MPS daemon first, `tools/lease/mps.sh`), on the real client sizes with random images, at
   the paper's protocol (20 % of the clients per round, E = 2, batch 100, every client evaluated):
   rounds/s of all J together, for fp32 (what `fedgmh train` runs by default, the evaluation in vmap
   passes included) and each lever alone (`tf32`, `numerics=pytorch` (the authors' TF32 for convolutions
   only), `conv=unfold`, `memory_format=channels_last`) and all of them combined; then fp32 with the J
   runs in processes of K (`--runs-per-job`, default 4; measured after step 2), each process's runs in
   one batched step (`engine.group`, as `fedgmh train-group` and the workflow's `runs_per_job` train them);
2. numerics: FedPer, `--numerics-rounds` (default 20) rounds at the paper's protocol on the real
   images of the prepared clients, fp32 with seeds 0, 1 and 2 and every other setting with seed 0; a
   setting passes when its final accuracy is within 2 standard deviations of fp32's seeds' mean;
3. ends with one line naming the fastest setting that passes (fp32 when none does), the
   `runs_per_job` to train with (K when grouped runs were faster, else 1) and the number of jobs
   sharing the GPU (J / K, else J). The grouped runs are measured last, for fp32 only: a failure
   there leaves the rest of the decision standing.

Every measurement is also written to `$OUT/decide.jsonl` as it is taken. `--tiny` runs the same
steps on a CPU in a minute or two (2 runs of the first 5 clients, 1 timed round, 2 rounds of numerics),
to test the script.

    python tools/lease/decide.py prepare /path/to/shared/data .lease/decide.npz     # here
    PYTHONPATH=src python3 tools/lease/decide.py run .lease/decide.npz                 # on the GPU machine
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import queue
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

#: engine options of each setting (`--set` values); fp32 is `fedgmh train`'s default
LEVERS = {"tf32": {"tf32": "true"}, "tf32_conv": {"numerics": "pytorch"}, "unfold": {"conv": "unfold"},
          "channels_last": {"memory_format": "channels_last"}}
SETTINGS = {"fp32": {}, **LEVERS, "all": {k: v for lever in LEVERS.values() for k, v in lever.items()}}
#: the paper's protocol and partition (config/config.yaml)
JOIN_RATIO, LOCAL_EPOCHS, BATCH, LR, NUM_CLASSES, SIDE = 0.2, 2, 100, 0.01, 100, 32
BASELINE_SEEDS = (0, 1, 2)


# ------------------------------------------------------------------------------ prepare (here)


def paper_partition(mirror: Path, work: Path):
    """The paper's CIFAR-100 ExDir(5, 0.5) partition and the pooled uint8 images and labels."""
    from fedgmh import data, partition

    data.download("cifar100", work, mirror=mirror)
    arrays = np.load(data.prepared_path("cifar100", work))
    images = np.concatenate([arrays["x_train"], arrays["x_test"]])
    labels = np.concatenate([arrays["y_train"], arrays["y_test"]]).astype(np.int64)
    return partition.exdir(labels, num_clients=100, classes_per_client=5, alpha=0.5, train_ratio=0.75, seed=1), images, labels


def leading_clients(train: list[np.ndarray], test: list[np.ndarray], budget_bytes: int, bytes_per_sample: int) -> int:
    """How many of the first clients' samples fit in `budget_bytes`."""
    used = np.cumsum([(len(a) + len(b)) * bytes_per_sample for a, b in zip(train, test)])
    return int(np.searchsorted(used, budget_bytes, side="right"))


def subset(part, images: np.ndarray, labels: np.ndarray, clients: int) -> dict[str, np.ndarray]:
    """The first `clients` clients' samples, re-indexed: images, labels, and each client's split sizes
    (its train samples first, then its test samples, client after client)."""
    order = [idx for c in range(clients) for idx in (part.train[c], part.test[c])]
    chosen = np.concatenate(order) if order else np.zeros(0, dtype=np.int64)
    return {"images": images[chosen], "labels": labels[chosen],
            "subset_train": np.array([len(part.train[c]) for c in range(clients)]),
            "subset_test": np.array([len(part.test[c]) for c in range(clients)])}


def prepare(mirror: Path, out: Path, budget_mib: float) -> None:
    with tempfile.TemporaryDirectory() as work:
        part, images, labels = paper_partition(mirror, Path(work))
    clients = leading_clients(part.train, part.test, int(budget_mib * 2**20), images[0].nbytes)
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez(out, sizes_train=np.array([len(a) for a in part.train]), sizes_test=np.array([len(a) for a in part.test]),
             **subset(part, images, labels, clients))
    print(f"{out}: {out.stat().st_size / 2**20:.1f} MiB, the sizes of {part.num_clients} clients "
          f"and the images of the first {clients}")


# ---------------------------------------------------------------------------------- run (there)


def load(data: str, clients: int | None) -> dict[str, np.ndarray]:
    """The prepared file, limited to its first `clients` clients (None: all) for both measurements."""
    arrays = dict(np.load(data))
    for key in ("sizes_train", "sizes_test", "subset_train", "subset_test"):
        arrays[key] = arrays[key][:clients]
    kept = int(arrays["subset_train"].sum() + arrays["subset_test"].sum())
    arrays["images"], arrays["labels"] = arrays["images"][:kept], arrays["labels"][:kept]
    return arrays


def splits(train_sizes, test_sizes) -> tuple[list, list]:
    """Consecutive index ranges: each client's train samples, then its test samples."""
    train, test, start = [], [], 0
    for n_train, n_test in zip(train_sizes, test_sizes):
        train.append(np.arange(start, start + n_train))
        test.append(np.arange(start + n_train, start + n_train + n_test))
        start += n_train + n_test
    return train, test


def set_numerics(engine, device) -> None:
    """As `fedgmh train` sets them: deterministic cuDNN, TF32 as the engine option says."""
    from fedgmh.engine import set_numerics as set_run_numerics

    set_run_numerics(engine, device)


def build(images, labels, train_sizes, test_sizes, setting: str, algorithm: str, seed: int, device, group=None):
    """A federation and its algorithm as `fedgmh train` builds them, for one setting; `group`: the
    `engine.RunGroup` whose runs train in one batched step with this one (None: alone)."""
    import torch

    from fedgmh.algorithms import get_algorithm
    from fedgmh.cards import resolve_options
    from fedgmh.engine import Federation
    from fedgmh.model import FedAvgCNN, use_unfold_convolutions

    options, engine = resolve_options(algorithm, SETTINGS[setting])
    set_numerics(engine, device)
    torch.manual_seed(seed)
    model = FedAvgCNN(3, NUM_CLASSES, SIDE).to(device)
    if engine.conv == "unfold":
        use_unfold_convolutions(model)
    train, test = splits(train_sizes, test_sizes)
    as_index = lambda a: torch.as_tensor(a, dtype=torch.long, device=device)  # noqa: E731
    fed = Federation(model=model, images=images, labels=labels, train_idx=[as_index(a) for a in train],
                     test_idx=[as_index(a) for a in test], num_classes=NUM_CLASSES, batch_size=BATCH,
                     local_epochs=LOCAL_EPOCHS, lr=LR, options=engine, seed=seed)
    fed.group = group  # before the algorithm, whose views of fed keep it
    return fed, get_algorithm(algorithm)(fed, options)


def random_images(sizes: int, seed: int, device):
    import torch

    gen = torch.Generator().manual_seed(seed)
    images = torch.randn(sizes, 3, SIDE, SIDE, generator=gen).to(device)
    return images, torch.randint(NUM_CLASSES, (sizes,), generator=gen).to(device)


def synchronize(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Rounds:
    """Plays the rounds of one run as `run_rounds` draws them, from round 0."""

    def __init__(self, fed, algorithm) -> None:
        from fedgmh.engine import make_eval_cache

        self.fed, self.algorithm, self.cache = fed, algorithm, make_eval_cache(fed, algorithm)
        self.rng, self.rnd = np.random.RandomState(fed.seed), 0

    def play(self, count: int) -> None:
        from fedgmh.engine import play_round, select_clients

        for _ in range(count):
            play_round(self.fed, self.algorithm, self.rnd, select_clients(self.rng, self.fed.num_clients, JOIN_RATIO),
                       cache=self.cache)
            self.rnd += 1
        synchronize(self.fed.device)


def speed_worker(rank: int, args, barrier, results) -> None:
    """One of the J runs: per setting, a warm-up round, then `rounds` rounds timed while all J play."""
    import torch

    torch.set_num_threads(1)
    device = torch.device(args.device)
    arrays = load(args.data, args.clients)
    images, labels = random_images(int(arrays["sizes_train"].sum() + arrays["sizes_test"].sum()), rank, device)
    for setting in args.settings:
        fed, algo = build(images, labels, arrays["sizes_train"], arrays["sizes_test"], setting, args.algorithm, rank, device)
        rounds_of = Rounds(fed, algo)
        rounds_of.play(1)
        barrier.wait(args.timeout)  # a run that failed breaks the barrier for all: the parent stops at its timeout
        start = time.perf_counter()
        rounds_of.play(args.rounds)
        results.put((setting, rank, time.perf_counter() - start))
        barrier.wait(args.timeout)


def measure_speed(args, context) -> dict[str, float]:
    """Rounds/s of all J runs together, per setting (each run's slowest counts)."""
    barrier, results = context.Barrier(args.jobs), context.Queue()
    workers = [context.Process(target=speed_worker, args=(rank, args, barrier, results), daemon=True)
               for rank in range(args.jobs)]
    for worker in workers:
        worker.start()
    times: dict[str, list[float]] = {}
    for _ in range(args.jobs * len(args.settings)):
        setting, _, seconds = results.get(timeout=args.timeout)
        times.setdefault(setting, []).append(seconds)
        if len(times[setting]) == args.jobs:
            rate = args.jobs * args.rounds / max(times[setting])
            note(args, {"phase": "speed", "setting": setting, "jobs": args.jobs, "rounds_per_s": rate})
    for worker in workers:
        worker.join(30)
    return {s: args.jobs * args.rounds / max(t) for s, t in times.items()}


def group_worker(rank: int, args, barrier, results) -> None:
    """`args.runs_per_job` runs of fp32 in one process, each in its own thread, their clients trained in
    one batched step (`engine.RunGroup`): a warm-up round, then `rounds` rounds timed while all play."""
    import threading

    import torch

    from fedgmh.engine import RunGroup

    torch.set_num_threads(1)
    device = torch.device(args.device)
    arrays = load(args.data, args.clients)
    images, labels = random_images(int(arrays["sizes_train"].sum() + arrays["sizes_test"].sum()), rank, device)
    group = RunGroup()
    runs = [Rounds(*build(images, labels, arrays["sizes_train"], arrays["sizes_test"], "fp32", args.algorithm,
                          rank * args.runs_per_job + index, device, group)) for index in range(args.runs_per_job)]

    def play_all(count: int) -> None:
        """Each run plays `count` rounds in its own thread; one that fails leaves the group at once
        (its partners would wait for it), and its error is raised here."""
        errors = []
        members = [group.member() for _ in runs]

        def play(run, member) -> None:
            try:
                run.play(count)
            except BaseException as err:  # noqa: BLE001 - raised below, in the process's own thread
                errors.append(err)
            finally:
                member.leave()

        threads = [threading.Thread(target=play, args=pair) for pair in zip(runs, members)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]

    play_all(1)
    barrier.wait(args.timeout)
    start = time.perf_counter()
    play_all(args.rounds)
    results.put(time.perf_counter() - start)
    barrier.wait(args.timeout)


def measure_grouped(args, context) -> float | None:
    """Rounds/s of `args.jobs` fp32 runs in processes of `args.runs_per_job` (None: not measured)."""
    if args.runs_per_job < 2:
        return None
    processes = max(1, args.jobs // args.runs_per_job)
    barrier, results = context.Barrier(processes), context.Queue()
    workers = [context.Process(target=group_worker, args=(rank, args, barrier, results), daemon=True)
               for rank in range(processes)]
    for worker in workers:
        worker.start()
    setting = f"fp32 runs_per_job={args.runs_per_job}"
    try:
        slowest = max(results.get(timeout=args.timeout) for _ in workers)
    except queue.Empty:  # a run failed (its process ended): the decision goes on without grouping
        note(args, {"phase": "speed", "setting": setting, "error": f"no result within {args.timeout:.0f} s"})
        return None
    finally:
        for worker in workers:
            worker.join(30)
            if worker.is_alive():
                worker.terminate()
    rate = processes * args.runs_per_job * args.rounds / slowest
    note(args, {"phase": "speed", "setting": setting, "jobs": processes * args.runs_per_job, "processes": processes,
                "rounds_per_s": rate})
    return rate


def numerics_run(job) -> tuple[str, int, float]:
    """One FedPer run on the prepared real images: its final accuracy."""
    import torch

    from fedgmh.engine import run_rounds

    data, clients, setting, seed, rounds, device_name = job
    torch.set_num_threads(1)
    device = torch.device(device_name)
    arrays = load(data, clients)
    images = torch.from_numpy(arrays["images"]).to(torch.float32).div_(255).sub_(0.5).div_(0.5).to(device)
    labels = torch.from_numpy(arrays["labels"]).to(device)
    fed, algo = build(images, labels, arrays["subset_train"], arrays["subset_test"], setting, "fedper", seed, device)
    return setting, seed, run_rounds(fed, algo, rounds, JOIN_RATIO)[-1]["test_acc"]


def measure_numerics(args, context) -> dict[tuple[str, int], float]:
    jobs = [(args.data, args.clients, "fp32", seed, args.numerics_rounds, args.device) for seed in BASELINE_SEEDS]
    jobs += [(args.data, args.clients, s, 0, args.numerics_rounds, args.device) for s in args.settings if s != "fp32"]
    with context.Pool(min(len(jobs), max(args.jobs, 1))) as pool:
        accuracies = {}
        for setting, seed, accuracy in pool.imap_unordered(numerics_run, jobs):
            accuracies[setting, seed] = accuracy
            note(args, {"phase": "numerics", "setting": setting, "seed": seed, "rounds": args.numerics_rounds,
                        "test_acc": accuracy})
    return accuracies


def decide(rates: dict[str, float], accuracies: dict[tuple[str, int], float]) -> tuple[str, list[str]]:
    """The fastest setting whose seed-0 accuracy is within 2 SDs of fp32's seeds' mean (fp32 itself
    always qualifies), and the settings that passed."""
    baseline = [accuracies["fp32", seed] for seed in BASELINE_SEEDS]
    mean, sd = statistics.mean(baseline), statistics.stdev(baseline)
    passing = [s for s in rates if s == "fp32" or abs(accuracies[s, 0] - mean) <= 2 * sd]
    return max(passing, key=rates.__getitem__), passing


def note(args, entry: dict) -> None:
    with open(Path(args.out) / "decide.jsonl", "a") as log:
        log.write(json.dumps({**entry, "device": args.device, "time_s": round(time.perf_counter() - args.started, 1)}) + "\n")
    print(json.dumps(entry), flush=True)


def run(args) -> None:
    args.started = time.perf_counter()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    context = multiprocessing.get_context("spawn")  # no fork of a process that may hold CUDA
    rates = measure_speed(args, context)
    accuracies = measure_numerics(args, context)
    grouped = measure_grouped(args, context)  # last: the decision above never waits for it
    chosen, passing = decide(rates, accuracies)
    baseline = [accuracies["fp32", seed] for seed in BASELINE_SEEDS]
    if grouped is not None and grouped > rates["fp32"]:
        jobs = max(1, args.jobs // args.runs_per_job)
        grouping = (f"runs_per_job: {args.runs_per_job} with {jobs} jobs on the GPU (fp32 grouped "
                    f"{grouped / rates['fp32']:.2f}x fp32 alone, measured for fp32 only)")
    else:
        grouping = f"runs_per_job: 1 with {args.jobs} jobs on the GPU" + ("" if grouped is None else
                                                                          f" (fp32 grouped {grouped / rates['fp32']:.2f}x fp32 alone)")
    print(f"fastest setting that passes the numerics check: {chosen} ({rates[chosen]:.2f} rounds/s, "
          f"{rates[chosen] / rates['fp32']:.2f}x fp32; accuracy {accuracies[chosen, 0]:.4f}, fp32 "
          f"{statistics.mean(baseline):.4f} +- {statistics.stdev(baseline):.4f}; passed: {', '.join(passing)}); {grouping}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="here: the data file (client sizes, real images of the first clients)")
    p.add_argument("mirror", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--budget-mib", type=float, default=40)
    p = sub.add_parser("run", help="on the GPU machine: measure, check, decide")
    p.add_argument("data")
    p.add_argument("--jobs", type=int, default=12)
    p.add_argument("--rounds", type=int, default=3, help="timed rounds per run and setting")
    p.add_argument("--numerics-rounds", type=int, default=20)
    p.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    p.add_argument("--algorithm", default="fedper", help="the runs of the speed measurement")
    p.add_argument("--runs-per-job", type=int, default=4,
                   help="fp32 runs per process in one batched step, measured after the settings (below 2: not measured)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--clients", type=int, help="only the first CLIENTS clients (default: all)")
    p.add_argument("--timeout", type=float, default=240, help="seconds to wait for a measurement")
    p.add_argument("--out", default=os.environ.get("OUT", "results/lease/out"))
    p.add_argument("--tiny", action="store_true",
                   help="a test of the script on a CPU: 2 runs of the first 5 clients, 1 timed round, 2 rounds of numerics")
    args = parser.parse_args()
    if args.command == "prepare":
        prepare(args.mirror, args.out, args.budget_mib)
        return
    if args.tiny:
        args.jobs, args.rounds, args.numerics_rounds, args.device, args.clients, args.runs_per_job = 2, 1, 2, "cpu", 5, 2
    if "fp32" not in args.settings:
        args.settings = ["fp32", *args.settings]
    run(args)


if __name__ == "__main__":
    main()
