"""Write one of our runs' inputs in PFLlib's format, so that PFLlib can train on exactly them.

Run with the project's environment (it imports fedgmh, never PFLlib):

    PYTHONPATH=src python tools/pflib_compare/export_run.py --dataset mnist --root DATA \
        --partition P.npz --seed 0 --rounds 5 --work WORK

writes, under WORK (keep it outside the project):
- `dataset/<name>/train/<i>.npz`, `dataset/<name>/test/<i>.npz`: client i's train and test
  samples as PFLlib's generators write them (`data` = {'x': float32 N x C x H x W, 'y': int64 N}),
  the images normalised by our loader and in the order of our partition file;
- `initial_model.pt`: our initial model (the state dict `fedgmh train` starts every client from,
  with our parameter names);
- `run.json`: the dataset's shape, the number of classes and clients, the training hyper-parameters
  both sides use (join ratio, E, batch size, lr; the paper's by default), and `selections`, the
  clients our round loop draws in rounds 0 .. rounds for this seed and join ratio.

Everything is read through `fedgmh.train.build_federation` (the loader, partition and model
`fedgmh train` uses) and `engine.select_clients` (its client draws), so the export cannot drift
from what our training sees.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from fedgmh.config import EngineOptions, TrainConfig
from fedgmh.engine import select_clients
from fedgmh.errors import UserError
from fedgmh.train import build_federation


def write_client_file(path: Path, x: torch.Tensor, y: torch.Tensor) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:  # PFLlib reads np.load(f, allow_pickle=True)['data'].tolist()
        np.savez_compressed(f, data={"x": x.numpy().astype(np.float32), "y": y.numpy().astype(np.int64)})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--root", required=True, help="folder of the prepared dataset (`fedgmh download`)")
    parser.add_argument("--partition", required=True, help="partition file (`fedgmh partition`)")
    parser.add_argument("--seed", type=int, default=0, help="our training seed (initial model, client draws)")
    parser.add_argument("--rounds", type=int, required=True)
    parser.add_argument("--join-ratio", type=float, default=0.2)
    parser.add_argument("--local-epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--work", required=True, help="output folder (outside the project)")
    parser.add_argument("--name", help="PFLlib dataset name (default: DATASET, e.g. mnist -> MNIST_fedgmh)")
    args = parser.parse_args()

    try:  # the checks `fedgmh train` makes of the same flags, the data and the partition
        config = TrainConfig(dataset=args.dataset, root=args.root, partition=args.partition, algorithm="fedavg",
                             rounds=args.rounds, join_ratio=args.join_ratio, local_epochs=args.local_epochs,
                             batch_size=args.batch_size, lr=args.lr, seed=args.seed, device="cpu")
        fed, meta = build_federation(config, EngineOptions(), torch.device("cpu"))
    except UserError as err:
        parser.exit(2, f"{parser.prog}: error: {err}\n")
    # PFLlib's main.py picks the model's input size from the dataset name ("MNIST" / "Cifar10" in it)
    name = args.name or {"mnist": "MNIST_fedgmh", "cifar10": "Cifar10_fedgmh", "cifar100": "Cifar100_fedgmh"}.get(args.dataset, args.dataset)
    work = Path(args.work)
    for client in range(fed.num_clients):
        for split, idx in (("train", fed.train_idx[client]), ("test", fed.test_idx[client])):
            write_client_file(work / "dataset" / name / split / f"{client}.npz", fed.images[idx], fed.labels[idx])
    torch.save(fed.initial_params(), work / "initial_model.pt")
    rng = np.random.RandomState(args.seed)  # as engine.run_rounds
    selections = [select_clients(rng, fed.num_clients, args.join_ratio) for _ in range(args.rounds + 1)]
    record = {
        "pfllib_dataset": name,
        "dataset": args.dataset,
        "partition": str(args.partition),
        "partition_digest": meta["digest"],
        "seed": args.seed,
        "num_clients": fed.num_clients,
        "num_classes": fed.num_classes,
        "image_shape": list(fed.images.shape[1:]),
        "join_ratio": args.join_ratio,
        "local_epochs": args.local_epochs,
        "batch_size": args.batch_size,
        "lr": args.lr,
        "selections": selections,
    }
    (work / "run.json").write_text(json.dumps(record, indent=1))
    print(f"wrote {fed.num_clients} clients to {work / 'dataset' / name}, initial_model.pt and run.json "
          f"({args.rounds + 1} rounds of client draws)")


if __name__ == "__main__":
    main()
