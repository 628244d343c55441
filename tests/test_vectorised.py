"""The vectorised training path (all selected clients in one vmap step) against the sequential one."""

import dataclasses

import pandas as pd
import pytest
import torch

from conftest import batched_plain_sgd, make_federation
from fedgmh.algorithms import base, get_algorithm
from fedgmh.cards import algorithm_names
from fedgmh.algorithms.averaging import FedAvg
from fedgmh.algorithms.decoupled import mmd
from fedgmh.engine import Phase, batch_mean, local_train, play_round, proximal_hook, run_rounds, train_clients
from fedgmh.errors import UserError
from fedgmh.train import resolve_options
from fedgmh.engine.vectorised import train_phases_many

# unequal client sizes (partial last batches, clients running out of batches early) and a
# client with fewer samples than one batch
CLIENTS = [[0, 1, 0, 1, 2, 2, 1, 0, 1], [1, 2, 2], [0, 2, 2, 1, 0, 0, 1], [2], [0, 0, 2, 1, 1]]

# every algorithm, with settings under which each of its seams changes the training (a proximal
# weight of 0 would hide a wrong anchor), and the PFLlib variants that take other paths (drop_last,
# Gumbel noise, a detached proximal term, fixed batch order, ...)
# FedCAC: at tau 0.5 one float32 last-digit difference flips an activation of client 2 here (1.6e-5
# apart after training; 5e-17 in float64), so the one-training comparison takes another share
STRONG = {"fedprox": {"mu": 0.5}, "ditto": {"mu": 0.5, "plocal_epochs": 2}, "fedrep": {"plocal_epochs": 2}, "fedamp": {"lamda": 0.5},
          "fedcac": {"tau": 0.75}}
CASES = [(name, STRONG.get(name, {})) for name in algorithm_names()] + [
    ("fedcp", {"policy": "gumbel"}),
    *[(name, {"preset": "official"}) for name in ("ditto", "fedamp", "fedcp", "fedfomo", "fedprox", "fedrep", "fedrod", "fedgh", "fedgmh")],
    # Per-FedAvg's meta-step inside its loss (nested torch.func.grad under vmap): second order,
    # Hessian-free (a small beta: HF's step on these random images diverges at beta = lr), PFLlib's double training
    ("perfedavg", {"order": "exact"}), ("perfedavg", {"order": "hf", "beta": 0.002}), ("perfedavg", {"preset": "official"}),
]
IDS = [name + "".join(f"-{k}={v}" for k, v in overrides.items()) for name, overrides in CASES]


def _close(a, b, atol=1e-5):
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=atol)


def _same_state(a, b, path="state", atol=1e-5):
    """Tensors within `atol` (booleans and integers exactly), everything else equal, recursively."""
    if isinstance(a, torch.Tensor):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=atol, msg=lambda m: f"{path}: {m}")
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            _same_state(a[k], b[k], f"{path}[{k!r}]", atol)
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _same_state(x, y, f"{path}[{i}]", atol)
    else:
        assert a == b, path


def _twins(name, overrides, **fed_kwargs):
    """Two identical algorithms on identical federations (sequential path)."""
    options, engine = resolve_options(name, overrides)
    kwargs = dict(num_classes=3, batch_size=3, local_epochs=2, lr=0.1, drop_last=engine.drop_last, lr_decay=engine.lr_decay, vectorise="off")
    feds = [make_federation(CLIENTS, **{**kwargs, **fed_kwargs}) for _ in range(2)]
    return [get_algorithm(name)(fed, options) for fed in feds]


def _vectorise(algorithm, mode="on"):
    algorithm.fed.options = dataclasses.replace(algorithm.fed.options, vectorise=mode)


def _sequential_against_batched(client_labels, clients, **engine):
    """Two equal federations (different learning rates per client): `clients` trained one by one in
    the first and in one batched step in the second give the same parameters, samples and losses."""
    feds = [make_federation(client_labels, batch_size=3, local_epochs=2, lr=0.2, **engine) for _ in range(2)]
    for fed in feds:
        fed.participations[:] = [0, 1, 3, 2, 0]
    start = feds[0].initial_params()
    sequential = [local_train(feds[0], start, c) for c in clients]
    batched = batched_plain_sgd(feds[1], [start] * len(clients), clients)
    for s, b in zip(sequential, batched):
        _close(s.params, b.params)
        assert b.num_samples == s.num_samples
        assert b.loss_sum == pytest.approx(s.loss_sum, rel=1e-4, abs=1e-6)
    return feds, start, batched


@pytest.mark.parametrize("drop_last", [False, True])
def test_batched_plain_sgd_matches_sequential_local_train(drop_last):
    clients = [0, 2, 3, 4]
    feds, start, batched = _sequential_against_batched(CLIENTS, clients, drop_last=drop_last)
    # the parameters really moved (by different amounts per client), and the generator advanced alike
    assert not torch.equal(batched[0].params["body.0.weight"], start["body.0.weight"])
    assert torch.equal(feds[0].generator.get_state(), feds[1].generator.get_state())


def test_a_client_without_batches_keeps_its_parameters_even_with_a_gradient_hook():
    fed = make_federation(CLIENTS, batch_size=3, drop_last=True)  # client 3 (one sample) has no full batch
    start = fed.initial_params()
    anchor = {k: v + 1.0 for k, v in start.items()}  # a proximal pull alone would move every parameter
    phases = [[Phase(start, grad_hook=proximal_hook(0.5), extra={"anchor": anchor})] for _ in range(2)]
    (alone,), (trained,) = train_phases_many(fed, phases, [3, 0])
    assert alone.num_samples == 0 and trained.num_samples == 9
    for k in start:
        assert torch.equal(alone.params[k], start[k])
        assert alone.params[k].data_ptr() != trained.params[k].data_ptr()  # own storage, not a view


# clients of 1 to 40 samples (1 to 14 batches of 3 per epoch): the active set shrinks to one client
SKEWED = [[0, 1, 2] * 13 + [1], [2], [1, 0] * 5, [0, 2, 1, 0], [2, 1] * 8]


@pytest.mark.parametrize("clients", [[0, 1, 2, 3, 4], [1, 3, 2, 4, 0], [0, 4, 2, 3, 1]],
                         ids=["mixed", "fewest_first", "most_first"])
def test_each_step_trains_only_the_clients_that_still_have_a_batch(clients):
    """Clients of very unequal sizes, in every order: the batched step gives the client-by-client
    results, executes no step of a client that has run out of batches (only its partial batches
    pad), and counts the sample passes."""
    feds, _, _ = _sequential_against_batched(SKEWED, clients)
    sizes = [len(SKEWED[c]) for c in clients]
    steps = [2 * -(-size // 3) for size in sizes]  # E = 2, batches of 3
    assert feds[1].sample_passes.record() == {"useful": 2 * sum(sizes), "executed": 3 * sum(steps),
                                              "useful_share": 2 * sum(sizes) / (3 * sum(steps))}
    assert feds[0].sample_passes.record()["useful_share"] == 1.0  # client by client nothing pads
    assert torch.equal(feds[0].generator.get_state(), feds[1].generator.get_state())


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                                               reason="needs a CUDA GPU"))])
def test_index_lists_reach_the_device_with_their_values_and_dtype(device):
    """`to_device`: on a GPU through pinned memory without blocking, the same values as a plain copy."""
    from fedgmh.engine.federation import to_device

    device = torch.device(device)
    for values, dtype in (([3, 0, 2], torch.long), ([0.1, 0.099], torch.float32), ([], torch.long)):
        moved = to_device(values, device, dtype)
        assert moved.device.type == device.type and torch.equal(moved.cpu(), torch.tensor(values, dtype=dtype))
    drawn = torch.randn(4, 3)
    assert torch.equal(to_device(drawn, device).cpu(), drawn)


def test_the_step_order_puts_the_clients_with_most_steps_first():
    from fedgmh.engine.vectorised import _step_order

    batches = lambda n: [torch.zeros(1)] * n  # noqa: E731
    assert _step_order([batches(2), batches(5), batches(0), batches(5), batches(1)]) == ([1, 3, 0, 4, 2], [4, 3, 2, 2, 2])
    assert _step_order([]) == ([], [])


@pytest.mark.parametrize(("name", "overrides"), CASES, ids=IDS)
def test_one_local_training_matches_the_sequential_path(name, overrides, monkeypatch):
    """After one sequential round (so that clients' models, clouds, downloads differ), the same
    round's local training of four clients, client by client and batched: the same results and
    the same algorithm state (parameters within 1e-5), the same random numbers drawn."""
    _compare_one_local_training(name, overrides, monkeypatch)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize(("name", "overrides"), CASES, ids=IDS)
def test_on_cuda_every_algorithm_batches_as_it_trains_client_by_client(name, overrides, monkeypatch):
    """The comparison above on a GPU, in plain fp32 without deterministic cuDNN (see the next test
    for why): every algorithm's batched step, not only the shared local training."""
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", False)
    _compare_one_local_training(name, overrides, monkeypatch, atol=1e-4, device="cuda")


def _compare_one_local_training(name, overrides, monkeypatch, atol=1e-5, **fed_kwargs):
    sequential, batched = _twins(name, overrides, **fed_kwargs)
    for algorithm in (sequential, batched):
        play_round(algorithm.fed, algorithm, 0, [0, 1, 2, 4], evaluate=False)
    _vectorise(batched)
    selected = [4, 0, 3, 2]
    results = []
    for algorithm in (sequential, batched):
        algorithm.send(1, selected)
        results.append(train_clients(algorithm.fed, algorithm, 1, selected))
        monkeypatch.setattr(base, "train_phases", lambda *args: pytest.fail("trained client by client"))
    for s, b in zip(*results):
        _close(s.params, b.params, atol=atol)
        assert b.num_samples == s.num_samples
        assert b.loss_sum == pytest.approx(s.loss_sum, rel=1e-4, abs=1e-6)
    _same_state(sequential.state(), batched.state(), atol=atol)
    assert torch.equal(sequential.fed.generator.get_state(), batched.fed.generator.get_state())
    assert sequential.fed.channel.take_round() == batched.fed.channel.take_round()


# whole runs of the PFLlib variants are slow checks (`-m slow`): their local training is compared above
RUN_CASES = [pytest.param(name, overrides, id=i, marks=[pytest.mark.slow] if overrides.get("preset") else [])
             for (name, overrides), i in zip(CASES, IDS)]


@pytest.mark.parametrize(("name", "overrides"), RUN_CASES)
def test_vectorised_runs_give_the_sequential_metrics(name, overrides, float64):
    runs = {}
    for mode in ("off", "on"):
        algorithm = _twins(name, overrides)[0]
        _vectorise(algorithm, mode)
        calls = []
        original = algorithm.train_client
        algorithm.train_client = lambda rnd, client, f=original: calls.append(client) or f(rnd, client)
        runs[mode] = pd.DataFrame(run_rounds(algorithm.fed, algorithm, rounds=3, join_ratio=0.6)).drop(columns="seconds")
        assert bool(calls) == (mode == "off")  # "on" never trains client by client
    pd.testing.assert_frame_equal(runs["on"], runs["off"], check_exact=False, rtol=1e-3, atol=1e-4)


def test_vectorise_on_stops_an_algorithm_that_must_train_client_by_client_before_training():
    class OwnLoop(FedAvg):
        """An algorithm with its own train_client: the batched path cannot know what it does."""

        name = "own_loop"

        def train_client(self, rnd, client):
            return super().train_client(rnd, client)

    options = resolve_options("fedavg", {})[0]
    fed = make_federation(CLIENTS, num_classes=3, vectorise="on")
    algorithm = OwnLoop(fed, options)
    state = fed.generator.get_state()
    with pytest.raises(UserError, match="vectorise=on: own_loop cannot .* its own train_client") as error:
        run_rounds(fed, algorithm, rounds=2, join_ratio=0.6)
    assert "\n" not in str(error.value)
    assert torch.equal(fed.generator.get_state(), state) and not fed.participations.any()  # nothing trained
    for mode in ("auto", "off"):  # these train it client by client, as before
        fed = make_federation(CLIENTS, num_classes=3, vectorise=mode)
        assert run_rounds(fed, OwnLoop(fed, options), rounds=1, join_ratio=0.6)


def test_every_algorithm_may_train_batched_in_both_presets():
    for name in algorithm_names():
        for preset in ("paper", "official"):
            options, engine = resolve_options(name, {"preset": preset})
            algorithm = get_algorithm(name)(make_federation(CLIENTS, num_classes=3, drop_last=engine.drop_last), options)
            assert algorithm.why_sequential() is None, (name, preset)


def test_phases_that_differ_in_more_than_their_extra_tensors_are_refused():
    fed = make_federation(CLIENTS, batch_size=3)
    start = fed.initial_params()
    anchors = [{k: v + i for k, v in start.items()} for i in range(2)]
    # a per-client anchor captured by the hook instead of passed as extra: the batched path would
    # use the first client's for all
    hooks = [lambda name, p, g, extra, a=a: g + (p - a[name]) for a in anchors]
    captured = [[Phase(start, grad_hook=hook)] for hook in hooks]
    with pytest.raises(ValueError, match="per-client values belong in Phase.extra"):
        train_phases_many(fed, captured, [0, 1])
    closures = [[Phase(start, grad_hook=(lambda a: lambda name, p, g, extra: g + (p - a[name]))(a))] for a in anchors]
    with pytest.raises(ValueError, match="per-client values belong in Phase.extra"):
        train_phases_many(fed, closures, [0, 1])
    with pytest.raises(ValueError, match="per-client values belong in Phase.extra"):
        train_phases_many(fed, [[Phase(start, epochs=1)], [Phase(start, epochs=2)]], [0, 1])


def test_masked_losses_are_the_losses_of_the_real_samples():
    values, mask = torch.tensor([1.0, 3.0, float("inf")]), torch.tensor([1.0, 1.0, 0.0])
    assert batch_mean(values, mask).item() == 2.0  # a padded sample's inf stays out
    assert batch_mean(values[:2], None).item() == 2.0
    assert batch_mean(values, torch.zeros(3)).item() == 0.0  # no real sample: nothing to learn from
    x, y = torch.randn(5, 4), torch.randn(5, 4)
    mask = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0])
    real = mask.bool()
    torch.testing.assert_close(mmd(x, y, mask), mmd(x[real], y[real]))
    assert mmd(x, y, torch.zeros(5)).item() == 0.0


def test_auto_selects_the_vectorised_path_only_on_cuda():
    assert make_federation(CLIENTS).vectorised is False  # CPU, vectorise=auto
    assert make_federation(CLIENTS, vectorise="on").vectorised is True


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_cuda_auto_vectorises_and_matches_the_sequential_path(monkeypatch):
    """The same arithmetic on CUDA, in plain fp32 (tf32 off, as `fedgmh train` by default). With
    `cudnn.deterministic` (what `fedgmh train` sets, for run-to-run identity) the sequential path's
    first-convolution weight gradient comes from a less precise deterministic cuDNN algorithm
    (~1e-3 relative on an H100), so the paths are compared here without it."""
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", False)
    clients = [0, 2, 3, 4]
    feds = []
    for _ in range(2):
        fed = make_federation(CLIENTS, batch_size=3, local_epochs=2, lr=0.2, device="cuda")
        fed.participations[:] = [0, 1, 3, 2, 0]
        feds.append(fed)
    assert feds[0].vectorised  # vectorise=auto on CUDA
    start = feds[0].initial_params()
    sequential = [local_train(feds[0], start, c) for c in clients]
    batched = batched_plain_sgd(feds[1], [start] * len(clients), clients)
    for s, b in zip(sequential, batched):
        _close(s.params, b.params, atol=1e-4)
        assert b.num_samples == s.num_samples


# --- conv=unfold: convolutions as im2col + one matrix product (a batched GEMM under vmap) -------------


@pytest.mark.parametrize("shape", [dict(kernel_size=5), dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=(3, 2), dilation=2, bias=False)])
def test_an_unfolded_convolution_computes_what_conv2d_does(shape):
    from fedgmh.model import UnfoldConv2d

    torch.manual_seed(0)
    conv = torch.nn.Conv2d(4, 6, **shape)
    unfolded = UnfoldConv2d(4, 6, **shape)
    unfolded.load_state_dict(conv.state_dict())
    x = torch.randn(3, 4, 11, 9, requires_grad=True)
    outs = [layer(x) for layer in (conv, unfolded)]
    torch.testing.assert_close(outs[1], outs[0], rtol=1e-5, atol=1e-5)
    grads = [torch.autograd.grad(out.square().sum(), [x, *layer.parameters()]) for out, layer in zip(outs, (conv, unfolded))]
    for a, b in zip(*grads):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-4)


def test_unfolding_keeps_the_models_parameters_and_refuses_what_it_cannot_compute():
    from fedgmh.model import FedAvgCNN, UnfoldConv2d, use_unfold_convolutions

    model = FedAvgCNN(3, 10, 32)
    before = dict(model.named_parameters())
    use_unfold_convolutions(model)
    assert dict(model.named_parameters()) == before  # the same names and the very same tensors
    assert [type(m) for m in model.body if isinstance(m, torch.nn.Conv2d)] == [UnfoldConv2d, UnfoldConv2d]
    assert type(make_federation(CLIENTS, conv="unfold").model.body[3]) is UnfoldConv2d
    assert type(make_federation(CLIENTS).model.body[3]) is torch.nn.Conv2d  # the default: torch's conv2d
    with pytest.raises(ValueError, match="without groups"):
        use_unfold_convolutions(torch.nn.Sequential(torch.nn.Conv2d(4, 4, 3, groups=2)))
    with pytest.raises(UserError, match="conv='gemm': choose one of direct, unfold"):
        resolve_options("fedavg", {"conv": "gemm"})


UNFOLD_CASES = [("fedavg", {}), ("fedgmh", {}), ("fedprox", STRONG["fedprox"]), ("fedcp", {}), ("fedrep", STRONG["fedrep"])]


def _compare_unfolded_batched_training(name, overrides, monkeypatch, atol=1e-5, **fed_kwargs):
    """One round's local training of four clients: client by client with torch's conv2d, and batched
    with conv=unfold (which must not call conv2d); parameters, losses and state within `atol`."""
    from fedgmh.model import use_unfold_convolutions

    sequential, batched = _twins(name, overrides, **fed_kwargs)
    for algorithm in (sequential, batched):
        play_round(algorithm.fed, algorithm, 0, [0, 1, 2, 4], evaluate=False)
    _vectorise(batched)
    use_unfold_convolutions(batched.fed.model)
    results = []
    for algorithm in (sequential, batched):
        algorithm.send(1, [4, 0, 3, 2])
        results.append(train_clients(algorithm.fed, algorithm, 1, [4, 0, 3, 2]))
        monkeypatch.setattr(torch.nn.functional, "conv2d", lambda *a, **k: pytest.fail("torch's conv2d used"))
    for s, b in zip(*results):
        _close(s.params, b.params, atol=atol)
        assert b.loss_sum == pytest.approx(s.loss_sum, rel=1e-4, abs=1e-6)
    _same_state(sequential.state(), batched.state(), atol=atol)


@pytest.mark.parametrize(("name", "overrides"), UNFOLD_CASES, ids=[n for n, _ in UNFOLD_CASES])
def test_batched_training_with_unfolded_convolutions_matches_client_by_client_training(name, overrides, monkeypatch):
    _compare_unfolded_batched_training(name, overrides, monkeypatch)


def test_a_run_with_unfolded_convolutions_gives_the_metrics_of_torchs_conv2d(float64):
    runs = []
    for engine in ({"vectorise": "off"}, {"vectorise": "on", "conv": "unfold"}):
        options, _ = resolve_options("fedgmh", {})
        fed = make_federation(CLIENTS, num_classes=3, batch_size=3, local_epochs=2, lr=0.1, **engine)
        runs.append(pd.DataFrame(run_rounds(fed, get_algorithm("fedgmh")(fed, options), rounds=3, join_ratio=0.6)).drop(columns="seconds"))
    pd.testing.assert_frame_equal(runs[1], runs[0], check_exact=False, rtol=1e-3, atol=1e-4)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize(("name", "overrides"), UNFOLD_CASES, ids=[n for n, _ in UNFOLD_CASES])
def test_on_cuda_batched_training_with_unfolded_convolutions_matches_client_by_client_training(name, overrides, monkeypatch):
    """As the CPU test, on a GPU in plain fp32, to 1e-4; without deterministic cuDNN, whose algorithm
    for the sequential path's first weight gradient is less precise (see above)."""
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", False)
    _compare_unfolded_batched_training(name, overrides, monkeypatch, atol=1e-4, device="cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_cuda_a_run_with_unfolded_convolutions_repeats_bit_for_bit(monkeypatch):
    """conv=unfold is a candidate for the GPU default only if it keeps run-to-run identity (as
    `fedgmh train` sets it up: deterministic cuDNN, TF32 off)."""
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", True)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    runs = []
    for _ in range(2):
        options, _ = resolve_options("fedgmh", {})
        fed = make_federation(CLIENTS, num_classes=3, batch_size=3, local_epochs=2, lr=0.1, device="cuda", conv="unfold")
        runs.append(pd.DataFrame(run_rounds(fed, get_algorithm("fedgmh")(fed, options), rounds=3, join_ratio=0.6)).drop(columns="seconds"))
    pd.testing.assert_frame_equal(runs[1], runs[0], check_exact=True)
