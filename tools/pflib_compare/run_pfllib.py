"""Drive PFLlib (an unmodified checkout, never copied here) on the clients that export_run.py wrote.

Run with an environment that has PFLlib's packages (torch, numpy, h5py, scikit-learn, matplotlib);
it does not import fedgmh:

    python tools/pflib_compare/run_pfllib.py --pfllib PFLLIB_CHECKOUT --work WORK \
        --algorithm fedrep --rounds 5 --out WORK/pfllib_fedrep.csv [--ours RUNDIR]

It builds PFLlib's server for the algorithm with run.json's hyper-parameters (join ratio, E, batch
size, lr: the paper's 0.2, 2, 100, 0.01 unless exported otherwise) and calls its `train()`. What PFLlib would otherwise decide by
itself can be taken from our run instead, each with its own switch (monkeypatched from here):

- `--init ours|pfllib`: our initial model (WORK/initial_model.pt) or PFLlib's
  (`torch.manual_seed(0)` before building FedAvgCNN, as its main.py);
- `--selection ours|pfllib`: our client draws (run.json) or PFLlib's `np.random.choice`
  (unseeded in PFLlib; `--numpy-seed` seeds it here);
- `--shuffles ours|pfllib`: every local epoch's batch order drawn from a `torch.Generator` seeded
  with our seed, one `randperm` per pass over a client's train data in PFLlib's call order (which
  is our engine's order), the server's prototype batches of FedGH likewise, prototypes uploaded in
  ascending label order and models aggregated in selection order (PFLlib: `random.sample` order);
  or PFLlib's own DataLoader shuffles and orders;
- `--lr-decay on|off`: PFLlib's `-ld` (default off in PFLlib's main.py; the official FedGMH code and
  our engine decay by 0.99 per participation).

With all four taken from our run (`--init ours --selection ours --shuffles ours --lr-decay on`, the
default) PFLlib and `fedgmh train --set preset=official` see the same data, model, clients, batches
and learning rates, so any gap between them is a difference of the algorithms themselves.
PFLlib's per-round *training* loss (`train_metrics`, a full pass over every client's train data,
only logged) is skipped, and each client file is read once (PFLlib reads it at every use). Writes one CSV row per evaluated round: `round`, `test_acc` (for Ditto
the larger of the global and personal accuracy, as PFLlib's list of both reports; both are
columns too), `trained_test_share` (the share of test samples on clients that have trained at
least once before the round), `selected`.
"""

from __future__ import annotations

import argparse
import copy
import csv
import json
import os
import sys
import warnings
from pathlib import Path

import numpy as np
import torch

#: ours -> (PFLlib's algorithm name, server module, server class, whether main.py splits body/head)
ALGORITHMS = {
    "fedavg": ("FedAvg", "serveravg", "FedAvg", True),
    "fedper": ("FedPer", "serverper", "FedPer", True),
    "fedrep": ("FedRep", "serverrep", "FedRep", True),
    "lgfedavg": ("LG-FedAvg", "serverlg", "LG_FedAvg", True),
    "fedgh": ("FedGH", "servergh", "FedGH", True),
    "ditto": ("Ditto", "serverditto", "Ditto", False),
}


def pfllib_args(run: dict, algorithm: str, rounds: int, lr_decay: bool, device: str) -> argparse.Namespace:
    """PFLlib main.py's defaults, with run.json's hyper-parameters (the paper's unless exported otherwise)."""
    return argparse.Namespace(
        goal="fedgmh_compare", device=device, device_id="0", dataset=run["pfllib_dataset"], num_classes=run["num_classes"],
        model="CNN", batch_size=run.get("batch_size", 100), local_learning_rate=run.get("lr", 0.01),
        learning_rate_decay=lr_decay, learning_rate_decay_gamma=0.99, global_rounds=rounds, top_cnt=100,
        local_epochs=run.get("local_epochs", 2),
        algorithm=ALGORITHMS[algorithm][0], join_ratio=run["join_ratio"], random_join_ratio=False,
        num_clients=run["num_clients"], prev=0, times=1, eval_gap=1, save_folder_name="items", auto_break=False,
        dlg_eval=False, dlg_gap=100, batch_num_per_client=2, num_new_clients=0, fine_tuning_epoch_new=0,
        feature_dim=512, vocab_size=80, max_len=200, few_shot=0, client_drop_rate=0.0, train_slow_rate=0.0,
        send_slow_rate=0.0, time_select=False, time_threthold=10000, beta=0.0, lamda=1.0, mu=0.0, K=5,
        p_learning_rate=0.01, M=5, itk=4000, alphaK=1.0, sigma=1.0, alpha=1.0, plocal_epochs=1, tau=1.0,
        fine_tuning_epochs=10, dr_learning_rate=0.0, L=1.0, noise_dim=512, generator_learning_rate=0.005,
        hidden_dim=512, server_epochs=1000, localize_feature_extractor=False, server_learning_rate=1.0, eta=1.0,
        rand_percent=80, layer_idx=2, mentee_learning_rate=0.005, T_start=0.95, T_end=0.98, momentum=0.1,
        kl_weight=0.0, first_stage_bound=0, fedcross_alpha=0.99, collaberative_model_select_strategy=1,
    )


def build_model(models, run: dict, init: str, initial_path: Path):
    """PFLlib's FedAvgCNN for the dataset (its main.py's choice of `dim`), with our or its initial weights."""
    channels, height = run["image_shape"][0], run["image_shape"][1]
    side = ((height - 4) // 2 - 4) // 2
    if init == "pfllib":
        torch.manual_seed(0)  # PFLlib's main.py, before the model is built
    model = models.FedAvgCNN(in_features=channels, num_classes=run["num_classes"], dim=64 * side * side)
    if init == "ours":
        ours = torch.load(initial_path, map_location="cpu")
        theirs = list(model.state_dict())
        if len(ours) != len(theirs):
            raise SystemExit(f"initial model: {len(ours)} tensors in ours, {len(theirs)} in PFLlib's FedAvgCNN")
        state = {}
        for their_name, (our_name, tensor) in zip(theirs, ours.items()):  # same layer order
            if model.state_dict()[their_name].shape != tensor.shape:
                raise SystemExit(f"initial model: {our_name} {tuple(tensor.shape)} does not fit {their_name}")
            state[their_name] = tensor
        model.load_state_dict(state)
    return model


class SharedShuffleLoader:
    """A client's train batches, shuffled with one `randperm` per pass from the shared generator
    (our engine's `Federation.epoch_indices`), the last partial batch dropped (PFLlib's DataLoader)."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, batch_size: int, generator: torch.Generator) -> None:
        self.x, self.y, self.batch_size, self.generator = x, y, batch_size, generator

    def __iter__(self):
        order = torch.randperm(len(self.y), generator=self.generator)
        for start in range(0, len(order) - self.batch_size + 1, self.batch_size):
            batch = order[start : start + self.batch_size]
            yield self.x[batch], self.y[batch]

    def __len__(self) -> int:
        return len(self.y) // self.batch_size


class InOrder:
    """Stands in for the `random` module in PFLlib's servers: `sample` keeps the given order."""

    @staticmethod
    def sample(population, k):
        return list(population)[:k]


def patch(pfl: dict, run: dict, options: argparse.Namespace, record: dict) -> None:
    """Monkeypatch PFLlib's classes in memory (the checkout is never modified)."""
    clientbase, serverbase, data_utils = pfl["clientbase"], pfl["serverbase"], pfl["data_utils"]
    read_client_data = data_utils.read_client_data
    files: dict[tuple, list] = {}

    def cached_read(dataset, idx, is_train=True, few_shot=0):  # each client file is read once, not every round
        key = (dataset, idx, is_train, few_shot)
        if key not in files:
            files[key] = read_client_data(dataset, idx, is_train=is_train, few_shot=few_shot)
        return files[key]

    for module in (clientbase, serverbase, data_utils):
        module.read_client_data = cached_read

    def no_train_metrics(self):  # only logged by PFLlib; a full pass over all train data
        return 0.0, 1

    clientbase.Client.train_metrics = no_train_metrics
    if "clientditto" in pfl:
        pfl["clientditto"].clientDitto.train_metrics_personalized = no_train_metrics

    original_select = serverbase.Server.select_clients

    def select_clients(self):
        rnd = len(record["selected"])
        if options.selection == "ours":
            chosen = [self.clients[c] for c in run["selections"][rnd]]
        else:
            chosen = original_select(self)
        record["selected"].append([c.id for c in chosen])
        return chosen

    serverbase.Server.select_clients = select_clients

    if options.shuffles == "ours":
        generator = torch.Generator().manual_seed(run["seed"])
        cache: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

        def load_train_data(self, batch_size=None):
            if self.id not in cache:
                samples = cached_read(self.dataset, self.id, is_train=True, few_shot=self.few_shot)
                x = torch.stack([s[0] for s in samples]) if samples else torch.zeros(0)
                y = torch.stack([s[1] for s in samples]) if samples else torch.zeros(0, dtype=torch.int64)
                cache[self.id] = (x, y)
            return SharedShuffleLoader(*cache[self.id], batch_size or self.batch_size, generator)

        clientbase.Client.load_train_data = load_train_data
        for name in ("serverbase", "serverrep", "serverper", "serverlg", "serveravg", "serverditto"):
            if name in pfl and hasattr(pfl[name], "random"):
                pfl[name].random = InOrder
        if "servergh" in pfl:
            def proto_loader(dataset, batch_size, drop_last=False, shuffle=False):
                order = torch.randperm(len(dataset), generator=generator) if shuffle else torch.arange(len(dataset))
                batches = [order[s : s + batch_size] for s in range(0, len(order), batch_size)]
                if drop_last and batches and len(batches[-1]) < batch_size:
                    batches.pop()
                return [(torch.stack([dataset[i][0] for i in b]), torch.stack([dataset[i][1] for i in b])) for b in batches]

            pfl["servergh"].DataLoader = proto_loader
            original_collect = pfl["clientgh"].clientGH.collect_protos

            def collect_protos(self):
                original_collect(self)
                self.protos = {label: self.protos[label] for label in sorted(self.protos)}  # ours: ascending labels

            pfl["clientgh"].clientGH.collect_protos = collect_protos


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pfllib", required=True, help="PFLlib checkout (the folder holding system/)")
    parser.add_argument("--work", required=True, help="folder written by export_run.py")
    parser.add_argument("--algorithm", required=True, choices=sorted(ALGORITHMS))
    parser.add_argument("--rounds", type=int, required=True)
    parser.add_argument("--out", required=True, help="CSV of PFLlib's accuracy per round")
    parser.add_argument("--init", choices=("ours", "pfllib"), default="ours")
    parser.add_argument("--selection", choices=("ours", "pfllib"), default="ours")
    parser.add_argument("--shuffles", choices=("ours", "pfllib"), default="ours")
    parser.add_argument("--lr-decay", choices=("on", "off"), default="on")
    parser.add_argument("--numpy-seed", type=int, help="seed numpy's global RNG (PFLlib's client draws with --selection pfllib)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--ours", help="one of our run folders (metrics.csv): print both round by round")
    options = parser.parse_args()

    torch.set_num_threads(options.threads)
    warnings.simplefilter("ignore")  # as PFLlib's main.py (e.g. a client too small for one batch steps its scheduler only)
    work = Path(options.work).resolve()
    out = Path(options.out).resolve()  # before PFLlib's working folder is entered
    ours_dir = Path(options.ours).resolve() if options.ours else None
    run = json.loads((work / "run.json").read_text())
    if options.rounds + 1 > len(run["selections"]) and options.selection == "ours":
        raise SystemExit(f"run.json holds client draws for {len(run['selections'])} rounds; export more with --rounds")
    sys.path.insert(0, str(Path(options.pfllib).resolve() / "system"))
    if options.numpy_seed is not None:
        np.random.seed(options.numpy_seed)
    pfl_name, server_module, server_class, split = ALGORITHMS[options.algorithm]
    import importlib

    pfl = {name: importlib.import_module(path) for name, path in {
        "clientbase": "flcore.clients.clientbase", "serverbase": "flcore.servers.serverbase",
        "data_utils": "utils.data_utils", "models": "flcore.trainmodel.models",
        server_module: f"flcore.servers.{server_module}",
        **({"clientgh": "flcore.clients.clientgh"} if options.algorithm == "fedgh" else {}),
        **({"clientditto": "flcore.clients.clientditto"} if options.algorithm == "ditto" else {}),
    }.items()}
    record = {"selected": []}
    patch(pfl, run, options, record)

    args = pfllib_args(run, options.algorithm, options.rounds, options.lr_decay == "on", "cpu")
    args.model = build_model(pfl["models"], run, options.init, work / "initial_model.pt")
    if split:  # PFLlib main.py: the last layer becomes the head of a BaseHeadSplit
        args.head = copy.deepcopy(args.model.fc)
        args.model.fc = torch.nn.Identity()
        args.model = pfl["models"].BaseHeadSplit(args.model, args.head)
    cwd = work / "pfllib_cwd"  # PFLlib reads ../dataset/<name>/ and writes ../results/, models/, items/
    cwd.mkdir(exist_ok=True)
    os.chdir(cwd)
    server = getattr(pfl[server_module], server_class)(args, 0)
    stdout = sys.stdout
    with open(cwd / f"{options.algorithm}.log", "w") as log:
        sys.stdout = log  # PFLlib prints a lot; keep it in WORK/pfllib_cwd/<algorithm>.log
        try:
            server.train()
        finally:
            sys.stdout = stdout

    accs = list(server.rs_test_acc)
    train_sizes = [c.train_samples for c in server.clients]
    test_sizes = [c.test_samples for c in server.clients]
    rows, trained = [], set()
    per_round = 2 if options.algorithm == "ditto" else 1  # Ditto appends global, then personal
    for rnd in range(len(accs) // per_round):
        values = accs[rnd * per_round : (rnd + 1) * per_round]
        row = {"round": rnd, "test_acc": max(values)}
        if options.algorithm == "ditto":
            row.update(test_acc_global=values[0], test_acc_personal=values[1])
        # early on a personalised method's accuracy is mostly this: the test share of clients whose
        # model has been trained (a client with fewer train samples than one batch never trains)
        row["trained_test_share"] = sum(test_sizes[c] for c in trained) / sum(test_sizes)
        row["selected"] = " ".join(map(str, record["selected"][rnd]))
        trained.update(c for c in record["selected"][rnd] if train_sizes[c] >= args.batch_size)
        rows.append(row)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    settings = f"init={options.init} selection={options.selection} shuffles={options.shuffles} lr_decay={options.lr_decay}"
    print(f"PFLlib {pfl_name} ({settings}): {len(rows)} evaluated rounds -> {out}")
    ours = {}
    if ours_dir:
        with open(ours_dir / "metrics.csv") as f:
            ours = {int(r["round"]): float(r["test_acc"]) for r in csv.DictReader(f)}
    print("round  trained  PFLlib      " + ("ours        ours-PFLlib" if ours else ""))
    for row in rows:
        line = f"{row['round']:5d}  {row['trained_test_share']:.3f}    {row['test_acc']:.8f}"
        if row["round"] in ours:
            line += f"  {ours[row['round']]:.8f}  {ours[row['round']] - row['test_acc']:+.8f}"
        print(line)


if __name__ == "__main__":
    main()
