"""The batched step's SGD update fused into multi-tensor kernels (`vectorised._sgd_step`): the same
floats as the update one tensor at a time behind a mask of the clients that move."""

import dataclasses

import pytest
import torch
from conftest import make_federation

from fedgmh.algorithms import get_algorithm
from fedgmh.engine import play_round, vectorised
from fedgmh.train import resolve_options

CLIENTS = [[0, 1, 2] * 5 + [1], [2, 0], [1, 0] * 4, [0, 2, 1, 0], [2, 1] * 3]


def test_the_fused_update_gives_the_floats_of_the_masked_update_one_tensor_at_a_time():
    gen = torch.Generator().manual_seed(0)
    shapes = [(5, 3, 2, 2), (5, 7), (5,)]
    params = [torch.randn(*s, generator=gen) for s in shapes]
    grads = [torch.randn(*s, generator=gen) for s in shapes]
    lrs = torch.rand(5, generator=gen)
    moves = torch.tensor([True, False, True, True, False])
    reference = [torch.where(moves.view(-1, *[1] * (p.dim() - 1)), p - lrs.view(-1, *[1] * (p.dim() - 1)) * g, p)
                 for p, g in zip(params, grads)]
    everyone = [p - lrs.view(-1, *[1] * (p.dim() - 1)) * g for p, g in zip(params, grads)]
    fused, masked = [p.clone() for p in params], [p.clone() for p in params]
    vectorised._sgd_step(fused, grads, lrs, None)
    vectorised._sgd_step(masked, grads, lrs, moves)
    assert all(torch.equal(a, b) for a, b in zip(fused, everyone))
    assert all(torch.equal(a, b) for a, b in zip(masked, reference))
    vectorised._sgd_step([], [], lrs, None)  # no parameter trains in a phase: nothing to do


@pytest.mark.parametrize(("name", "overrides"), [("fedavg", {}), ("fedprox", {}), ("fedgmh", {}), ("fedrod", {}), ("ditto", {})])
def test_batched_training_with_the_fused_update_is_bit_identical_to_the_masked_update(name, overrides, monkeypatch):
    """float32; the masked update (`torch.where` over the clients with samples) is what the step did
    for every batch before it knew on the host that no batch is empty."""
    results = []
    for masked in (False, True):
        if masked:
            layout = vectorised._layout
            monkeypatch.setattr(vectorised, "_layout", lambda *a: dataclasses.replace(layout(*a), empty_batch=True))
        options, _ = resolve_options(name, overrides)
        fed = make_federation(CLIENTS, num_classes=3, batch_size=3, local_epochs=2, lr=0.1, vectorise="on")
        algorithm = get_algorithm(name)(fed, options)
        play_round(fed, algorithm, 0, [0, 1, 2, 3, 4], evaluate=False)
        results.append([algorithm.eval_params(c) for c in range(fed.num_clients)])
    for fused, masked in zip(*results):
        assert all(torch.equal(fused[k], masked[k]) for k in fused)
