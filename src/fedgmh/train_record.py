"""The record step of `fedgmh train` (`record_run`): a trained run's run.json, metrics.csv and other
tables, written atomically (fedgmh.record.write_record), then its snapshot removed.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import platform
import re

import numpy as np
import pandas as pd
import torch

import fedgmh
from fedgmh import gpu_slots
from fedgmh.engine import Federation
from fedgmh.errors import UserError
from fedgmh.machine import machine_facts
from fedgmh.memory import peak_rss_bytes, tensor_bytes
from fedgmh.record import new_record, write_record
from fedgmh.train_resolve import ENGINE_TABLES, ResolvedRun


@dataclasses.dataclass
class PlayedRounds:
    """What the round loop of a run gives its record."""

    rows: list[dict]  # one per evaluated round (engine.run_rounds)
    resumed_from_round: int | None  # the snapshot's next round; None: started at round 0
    started: dt.datetime
    wall_time_s: float  # this process's time in the loop


def memory_record(fed: Federation, algorithm, device: torch.device) -> dict[str, int]:
    """Bytes held at the end of a run: one model, the algorithm's state (all clients' and the
    server's tensors, shared storages once), the data set, and the process's peak."""
    record = {
        "model_bytes": tensor_bytes(fed.initial_params()),
        "algorithm_state_bytes": tensor_bytes(algorithm.state()),
        "data_bytes": tensor_bytes([fed.images, fed.labels]),
        "peak_rss_bytes": peak_rss_bytes(),
    }
    if device.type == "cuda":
        record["peak_cuda_bytes"] = torch.cuda.max_memory_allocated(device)
    return record


def check_trained(rows: list[dict], rounds: int) -> None:
    """Refuse to record a run in which no client took a training step in any evaluated training round
    (every such round's train_loss is NaN): its accuracies would be the initial model's."""
    trained_rounds = [row for row in rows if row["round"] < rounds]
    if trained_rounds and all(math.isnan(row["train_loss"]) for row in trained_rounds):
        raise UserError(f"no client took a training step in any of the {len(trained_rounds)} evaluated training rounds "
                        "(e.g. drop_last with batches larger than the clients' splits), so no record was written")


def client_table(best: dict, last: dict, fed: Federation) -> pd.DataFrame | None:
    """clients.csv: each client's test samples and accuracy in the best and in the last evaluated
    round; None when those rows lack it (rows from a checkpoint written before clients.csv)."""
    if "client_acc" not in best or "client_acc" not in last:
        return None
    return pd.DataFrame({"client": np.arange(fed.num_clients), "test_samples": [len(idx) for idx in fed.test_idx],
                         "test_acc_best": np.asarray(best["client_acc"]), "test_acc_last": np.asarray(last["client_acc"])})


def algorithm_tables(algorithm) -> dict[str, pd.DataFrame]:
    """The algorithm's own tables of the finished run (`Algorithm.extra_records`, e.g. pFedLA's
    layer_weights.csv) by file name; the store keeps every CSV of a record (store.optional_files)."""
    tables = algorithm.extra_records()
    bad = sorted(name for name in tables if name in ENGINE_TABLES or not re.fullmatch(r"[a-z][a-z0-9_]*", name)
                 or name not in algorithm.record_tables)
    if bad:
        raise ValueError(f"algorithm {algorithm.name} names a record table {', '.join(map(repr, bad))}: "
                         f"use lower-case letters, digits and _, not {' or '.join(ENGINE_TABLES)}, listed in its record_tables")
    return {f"{name}.csv": table for name, table in tables.items()}


def record_run(run: ResolvedRun, fed: Federation, algorithm, played: PlayedRounds) -> dict:
    """Write the trained run's record into its folder and remove its snapshot (the record supersedes it)."""
    config, device, rows = run.config, run.device, played.rows
    check_trained(rows, config.rounds)
    metrics = pd.DataFrame([{k: v for k, v in row.items() if k != "client_acc"} for row in rows])
    clients = client_table(rows[int(metrics["test_acc"].idxmax())], rows[-1], fed)
    tables = {**({"clients.csv": clients} if clients is not None else {}), **algorithm_tables(algorithm)}
    facts = {
        "wall_time_s": played.wall_time_s,
        "memory": memory_record(fed, algorithm, device),
        "resumed_from_round": played.resumed_from_round,
        "started_utc": played.started.isoformat(),
        "device": str(device) if device.type == "cpu" else f"{device} ({torch.cuda.get_device_name(device)})",
        "threads": torch.get_num_threads(),
        **({"sample_passes": passes} if (passes := fed.sample_passes.record()) else {}),
        **({"evaluation_sample_passes": passes} if (passes := fed.evaluation_passes.record()) else {}),
        **({"jobs_per_gpu": run.jobs_per_gpu} if config.device == gpu_slots.SLOT_DEVICE else {}),  # slots per GPU: at most that many jobs shared it
        "host": platform.node(),
        "machine": machine_facts(device),
        "versions": {
            "fedgmh": fedgmh.__version__,
            "python": platform.python_version(),
            "torch": torch.__version__,
            "numpy": np.__version__,
            "pandas": pd.__version__,  # writes and reads the record's tables
        },
        "code_version": fedgmh.code_version(),
    }
    run_record = new_record(dataclasses.asdict(config), run.identity, metrics, fed.num_clients, facts, run.workflow)
    write_record(run.out_dir, run_record, metrics, tables)
    run.checkpoint.remove()
    return run_record
