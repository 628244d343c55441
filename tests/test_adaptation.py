"""FedBABU and Per-FedAvg (adaptation.py): the tests of their specs (docs/baselines.md), on a tiny model."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from conftest import comparable, make_federation

from fedgmh import engine
from fedgmh.algorithms import get_algorithm
from fedgmh.algorithms.adaptation import momentum, split_bounds
from fedgmh.engine import Checkpoint, eval_generator, evaluate_clients, local_train, play_round, run_rounds
from fedgmh.errors import Interrupted, UserError
from fedgmh.model import is_body, is_head
from fedgmh.train import resolve_options

CLIENTS = [[0, 0, 1, 2, 1], [1, 2, 2], [0, 1, 2, 2, 0, 1, 0], [2, 2, 0, 1]]
FAST = {"fedbabu": {"finetune_epochs": "1"}}  # PFLlib's 10 epochs of fine-tuning: slow here


def build(name, client_labels=CLIENTS, fed_kwargs=None, **overrides):
    options, eng = resolve_options(name, {**FAST.get(name, {}), **overrides})
    kwargs = {"num_classes": 3, "batch_size": 2, **dataclasses.asdict(eng), **(fed_kwargs or {})}
    fed = make_federation(client_labels, **kwargs)
    return get_algorithm(name)(fed, options)


def rows_of(algorithm, rounds=3, join_ratio=0.5, seed=None, **kwargs):
    """The run's rows; `seed`: the federation's seed from here on (its client draws and evaluation
    shuffles), the data, the model and the training generator staying those it was built with."""
    if seed is not None:
        algorithm.fed.seed = seed
    return [comparable({k: v for k, v in row.items() if k != "seconds"})
            for row in run_rounds(algorithm.fed, algorithm, rounds, join_ratio, **kwargs)]


def ce(fed, params, idx):
    return F.cross_entropy(fed.forward(params, fed.images[idx]), fed.labels[idx])


def grad(fed, params, idx):
    """d CE(params; idx) / d params, params as given (new leaves)."""
    leaves = {k: v.detach().requires_grad_(True) for k, v in params.items()}
    return dict(zip(leaves, torch.autograd.grad(ce(fed, leaves, idx), list(leaves.values()))))


def first_shuffle(fed, client):
    """The order of the client's first training epoch (the run's generator, from its seed)."""
    idx = fed.train_idx[client]
    return idx[torch.randperm(len(idx), generator=torch.Generator().manual_seed(fed.seed))]


# --- both: smoke, determinism, resume, bad options, evaluation-side randomness ----------------------

CASES = [("fedbabu", {}), ("fedbabu", {"finetune_at": "every_eval", "finetune_parts": "head"}), ("perfedavg", {}),
         ("perfedavg", {"preset": "official"}), ("perfedavg", {"order": "hf", "eval_data": "epoch", "beta": "0.002"})]
IDS = [name + "".join(f"-{k}={v}" for k, v in o.items()) for name, o in CASES]


@pytest.mark.parametrize(("name", "overrides"), CASES, ids=IDS)
def test_two_round_runs_are_finite_and_deterministic(name, overrides):
    runs = [rows_of(build(name, **overrides), rounds=2) for _ in range(2)]
    assert runs[0] == runs[1]
    assert [r["round"] for r in runs[0]] == [0, 1, 2]
    assert all(0 <= r["test_acc"] <= 1 for r in runs[0]) and all(r["train_loss"] == r["train_loss"] for r in runs[0][:-1])


@pytest.mark.parametrize(("name", "overrides"), [CASES[1], CASES[2]], ids=[IDS[1], IDS[2]])
def test_results_do_not_depend_on_which_rounds_are_evaluated(name, overrides):
    """The personalisation draws from the evaluation generator: evaluating every round or every
    other one gives the same numbers in the rounds both evaluate, and the same training."""
    overrides = {**overrides, "finetune_at": "every_eval"} if name == "fedbabu" else overrides
    every, sparse = build(name, **overrides), build(name, **overrides, eval_every="2")
    rows, some = rows_of(every), rows_of(sparse)
    assert [r["round"] for r in some] == [0, 2, 3]
    assert some == [rows[0], rows[2], rows[3]]
    assert torch.equal(every.fed.generator.get_state(), sparse.fed.generator.get_state())


@pytest.mark.parametrize(("name", "overrides"), [CASES[0], CASES[3]], ids=[IDS[0], IDS[3]])
def test_a_killed_run_resumes_with_identical_metrics(tmp_path, name, overrides):
    expected = rows_of(build(name, **overrides))

    def stop(row):
        if row["round"] == 1:
            raise KeyboardInterrupt

    checkpoint = Checkpoint(tmp_path / "ck.pt", every=1, identity={"run": name})
    with pytest.raises(Interrupted):
        rows_of(build(name, **overrides), on_round=stop, checkpoint=checkpoint)
    assert rows_of(build(name, **overrides), checkpoint=checkpoint) == expected


def test_bad_options_fail_before_training():
    for name, option, value, message in [("fedbabu", "finetune_epochs", "-1", "finetune_epochs must be an integer >= 0"),
                                         ("fedbabu", "finetune_parts", "fc1", "choose one of"),
                                         ("fedbabu", "finetune_from", "first", "finetune_from.*choose one of"),
                                         ("perfedavg", "beta", "-0.1", "beta must be"),
                                         ("perfedavg", "eval_steps", "-1", "eval_steps must be an integer >= 0"),
                                         ("perfedavg", "delta", "0", "delta must be"),
                                         ("perfedavg", "order", "second", "choose one of")]:
        with pytest.raises(UserError, match=message) as refused:
            resolve_options(name, {option: value})
        assert "\n" not in str(refused.value)
    fedbabu, eng = resolve_options("fedbabu", {"preset": "official"})
    assert (fedbabu.finetune_epochs, fedbabu.finetune_parts, fedbabu.finetune_at, eng.drop_last) == (10, "all", "last", True)
    paper, official = resolve_options("perfedavg", {})[0], resolve_options("perfedavg", {"preset": "official"})[0]
    assert (paper.weighting, paper.beta_decay, paper.double_train, paper.order) == ("uniform", True, False, "first")
    assert (official.weighting, official.beta_decay, official.double_train) == ("size", False, True)


# --- FedBABU -----------------------------------------------------------------------------------------


def test_fedbabu_head_stays_the_initial_head_on_every_client_and_is_never_sent():
    algorithm = build("fedbabu", finetune_epochs="0")
    fed = algorithm.fed
    head0 = {k: v for k, v in fed.initial_params().items() if is_head(k)}
    sent = []
    upload = fed.channel.upload
    fed.channel.upload = lambda tensors: sent.append(sorted(tensors)) or upload(tensors)
    rows_of(algorithm, rounds=2, join_ratio=1.0)
    assert set(algorithm.global_params) == {k for k in fed.initial_params() if is_body(k)}
    assert algorithm.local == {} and sent and all(not any(is_head(k) for k in keys) for keys in sent)
    body0 = {k: v for k, v in fed.initial_params().items() if is_body(k)}
    assert not any(torch.equal(algorithm.global_params[k], body0[k]) for k in body0)  # the body did train
    for client in range(fed.num_clients):
        model = algorithm.eval_params(client)
        assert all(torch.equal(model[k], head0[k]) for k in head0)


def test_fedbabu_body_is_the_weighted_mean_of_bodies_trained_with_the_head_frozen():
    algorithm = build("fedbabu")
    twin = build("fedbabu").fed
    selected = [2, 0, 3]
    play_round(algorithm.fed, algorithm, 0, selected, evaluate=False)
    start = twin.initial_params()
    bodies = [local_train(twin, start, c, trainable=is_body).params for c in selected]
    sizes = torch.tensor([len(twin.train_idx[c]) for c in selected], dtype=torch.float64)
    for k, v in algorithm.global_params.items():
        expected = torch.zeros_like(v)
        for body, w in zip(bodies, (sizes / sizes.sum()).tolist()):
            expected.add_(body[k], alpha=w)
        assert torch.equal(v, expected), k
    assert all(torch.equal(body[k], start[k]) for body in bodies for k in start if is_head(k))


def test_fedbabu_fine_tunes_at_the_last_round_only_and_leaves_training_alone():
    tuned, plain = build("fedbabu", finetune_lr="0", finetune_momentum="0"), build("fedbabu", finetune_epochs="0")
    rows, base = rows_of(tuned, rounds=2), rows_of(plain, rounds=2)
    assert rows[:-1] == base[:-1]  # every round before the last: the global model, the same training
    assert torch.equal(tuned.fed.generator.get_state(), plain.fed.generator.get_state())
    fed = plain.fed
    head0 = {k: v for k, v in fed.initial_params().items() if is_head(k)}
    global_eval = evaluate_clients(fed, plain.client_params)
    assert base[-1]["test_acc"] == global_eval["test_acc"] and base[-1]["test_loss"] == global_eval["test_loss"]
    assert rows[-1]["test_loss"] != base[-1]["test_loss"]
    for client in range(fed.num_clients):  # the fine-tuned models of the last round (a heads-and-all copy each)
        model = tuned.eval_params(client)
        assert not torch.equal(model["head.weight"], head0["head.weight"])
        expected = local_train(engine_view(tuned, 2, client), tuned.client_params(client), client, epochs=1,
                               lr=tuned.fed.client_lr(client)).params
        assert all(torch.equal(model[k], expected[k]) for k in expected)


def test_fedbabu_fine_tunes_with_the_authors_budget_by_default_and_pflibs_under_official():
    """The default: the authors' budget from the final body; preset=authors: also from their best round."""
    fields = ("finetune_epochs", "finetune_lr", "finetune_momentum", "finetune_from")
    default, authors = resolve_options("fedbabu", {})[0], resolve_options("fedbabu", {"preset": "authors"})[0]
    official, eng = resolve_options("fedbabu", {"preset": "official"})
    assert [getattr(default, f) for f in fields] == [5, 1e-3, 0.9, "final"]  # not best: it selects on the test split
    assert [getattr(authors, f) for f in fields] == [5, 1e-3, 0.9, "best"]
    assert [getattr(official, f) for f in fields] + [eng.drop_last] == [10, 0.0, 0.0, "final", True]
    for option, value in [("finetune_lr", "-1"), ("finetune_momentum", "1")]:
        with pytest.raises(UserError, match=option):
            resolve_options("fedbabu", {option: value})
    tuned = build("fedbabu", finetune_epochs="2")
    rows_of(tuned, rounds=1)
    expected = local_train(engine_view(tuned, 1, 0), tuned.client_params(0), 0, epochs=2, lr=1e-3, grad_hook=momentum(0.9)).params
    assert all(torch.equal(tuned.eval_params(0)[k], expected[k]) for k in expected)


def test_momentum_steps_are_torch_sgds():
    gen = torch.Generator().manual_seed(0)
    w0, x, y = torch.randn(3, 4, generator=gen), torch.randn(6, 4, generator=gen), torch.tensor([0, 1, 2, 0, 1, 2])
    w, hook = w0.clone(), momentum(0.9)
    reference = w0.clone().requires_grad_(True)
    sgd = torch.optim.SGD([reference], lr=0.1, momentum=0.9)
    for batch in (slice(0, 3), slice(3, 6), slice(0, 6)):
        leaf = w.clone().requires_grad_(True)
        (g,) = torch.autograd.grad(F.cross_entropy(x[batch] @ leaf.T, y[batch]), [leaf])
        w = w - 0.1 * hook("w", w, g, {})
        sgd.zero_grad()
        F.cross_entropy(x[batch] @ reference.T, y[batch]).backward()
        sgd.step()
    assert torch.allclose(w, reference.detach(), atol=1e-7) and momentum(0.0) is None


@pytest.mark.parametrize(("name", "none"), [("fedbabu", {"finetune_epochs": "0"}), ("perfedavg", {"eval_steps": "0"})])
def test_the_accuracy_before_adaptation_is_recorded_beside_the_budget(name, none):
    """adaptation.csv: what the shared model itself scores at the final evaluation (= the run without adaptation)."""
    adapted, plain = build(name), build(name, **none)
    rows, base = rows_of(adapted, rounds=2), rows_of(plain, rounds=2)
    table = adapted.extra_records()["adaptation"]
    assert table["client"].tolist() == list(range(adapted.fed.num_clients))
    assert table["correct_before"].sum() / table["test_samples"].sum() == pytest.approx(base[-1]["test_acc"])
    assert rows[-1]["test_acc"] != base[-1]["test_acc"] or rows[-1]["test_loss"] != base[-1]["test_loss"]
    assert table["budget"].iloc[0] == ("1 epochs (all, lr 0.001, momentum 0.9)" if name == "fedbabu" else "1 steps on one batch (the client's lr)")
    assert plain.extra_records()["adaptation"].empty


def engine_view(algorithm, rnd, client):
    """The federation with the evaluation generator of (seed, rnd, client), built here by hand."""
    import copy

    view = copy.copy(algorithm.fed)
    view.generator = eval_generator(view.seed, rnd, client)
    return view


def test_fedbabu_trains_exactly_as_fedper_with_the_head_frozen(monkeypatch):
    babu = rows_of(build("fedbabu"), rounds=2)
    babu_plain = rows_of(build("fedbabu", finetune_epochs="0"), rounds=2)
    original = engine.local_train
    monkeypatch.setattr(engine.training, "local_train", lambda *a, **kw: original(*a, **{**kw, "trainable": is_body}))
    fedper = build("fedper")
    per = rows_of(fedper, rounds=2)
    assert babu_plain == per and babu[:-1] == per[:-1]
    head0 = {k: v for k, v in fedper.fed.initial_params().items() if is_head(k)}
    assert fedper.local and all(torch.equal(own[k], head0[k]) for own in fedper.local.values() for k in head0)


# --- FedBABU from the best round's model (finetune_from=best, the authors' main_fed.py) ---------------

FALLING = {"rounds": 5, "seed": 2}  # here the global accuracy peaks at round 2 (tied with 3), then falls


def global_rounds(**overrides):
    """The global model's metrics rows (no fine-tuning) and its body at each round's evaluation."""
    plain = build("fedbabu", finetune_epochs="0", **overrides)
    bodies, send = {}, plain.send
    plain.send = lambda rnd, selected: (bodies.__setitem__(rnd, plain.global_params), send(rnd, selected))[1]
    return rows_of(plain, **FALLING), bodies, {k: v for k, v in plain.fed.initial_params().items() if is_head(k)}


def first_best(rows, rounds):
    """The authors' pick: the first of the rounds with the highest accuracy."""
    accuracy = {r["round"]: r["test_acc"] for r in rows}
    return max(rounds, key=lambda rnd: (accuracy[rnd], -rnd))


def test_fedbabu_best_fine_tunes_from_the_body_of_the_round_with_the_best_global_test_accuracy():
    rows, bodies, head0 = global_rounds()
    last = FALLING["rounds"]
    chosen = first_best(rows, range(1, last + 1))  # round 0, the untrained model, is never a candidate
    assert chosen < last and rows[chosen]["test_acc"] > rows[-1]["test_acc"]  # the setup: the accuracy falls
    best, final = build("fedbabu", finetune_from="best"), build("fedbabu")
    best_rows, final_rows = rows_of(best, **FALLING), rows_of(final, **FALLING)
    assert best_rows[:-1] == final_rows[:-1] == rows[:-1]  # the training and the global evaluations: unchanged
    assert (best.best_round, best.best_acc) == (chosen, rows[chosen]["test_acc"])
    assert all(torch.equal(best.best_body[k], bodies[chosen][k]) for k in bodies[chosen])
    for client in range(best.fed.num_clients):
        expected = local_train(engine_view(best, last, client), {**bodies[chosen], **head0}, client, epochs=1, lr=1e-3,
                               grad_hook=momentum(0.9)).params
        model = best.eval_params(client)
        assert all(torch.equal(model[k], expected[k]) for k in expected)
        assert not torch.equal(model["head.weight"], final.eval_params(client)["head.weight"])
    table = best.extra_records()["adaptation"]  # "before": the model fine-tuning started from
    assert table["correct_before"].sum() / table["test_samples"].sum() == pytest.approx(rows[chosen]["test_acc"])
    assert table["budget"].iloc[0] == f"1 epochs (all, lr 0.001, momentum 0.9) from round {chosen} (best test acc)"


def test_fedbabu_best_chooses_among_the_evaluated_rounds_only():
    """As the authors' --test_freq: a round that is not evaluated is never kept."""
    rows, bodies, _ = global_rounds()
    sparse = build("fedbabu", finetune_from="best", eval_every="3")
    rows_of(sparse, **FALLING)
    chosen = first_best(rows, [3, FALLING["rounds"]])
    assert chosen != first_best(rows, range(1, FALLING["rounds"] + 1))
    assert sparse.best_round == chosen and all(torch.equal(sparse.best_body[k], bodies[chosen][k]) for k in bodies[chosen])


def test_fedbabu_best_at_every_evaluation_fine_tunes_from_the_best_body_so_far():
    rows, _, _ = global_rounds()
    chosen = first_best(rows, range(1, FALLING["rounds"] + 1))
    assert all(first_best(rows, range(1, r + 1)) == r for r in range(1, chosen + 1))  # the setup: each round a new best up to it
    best = rows_of(build("fedbabu", finetune_from="best", finetune_at="every_eval"), **FALLING)
    final = rows_of(build("fedbabu", finetune_at="every_eval"), **FALLING)
    assert best[: chosen + 1] == final[: chosen + 1]  # up to the best round: each round's own body
    assert all(b["test_loss"] != f["test_loss"] for b, f in zip(best[chosen + 1 :], final[chosen + 1 :]))  # after it: the kept one


def test_fedbabu_best_keeps_the_same_round_on_the_batched_paths():
    """Vectorised training and batched evaluation change sums only to float rounding: the same round is kept."""
    sequential, batched = build("fedbabu", finetune_from="best"), build("fedbabu", finetune_from="best", vectorise="on", eval_batched="true")
    assert batched.fed.options.vectorise == "on" and batched.fed.options.eval_batched
    rows, batched_rows = rows_of(sequential, **FALLING), rows_of(batched, **FALLING)
    assert (batched.best_round, batched.best_acc) == (sequential.best_round, sequential.best_acc)
    assert [r["test_acc"] for r in batched_rows] == [r["test_acc"] for r in rows]
    assert batched_rows[-1]["test_loss"] == pytest.approx(rows[-1]["test_loss"], rel=1e-4)


@pytest.mark.parametrize("finetune_at", ["last", "every_eval"])
def test_fedbabu_best_resumes_with_the_kept_body(tmp_path, finetune_at):
    """Cut after the best round and resumed, the run fine-tunes from the same body (it is in the snapshot)."""
    options = {"finetune_from": "best", "finetune_at": finetune_at}
    whole = build("fedbabu", **options)
    expected = rows_of(whole, **FALLING)

    def stop(row):
        if row["round"] == whole.best_round + 1:  # the snapshot holds rounds up to the best one
            raise KeyboardInterrupt

    checkpoint = Checkpoint(tmp_path / "ck.pt", every=1, identity={"run": "fedbabu-best"})
    with pytest.raises(Interrupted):
        rows_of(build("fedbabu", **options), on_round=stop, checkpoint=checkpoint, **FALLING)
    resumed = build("fedbabu", **options)
    assert rows_of(resumed, checkpoint=checkpoint, **FALLING) == expected
    assert resumed.best_round == whole.best_round


# --- Per-FedAvg --------------------------------------------------------------------------------------


def one_client(labels, batch_size=2, **overrides):
    """Per-FedAvg on a single client holding `labels` (lr 0.1, one local epoch)."""
    return build("perfedavg", client_labels=[labels], fed_kwargs={"batch_size": batch_size}, **overrides)


def test_split_bounds_give_the_first_pieces_the_extra_samples():
    assert [split_bounds(n, 2) for n in (4, 5, 1)] == [[2], [3], [1]]
    assert [split_bounds(n, 3) for n in (6, 4, 5)] == [[2, 4], [2, 3], [2, 4]]


def test_perfedavg_first_order_step_by_hand():
    algorithm = one_client([0, 1, 2, 1])  # one batch of 2B = 4: D and D' of 2 samples each
    fed = algorithm.fed
    w, batch, alpha = fed.initial_params(), first_shuffle(fed, 0), fed.client_lr(0)
    result = algorithm.train_client(0, 0)
    a = torch.tensor(alpha)
    adapted = {k: v - a * g for (k, v), g in zip(w.items(), grad(fed, w, batch[:2]).values())}
    outer = grad(fed, adapted, batch[2:])
    for k in w:
        assert torch.equal(result.params[k], w[k].add(outer[k], alpha=-alpha)), k
    assert result.num_samples == 4 and result.loss_sum == pytest.approx(4 * float(ce(fed, adapted, batch[2:])))
    exact = one_client([0, 1, 2, 1], order="exact").train_client(0, 0)
    assert not torch.equal(exact.params["body.0.weight"], result.params["body.0.weight"])  # FO is not MAML


def hessian_vector(fed, w, idx, v):
    names = list(w)
    return dict(zip(names, torch.autograd.functional.hvp(
        lambda *p: ce(fed, dict(zip(names, p)), idx), tuple(w.values()), tuple(v[k] for k in names))[1]))


def test_perfedavg_exact_and_hessian_free_meta_steps():
    algorithm = one_client([0, 1, 2, 1], order="exact", beta="0.05")
    fed = algorithm.fed
    w, batch, alpha, beta = fed.initial_params(), first_shuffle(fed, 0), fed.client_lr(0), 0.05
    result = algorithm.train_client(0, 0).params
    adapted = {k: v - alpha * g for (k, v), g in zip(w.items(), grad(fed, w, batch[:2]).values())}
    v = grad(fed, adapted, batch[2:])
    hv = hessian_vector(fed, w, batch[:2], v)
    for k in w:
        torch.testing.assert_close(result[k], w[k] - beta * (v[k] - alpha * hv[k]), rtol=1e-5, atol=1e-7)
    # HF on a client whose samples are all one: D'' = D, so its finite difference estimates the same H v
    same = [[1] * 6]
    runs = {}
    for order in ("exact", "hf"):
        algorithm = build("perfedavg", client_labels=same, fed_kwargs={"batch_size": 2, "drop_last": True}, order=order, delta="1e-4")
        algorithm.fed.images[:] = algorithm.fed.images[0]
        runs[order] = algorithm.train_client(0, 0)
    w = algorithm.fed.initial_params()
    assert runs["exact"].num_samples == 4 and runs["hf"].num_samples == 6  # one 2B batch, one 3B batch
    moved = max(float((runs["exact"].params[k] - w[k]).abs().max()) for k in w)
    assert moved > 1e-3
    for k in w:
        assert float((runs["hf"].params[k] - runs["exact"].params[k]).abs().max()) < 1e-3 * max(moved, 1.0)


def test_perfedavg_hessian_free_step_by_hand_with_its_own_third_batch(float64):
    """order=hf: w - beta (v - alpha (grad f(w + delta v; D'') - grad f(w - delta v; D'')) / (2 delta)),
    D'' the third piece of a 3B batch; in float64 with a small delta it is the exact H(w; D'') v."""
    algorithm = one_client([0, 1, 2, 1, 0, 2], order="hf", beta="0.05", delta="1e-5")
    fed = algorithm.fed
    w, batch, alpha = fed.initial_params(), first_shuffle(fed, 0), fed.client_lr(0)
    result = algorithm.train_client(0, 0).params
    adapted = {k: v - alpha * g for (k, v), g in zip(w.items(), grad(fed, w, batch[:2]).values())}
    v = grad(fed, adapted, batch[2:4])
    hv = hessian_vector(fed, w, batch[4:], v)
    for k in w:
        torch.testing.assert_close(result[k], w[k] - 0.05 * (v[k] - alpha * hv[k]), rtol=1e-6, atol=1e-6)


def test_perfedavg_batches_too_small_to_split_make_no_step():
    algorithm = one_client([2])  # one sample: no D'
    result = algorithm.train_client(0, 0)
    start = algorithm.fed.initial_params()
    assert all(torch.equal(result.params[k], start[k]) for k in start) and result.loss_sum == 0.0


def test_perfedavg_evaluates_one_sgd_step_on_a_seeded_train_batch():
    algorithm = build("perfedavg")
    fed = algorithm.fed
    play_round(fed, algorithm, 0, [0, 2], evaluate=False)
    w = algorithm.global_params
    play_round(fed, algorithm, 1, [1], train=False, evaluate=False)  # round 1 starts: current_round = 1
    for client in range(fed.num_clients):
        idx = fed.train_idx[client]
        batch = idx[torch.randperm(len(idx), generator=eval_generator(fed.seed, 1, client))[: fed.batch_size]]
        g = grad(fed, w, batch)
        adapted = algorithm.eval_params(client)
        assert all(torch.equal(adapted[k], w[k].add(g[k], alpha=-fed.client_lr(client))) for k in w), client
    # eval_steps=0: the averaged model itself, as FedAvg evaluates its global model
    plain = build("perfedavg", eval_steps="0")
    play_round(plain.fed, plain, 0, [0, 2], evaluate=False)
    assert all(plain.eval_params(c) is plain.global_params for c in range(plain.fed.num_clients))


def test_perfedavg_aggregation_uniform_or_by_train_size():
    merged = {}
    for weighting in ("uniform", "size"):
        algorithm = build("perfedavg", weighting=weighting)
        uploads = {}
        keep = algorithm.keep
        algorithm.keep = lambda client, params: (uploads.__setitem__(client, params), keep(client, params))[1]
        selected = [0, 1, 2]
        play_round(algorithm.fed, algorithm, 0, selected, evaluate=False)
        sizes = [len(algorithm.fed.train_idx[c]) for c in selected]  # 5, 3, 7
        weights = [1 / 3] * 3 if weighting == "uniform" else [s / sum(sizes) for s in sizes]
        for k, v in algorithm.global_params.items():
            torch.testing.assert_close(v, sum(w * uploads[c][k] for w, c in zip(weights, selected)), rtol=0, atol=1e-6)
        merged[weighting] = algorithm.global_params
    assert not torch.equal(merged["uniform"]["head.weight"], merged["size"]["head.weight"])


def test_perfedavg_official_trains_twice_per_round_with_a_fixed_beta():
    algorithm = build("perfedavg", preset="official", fed_kwargs={"lr": 0.01, "drop_last": False})
    fed = algorithm.fed
    seen = []
    start = algorithm.start_training

    def spy(rnd, client):
        phases = start(rnd, client)
        seen.append((client, int(fed.participations[client]), [float(p.extra["alpha"]) for p in phases],
                     algorithm.training_fed().client_lr(client), [float(p.extra.get("beta_factor", 1.0)) for p in phases]))
        return phases

    algorithm.start_training = spy
    rows_of(algorithm, rounds=2, join_ratio=1.0)
    assert fed.participations.tolist() == [4] * 4  # two lr-decay steps per round
    gamma = fed.options.lr_decay
    for client, k, alphas, beta, factors in seen:
        assert alphas == pytest.approx([0.01 * gamma**k, 0.01 * gamma ** (k + 1)], rel=1e-6)
        assert beta == 0.01 and factors == [1.0, 1.0]  # beta: PFLlib's initial lr, never decayed
    assert {k for _, k, *_ in seen} == {0, 2}
