"""Engine options `numerics` (the authors' TF32 for convolutions as a named choice) and `eval_batched`
(auto: in vmap passes on CUDA): parsed, checked, applied, recorded, and without a new run identity."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import make_federation
from conftest import prepare_digits, train_args

from fedgmh.cards import resolve_options
from fedgmh.cli import main
from fedgmh.config import EngineOptions
from fedgmh.engine import Federation, batched_evaluation, cuda_flags, evaluator, set_numerics, vectorised
from fedgmh.errors import UserError
from fedgmh.runspec import run_key, same_snapshot_run


def engine(**values) -> EngineOptions:
    return resolve_options("fedavg", {k: str(v) for k, v in values.items()})[1]



@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """The embedded data set and a 4-client partition of it."""
    return prepare_digits(tmp_path_factory.mktemp("numerics"))

def test_numerics_is_parsed_and_checked():
    assert engine().numerics == "strict" and engine(numerics="pytorch").numerics == "pytorch"
    with pytest.raises(UserError, match="numerics"):
        engine(numerics="fast")


@pytest.fixture
def backend_flags():
    """torch.backends' flags put back after the test (monkeypatch cannot: cuBLAS's are not attributes)."""
    cudnn, matmuls = torch.backends.cudnn, torch.backends.cuda.matmul
    before = (cudnn.deterministic, cudnn.benchmark, cudnn.allow_tf32, matmuls.allow_tf32)
    yield
    cudnn.deterministic, cudnn.benchmark, cudnn.allow_tf32, matmuls.allow_tf32 = before


@pytest.mark.parametrize(("values", "conv", "matmul"), [
    ({}, False, False), ({"numerics": "pytorch"}, True, False), ({"tf32": "true"}, True, True),
    ({"tf32": "true", "numerics": "pytorch"}, True, True),
])
def test_the_flags_keep_cudnn_deterministic_and_turn_tf32_on_where_the_options_say(values, conv, matmul, backend_flags):
    cudnn, matmuls = torch.backends.cudnn, torch.backends.cuda.matmul
    cudnn.deterministic, cudnn.benchmark, cudnn.allow_tf32, matmuls.allow_tf32 = False, True, not conv, not matmul
    options = engine(**values)
    assert cuda_flags(options) == {"cudnn_deterministic": True, "cudnn_benchmark": False, "cudnn_tf32": conv, "matmul_tf32": matmul}
    before = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
    set_numerics(options, torch.device("cpu"))  # nothing to set on CPU
    assert (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32) == before
    set_numerics(options, torch.device("cuda"))  # the flags alone: no CUDA device is touched
    assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
    assert (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32) == (conv, matmul)


def test_eval_batched_is_auto_on_cuda_and_reads_the_former_bools():
    assert engine().eval_batched == "auto"
    assert engine(eval_batched="true").eval_batched == "on" and engine(eval_batched="False").eval_batched == "off"
    assert EngineOptions(eval_batched=True).eval_batched == "on" and EngineOptions(eval_batched=False).eval_batched == "off"
    with pytest.raises(UserError, match="eval_batched"):
        engine(eval_batched="maybe")


def test_auto_evaluates_in_passes_on_cuda_only(monkeypatch):
    fed = make_federation([[0, 1], [1, 2]])
    assert not fed.evaluates_batched and evaluator(fed, object()) is None
    assert make_federation([[0, 1]], eval_batched=True).evaluates_batched
    monkeypatch.setattr(Federation, "device", property(lambda self: torch.device("cuda")))
    assert fed.evaluates_batched and evaluator(fed, object()) is batched_evaluation.evaluate_many
    assert not make_federation([[0, 1]], eval_batched="off").evaluates_batched


def test_the_options_are_recorded_and_change_no_run_key_of_a_record_that_predates_them(setup, tmp_path):
    out = tmp_path / "run"
    assert main(train_args(setup, out, "--set", "numerics=pytorch")) == 0
    record = json.loads((out / "run.json").read_text())
    assert record["engine_options"]["numerics"] == "pytorch" and record["engine_options"]["eval_batched"] == "auto"
    older = json.loads(json.dumps(record))
    del older["engine_options"]["numerics"]
    older["engine_options"]["eval_batched"] = False  # as records before this option wrote it
    assert run_key(older)["engine_options"]["numerics"] == "strict"
    assert run_key({**older, "engine_options": {**older["engine_options"], "numerics": "strict"}}) == run_key(older)
    # a snapshot of a run under way resumes with the new default of an execution-only option
    newer = {**older, "engine_options": {**older["engine_options"], "eval_batched": "auto", "numerics": "strict"}}
    assert same_snapshot_run(older, newer) and not same_snapshot_run(older, record)
