"""The engine every algorithm runs on, in rooms: the federation (`federation`: the run's fixed data
and its views), seeds (`seeds`), local training (`training`), all chosen clients' local training in
one vmap step (`vectorised`), evaluation (`evaluation`; in a few vmap passes: `batched_evaluation`, by the
test splits' buckets of `eval_buckets`), checkpoints (`checkpoint`), the float arithmetic on CUDA
(`numerics`), the round loop (`rounds`) and several runs' batched steps shared (`group`); `contract` types what the engine calls on
an algorithm. Each name other modules use is re-exported here: `from fedgmh.engine import X`.
A test that replaces an engine function patches it in its room (e.g. `fedgmh.engine.rounds.play_round`).
"""

from fedgmh.engine.checkpoint import Checkpoint, pack, rows_digest, unpack
from fedgmh.engine.contract import EngineAlgorithm, RoundHooks, Trainable
from fedgmh.engine.evaluation import EvalCache, can_stack, evaluate_clients, predict, should_evaluate, summed_loss, with_label_prior
from fedgmh.engine.federation import (
    Channel, Draw, EvaluateMany, Extra, Federation, Forward, GradHook, LocalResult, LossFn, Params, split_batches,
)
from fedgmh.engine.group import Member, RunGroup
from fedgmh.engine.numerics import cuda_flags, set_numerics
from fedgmh.engine.rounds import (
    chosen_clients, check_vectorise, evaluator, make_eval_cache, play_round, run_rounds, select_clients, train_chosen, train_clients,
)
from fedgmh.engine.seeds import EVAL_STREAM, eval_generator, mix_seed, splitmix64
from fedgmh.engine.training import (
    Diverged, Phase, batch_mean, check_trained, cross_entropy, cross_entropy_loss, divergence, local_train, proximal_hook, train_phases,
)

__all__ = [
    "Channel", "Checkpoint", "Diverged", "Draw", "EVAL_STREAM", "EngineAlgorithm", "EvalCache", "EvaluateMany", "Extra", "Federation",
    "Forward", "GradHook", "LocalResult", "LossFn", "Member", "Params", "Phase", "RoundHooks", "RunGroup", "Trainable", "batch_mean", "can_stack",
    "check_trained", "check_vectorise", "chosen_clients", "cross_entropy", "cross_entropy_loss", "cuda_flags", "divergence", "eval_generator",
    "evaluate_clients", "evaluator", "local_train", "make_eval_cache", "mix_seed", "pack", "play_round", "predict", "rows_digest",
    "run_rounds", "select_clients", "set_numerics", "should_evaluate", "split_batches", "splitmix64", "summed_loss", "train_chosen",
    "train_clients", "train_phases", "unpack", "with_label_prior",
]
