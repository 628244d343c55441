"""The one round loop every algorithm runs on.

Round order follows PFLlib (serverbase.py): select clients, send, evaluate ALL clients, train the
selected ones, aggregate. Round indices run 0..rounds (rounds + 1 iterations, like PFLlib); the
last iteration only evaluates, because training after the last evaluation cannot change a result.
"""

from __future__ import annotations

import math
import signal
import time
from typing import Callable

import numpy as np

from fedgmh.engine.checkpoint import Checkpoint, restore_run, snapshot_run
from fedgmh.engine.evaluation import EvalCache, evaluate_clients, should_evaluate
from fedgmh.engine.federation import Federation
from fedgmh.engine.federation import EvaluateMany, LocalResult
from fedgmh.engine.training import Diverged, check_trained
from fedgmh.errors import Interrupted, UserError
from fedgmh.stopping import sigterm_at_round_end
from fedgmh.engine import batched_evaluation, vectorised  # looked up at call time: tests count the batched passes


def train_clients(fed: Federation, algorithm, rnd: int, clients: list[int]) -> list[LocalResult]:
    """The engine's choice of how `clients` train: all in one vectorised step when the federation
    batches (`Federation.vectorised`), there are several and the algorithm allows it
    (`why_sequential`), else one after the other (`train_client`). No bookkeeping: `train_chosen`."""
    if len(clients) > 1 and fed.vectorised and algorithm.why_sequential() is None:
        plans = [algorithm.start_training(rnd, client) for client in clients]
        results = vectorised.train_phases_many(algorithm.training_fed(), plans, clients, lambda client: algorithm.draw_after_training(rnd, client))
        return [algorithm.finish_training(rnd, c, phases, res) for c, phases, res in zip(clients, plans, results)]
    return [algorithm.train_client(rnd, client) for client in clients]


def train_chosen(fed: Federation, algorithm, rnd: int, clients: list[int], *, extra: str | None = None) -> list[LocalResult]:
    """Train `clients` (`train_clients`) with the bookkeeping done once: a diverged client
    (`divergence`) raises `Diverged` naming the round and client; each client's participation count
    goes up by its result's `trainings` (one lr decay step each). `extra`: what the training is when it comes besides the round's own (e.g.
    "cluster round"): its clients then count among the round's uploads (`extra_uploads`)."""
    results = train_clients(fed, algorithm, rnd, clients) if clients else []
    where = f"round {rnd}" + (f", {extra}" if extra else "")
    for client, problem in zip(clients, check_trained(results)):
        if problem:
            raise Diverged(f"{where}, client {client}: {problem} (the model diverged; try a smaller --lr); "
                           "the run is stopped and nothing is written")
    if clients:
        fed.participations[clients] += [result.trainings for result in results]
    if extra:
        algorithm.extra_uploads += len(clients)
    return results


def evaluator(fed: Federation, algorithm) -> EvaluateMany | None:
    """The engine's choice of how clients are evaluated: `batched_evaluation.evaluate_many` (vmap passes) under
    engine option eval_batched (`Federation.evaluates_batched`: by default on CUDA), unless the algorithm
    evaluates at random (its draws follow the client-by-client order); None: one pass per client."""
    return batched_evaluation.evaluate_many if fed.evaluates_batched and getattr(algorithm, "deterministic_eval", True) else None


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
    metrics = evaluate_clients(fed, algorithm.eval_params, algorithm.forward, cache, evaluator(fed, algorithm)) if evaluate else None
    if metrics is not None and math.isnan(metrics["test_loss"]):
        raise Diverged(f"round {rnd}: the test loss is nan (the models diverged; try a smaller --lr); "
                       "the run is stopped and nothing is written")
    trained = selected if train else []
    results = train_chosen(fed, algorithm, rnd, trained)
    loss_sum = sum(result.loss_sum for result in results)
    seen = sum(result.num_samples for result in results)
    if trained:
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
    without replacement from `rng` (run_rounds' RandomState(fed.seed); tools/pflib_compare replays it)."""
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
    on_round: Callable[[dict], None] | None = None,
    checkpoint: Checkpoint | None = None,
    snapshot: dict | None = None,
    on_played: Callable[[int], None] | None = None,
) -> list[dict]:
    """The round loop shared by all algorithms; returns one metrics row per evaluated round.

    Stopped by Ctrl-C or SIGTERM (a KeyboardInterrupt), it raises `errors.Interrupted` with the
    round it stopped at and `resume_round`, the round its last checkpoint resumes from (None: no
    checkpoint was written). A checkpoint being written at that moment is left as it was (atomic).
    With a `checkpoint` that snapshots (`Checkpoint.periodic`: by rounds or by time), SIGTERM instead stops at the end of the round it
    arrives in, after snapshotting that round (`stopping`), and `resume_round` is the next round:
    a scheduler's stop loses no training. Arriving in the last training round or in the final
    evaluation, it lets the run finish. A second SIGTERM stops at once.

    Every round draws its `proposed` clients from RandomState(fed.seed) (`select_clients`: the
    Federation is the run's one source of its seed), then plays the round with the algorithm's `choose_clients(rnd, proposed)` (by default `proposed`):
    the draws, and so the checkpoints, are the same whatever an algorithm chooses.
    `fed.total_rounds` is set to `rounds` before the first round (on every start, resume included).
    `snapshot`: the checkpoint's contents when the caller has loaded them already (read once, not
    twice: a 100-client snapshot is hundreds of MB); otherwise the checkpoint is loaded here.
    `on_round(row)` is called for every evaluated round, `on_played(rnd)` after every round (progress)."""
    check_vectorise(fed, algorithm)
    fed.total_rounds = rounds
    rng = np.random.RandomState(fed.seed)
    rows: list[dict] = []
    first = 0
    cache = make_eval_cache(fed, algorithm)
    if snapshot is None and checkpoint is not None:
        snapshot = checkpoint.load()
    if snapshot is not None:
        restore_run(fed, algorithm, snapshot, rng, checkpoint.path if checkpoint is not None else "the snapshot")
        rows, first = snapshot["rows"], snapshot["next_round"]
    rnd, resume_round = first, first if snapshot is not None else None
    snapshots, stopped = checkpoint is not None and checkpoint.periodic, False
    if snapshots:
        checkpoint.start()
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
                    resume_round = snapshot_run(checkpoint, fed, algorithm, rng, rows, rnd)
                # read after the periodic snapshot, so that a SIGTERM during it counts for this round;
                # in the last training round, finishing the run (one evaluation) beats a resume
                stopped = stop_request.signum is not None and rnd < rounds - 1
                if stopped:
                    if resume_round != rnd + 1:
                        resume_round = snapshot_run(checkpoint, fed, algorithm, rng, rows, rnd)
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

