"""The engine in rooms: the typed contract, the federation's views, the engine's helpers, and the
run record's one owner."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import make_federation

from fedgmh import engine, record, runspec, store
from fedgmh.algorithms import get_algorithm
from fedgmh.cards import algorithm_names, resolve_options
from fedgmh.engine import Diverged, EngineAlgorithm, LocalResult, train_chosen

CLIENTS = [[0, 1, 0, 1, 0, 1], [1, 2, 1, 2, 1, 2], [0, 2, 0, 2, 0, 2], [0, 1, 2, 0, 1, 2], [2, 1, 2, 1], [0, 0, 1, 1]]


def test_every_engine_room_is_short_enough_to_read_in_one_sitting():
    rooms = sorted((Path(engine.__file__).parent).glob("*.py"))
    assert len(rooms) >= 6
    assert {p.name: len(p.read_text().splitlines()) for p in rooms if len(p.read_text().splitlines()) > 350} == {}


@pytest.mark.parametrize("name", sorted(algorithm_names()))
def test_every_algorithm_fulfils_the_engine_contract(name):
    fed = make_federation(CLIENTS, num_classes=3)
    algorithm = get_algorithm(name)(fed, resolve_options(name, {})[0])
    assert isinstance(algorithm, EngineAlgorithm)


def test_an_object_without_the_training_hooks_is_not_an_engine_algorithm():
    class RoundsOnly:
        name, deterministic_eval, trained_clients_upload, extra_uploads = "x", True, True, 0

        def send(self, rnd, selected): ...

    assert not isinstance(RoundsOnly(), EngineAlgorithm)


def test_a_view_trains_on_its_own_terms_and_leaves_the_federation_unchanged():
    fed = make_federation(CLIENTS, num_classes=3, batch_size=2)
    fed.current_round = 3
    halves = [idx[: len(idx) // 2] for idx in fed.train_idx]
    view = fed.view(train_idx=halves, batch_size=1, shuffle=False)
    assert fed.batch_size == 2 and fed.train_idx[0] is not halves[0] and "shuffled_batches" not in vars(fed)
    assert [b.tolist() for b in view.shuffled_batches(0)] == [[i] for i in halves[0].tolist()]  # stored order, batches of 1
    assert view.participations is fed.participations and view.channel is fed.channel and view.generator is fed.generator
    fed.participations[0] = 2
    assert view.client_lr(0) == fed.client_lr(0)  # the lr rule reads the federation's counts
    lr_view = fed.view(lr=lambda client: 0.5, generator=torch.Generator().manual_seed(1))
    assert lr_view.client_lr(0) == 0.5 and lr_view.generator is not fed.generator and fed.client_lr(0) != 0.5
    fixed = fed.view(batches=lambda client: iter((fed.train_idx[client][:1],)))
    assert [b.tolist() for b in fixed.shuffled_batches(1)] == [fed.train_idx[1][:1].tolist()]


def test_the_federation_leaves_the_model_as_given_under_conv_unfold():
    """Swapping convolutions is the model builder's job (train.build_federation), never the Federation's."""
    from fedgmh.engine import Federation

    given = make_federation(CLIENTS, num_classes=3)
    fed = Federation(model=given.model, images=given.images, labels=given.labels, train_idx=given.train_idx,
                     test_idx=given.test_idx, num_classes=3, batch_size=4, local_epochs=1, lr=0.1,
                     options=given.options.__class__(conv="unfold"), seed=0)
    convs = [type(m) for m in fed.model.modules() if "Conv" in type(m).__name__]
    assert fed.model is given.model and convs and all(kind is torch.nn.Conv2d for kind in convs)


class _Fixed:
    """An algorithm whose clients' trainings give preset results."""

    def __init__(self, results):
        self.results, self.extra_uploads = results, 0

    def train_client(self, rnd, client):
        return self.results[client]


def test_train_chosen_does_the_bookkeeping_once():
    fed = make_federation(CLIENTS, num_classes=3)
    params = fed.initial_params()
    algorithm = _Fixed({0: LocalResult(params, 1.0, 2), 2: LocalResult(params, 2.0, 3).as_trainings(2)})
    train_chosen(fed, algorithm, 0, [0, 2])
    assert fed.participations.tolist()[:4] == [1, 0, 2, 0] and algorithm.extra_uploads == 0
    train_chosen(fed, algorithm, 1, [2], extra="cluster round")
    assert fed.participations.tolist()[:4] == [1, 0, 4, 0] and algorithm.extra_uploads == 1
    bad = _Fixed({1: LocalResult(params, float("nan"), 1)})
    with pytest.raises(Diverged, match="round 5, cluster round, client 1: the training loss is nan"):
        train_chosen(fed, bad, 5, [1], extra="cluster round")
    assert fed.participations[1] == 0


def test_the_run_record_has_one_owner(tmp_path):
    assert store.run_key is runspec.run_key and store.CONFIG_KEYS is runspec.CONFIG_KEYS
    config = {"dataset": "digits", "algorithm": "fedavg", "rounds": 1, "join_ratio": 0.5, "local_epochs": 1, "batch_size": 4,
              "lr": 0.1, "seed": 0, "threads": 1, "overrides": {}}
    algo_options, engine_options = resolve_options("fedavg", {})
    import dataclasses

    identity = {"config": {k: v for k, v in config.items() if k != "threads"}, "algorithm_options": dataclasses.asdict(algo_options),
                "engine_options": dataclasses.asdict(engine_options), "partition": {"classes_per_client": 2, "alpha": 0.5},
                "fedgmh": "x", "results_version": 7}
    metrics = pd.DataFrame({"round": [0, 1], "test_acc": [0.25, 0.5], "train_loss": [1.0, np.nan]})
    run = record.new_record(config, identity, metrics, 4, {"wall_time_s": 1.5}, {"experiment": "e"})
    record.write_record(tmp_path, run, metrics, {})
    read, _ = record.load_record(tmp_path)
    assert read == run and record.check_fields(read) == []
    assert (read["best_test_acc"], read["best_round"], read["final_test_acc"]) == (0.5, 1, 0.5)
    assert runspec.RunSpec.from_record(read) == runspec.RunSpec.from_record(identity)
