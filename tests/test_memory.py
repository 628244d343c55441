"""Memory: what an algorithm keeps for N clients stays a small multiple of N models."""

import pytest
import torch

from conftest import make_federation
from fedgmh.algorithms import get_algorithm
from fedgmh.cards import algorithm_names
from fedgmh.engine import run_rounds
from fedgmh.memory import peak_rss_bytes, tensor_bytes
from fedgmh.train import resolve_options


def test_tensor_bytes_counts_shared_storage_once():
    a = torch.zeros(10)
    assert tensor_bytes({"x": a, "y": [a, a[2:5]], "z": (torch.zeros(3, dtype=torch.float64),)}) == 40 + 24
    assert tensor_bytes({"n": 3, "s": "text"}) == 0
    assert peak_rss_bytes() > 10 * 2**20


@pytest.mark.parametrize("name", algorithm_names())
def test_state_of_every_client_trained_is_a_small_multiple_of_the_models(name):
    clients = 8
    fed = make_federation([[0, 1, 2, 1]] * clients, num_classes=3)
    options, _ = resolve_options(name, {})
    algorithm = get_algorithm(name)(fed, options)
    run_rounds(fed, algorithm, rounds=2, join_ratio=1.0)  # every client trained twice
    model = tensor_bytes(fed.initial_params())
    state = tensor_bytes(algorithm.state())
    # the largest: FedAMP (each client's model and its personalised aggregate), FedFomo (models
    # plus the per-client weight rows), Ditto (personal model plus the shared global model)
    assert state <= 2.5 * clients * model, f"{name}: {state / model:.2f} models for {clients} clients"
    assert state >= 0.9 * model  # (the check sees the state at all)
