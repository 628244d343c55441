"""Shared fixtures and helpers: the offline data mirror (tests skip when it is absent), tiny
federations, the embedded digits set with a partition, `fedgmh train` arguments, configs, snakemake
calls, polling and loading a script."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SNAKEFILE = REPO_ROOT / "Snakefile"
SMOKE = REPO_ROOT / "config" / "smoke.yaml"
SCHEMA_FILE = REPO_ROOT / "workflow" / "schemas" / "config.schema.yaml"


def shared_data_dir() -> Path:
    """The read-only dataset mirror: $FEDGMH_SHARED_DATA, else ../shared/data next to the repo."""
    env = os.environ.get("FEDGMH_SHARED_DATA")
    return Path(env) if env else REPO_ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    path = shared_data_dir()
    if not (path / "MNIST" / "raw").is_dir():
        pytest.skip(f"offline data mirror not found at {path} (set FEDGMH_SHARED_DATA to a folder laid out like shared/data)")
    return path


def comparable(row: dict) -> dict:
    """A metrics row with its per-client accuracy array as a list, so rows compare with `==`."""
    return {k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in row.items()}


def batched_plain_sgd(fed, starts, clients, trainable=None):
    """Plain SGD on cross-entropy for every client of `clients` from `starts` (one per client), on the
    batched path (`vectorised.train_phases_many`, one phase each): the batched twin of `engine.local_train`."""
    from fedgmh.engine.vectorised import Phase, train_phases_many

    return [own[0] for own in train_phases_many(fed, [[Phase(start, trainable=trainable)] for start in starts], clients)]


def make_federation(client_labels, *, batch_size=4, local_epochs=1, lr=0.1, seed=0, num_classes=None, test_per_client=3,
                    device="cpu", **engine):
    """A tiny federation on random 1x28x28 images: client i gets train labels `client_labels[i]`
    (drawn on the CPU, then placed on `device`, so a CUDA federation holds the CPU one's numbers)."""
    import torch

    from fedgmh.config import EngineOptions
    from fedgmh.engine import Federation
    from fedgmh.model import FedAvgCNN, use_unfold_convolutions

    num_classes = num_classes or (max(max(c) for c in client_labels) + 1)
    gen = torch.Generator().manual_seed(1234 + seed)
    labels, train_idx, test_idx = [], [], []
    for client in client_labels:
        start = len(labels)
        labels.extend(client)
        train_idx.append(torch.arange(start, len(labels)))
        start = len(labels)
        labels.extend(client[:test_per_client])
        test_idx.append(torch.arange(start, len(labels)))
    images = torch.randn(len(labels), 1, 28, 28, generator=gen)
    torch.manual_seed(seed)
    model = FedAvgCNN(1, num_classes, 28)
    options = EngineOptions(**engine)
    if options.conv == "unfold":  # as fedgmh.train.build_federation builds the model
        use_unfold_convolutions(model)
    return Federation(
        model=model.to(device),
        images=images.to(device),
        labels=torch.tensor(labels, device=device),
        train_idx=[idx.to(device) for idx in train_idx],
        test_idx=[idx.to(device) for idx in test_idx],
        num_classes=num_classes,
        batch_size=batch_size,
        local_epochs=local_epochs,
        lr=lr,
        options=options,
        seed=seed,
    )


@pytest.fixture
def digits_root(tmp_path_factory) -> Path:
    """The embedded dataset, prepared once per test session."""
    from fedgmh import data

    root = tmp_path_factory.getbasetemp() / "digits_data"
    data.download("digits", root)
    return root


@pytest.fixture
def one_thread():
    """One torch thread: the tests' tiny models run many times faster so on a busy machine (a
    second intra-op thread only waits). Files of such tests use it for every test (pytestmark)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def float64():
    """Computations in float64 (default dtype), e.g. for comparisons a float32 rounding could flip."""
    import torch

    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(default)


@pytest.fixture
def digits_partition(digits_root, tmp_path):
    """An ExDir(2, 0.5) partition of the embedded digits over 6 clients."""
    return partition_digits(digits_root, tmp_path / "part.npz", clients=6, classes_per_client=2)



@contextlib.contextmanager
def stopping_after_a_snapshot():
    """Inside it, a training run writes its next snapshot and is then interrupted (what a killed
    session leaves: a snapshot and no record)."""
    from fedgmh import engine

    real_save = engine.Checkpoint.save

    def save_then_stop(self, snapshot):
        real_save(self, snapshot)
        raise KeyboardInterrupt

    engine.Checkpoint.save = save_then_stop
    try:
        yield
    finally:
        engine.Checkpoint.save = real_save


# ----------------------------------------------------------------------------- the CLI on digits


class Digits(NamedTuple):
    """The embedded digits set (a `--root`) and a partition of it: what a `fedgmh train` run reads."""

    data: Path
    partition: Path


def partition_digits(data: Path, out: Path, *, clients: int, classes_per_client: int) -> Path:
    """OUT: an ExDir(CLASSES_PER_CLIENT, 0.5) partition over CLIENTS clients of the digits in DATA."""
    from fedgmh.cli import main

    assert main(["partition", "--dataset", "digits", "--root", str(data), "--clients", str(clients),
                 "--classes-per-client", str(classes_per_client), "--alpha", "0.5", "--out", str(out)]) == 0
    return out


def prepare_digits(root: Path, *, clients: int = 4, classes_per_client: int = 3) -> Digits:
    """The embedded digits in ROOT/data and an ExDir(CLASSES_PER_CLIENT, 0.5) partition of them over
    CLIENTS clients in ROOT/part.npz."""
    from fedgmh import data

    data.download("digits", root / "data")
    return Digits(root / "data", partition_digits(root / "data", root / "part.npz", clients=clients,
                                                  classes_per_client=classes_per_client))


def train_args(digits: Digits, out: Path, *extra: str, algorithm: str = "fedavg", rounds: int = 1, **options: Any) -> list[str]:
    """`fedgmh train` arguments of a quiet run on DIGITS into OUT: one local epoch, half the clients a
    round, one thread, and OPTIONS as flags (`batch_size=20` -> `--batch-size 20`; None leaves a flag
    out, to its default), then EXTRA."""
    options = {"local_epochs": 1, "join_ratio": 0.5, "threads": 1, **options}
    flags = [item for name, value in options.items() if value is not None
             for item in (f"--{name.replace('_', '-')}", str(value))]
    return ["train", "--dataset", "digits", "--root", str(digits.data), "--partition", str(digits.partition),
            "--algorithm", algorithm, "--rounds", str(rounds), *flags, "--quiet", "--out", str(out), *extra]


def cli_error(capsys, argv: list[str]) -> str:
    """Run the CLI, expect the user-error exit status, return stderr (one line)."""
    from fedgmh.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fedgmh "), err
    return err


# ----------------------------------------------------------------------------- configs and snakemake


def load_config(name: str, **changes: Any) -> dict[str, Any]:
    """A shipped config with the schema's defaults filled in, as the workflow validates it."""
    import yaml

    from fedgmh import plan

    schema = yaml.safe_load(SCHEMA_FILE.read_text())
    config = yaml.safe_load((REPO_ROOT / "config" / name).read_text())
    config.update(changes)
    plan.with_defaults(config, schema)
    assert plan.schema_problems(config, schema) == []
    return config


def tiny_config(name: str, algorithms: list[str], title: str | None = None, **changes: Any) -> dict[str, Any]:
    """The smoke config cut to one experiment, `table2` (TITLE): ALGORITHMS on digits ExDir(2, 0.5), no
    figures and no other reports; CHANGES set top-level keys (e.g. rounds, seeds)."""
    import yaml

    table = {"title": title} if title else {}
    table.update(algorithms=algorithms, settings=[{"dataset": "digits", "classes_per_client": 2, "alpha": 0.5}])
    config = yaml.safe_load(SMOKE.read_text())
    config.update(name=name, figures={}, reference_tables=None, experiments={"table2": table}, **changes)
    for key in ("rounds_to_target", "uploads_to_target", "layer_weights", "clients_figure", "other_references", "costs",
                "official_reading"):
        config.pop(key, None)
    return config


def snakemake(workdir: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`snakemake ARGS` on the repository's Snakefile in WORKDIR (`--directory`), output captured."""
    env = dict(os.environ)
    # the `fedgmh` console script of this interpreter's environment must be on PATH for the rules
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(SNAKEFILE), "--directory", str(workdir), *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout, cwd=workdir)


def artifact_args(name: str, inputs: dict, outputs: dict, params: dict) -> list[str]:
    """`fedgmh artifact NAME --job JSON` as a list for `fedgmh.cli.main`: each input and output a path or a list of them."""
    import json

    def files(named: dict) -> dict[str, list[str]]:
        return {key: [str(p) for p in value] if isinstance(value, (list, tuple)) else [str(value)] for key, value in named.items()}

    return ["artifact", name, "--job", json.dumps({"input": files(inputs), "output": files(outputs), "params": params})]


def artifact_jobs(output: str) -> list[tuple[str, dict]]:
    """(artifact, job) of each `fedgmh artifact NAME --job JSON` command a `snakemake -n -p` printed,
    the job's inputs, outputs and params as the artifact's `write` receives them."""
    import json
    import shlex

    jobs = []
    for line in output.splitlines():
        if line.startswith("Shell command: fedgmh artifact "):
            words = shlex.split(line.removeprefix("Shell command: "))
            jobs.append((words[2], json.loads(words[words.index("--job") + 1])))
    return jobs


def job_counts(output: str) -> dict[str, int]:
    """The 'Job stats' table of a snakemake (dry) run."""
    section = output.split("Job stats:", 1)[1]
    counts = {}
    for line in section.splitlines():
        match = re.match(r"^(\w+)\s+(\d+)$", line.strip())
        if match:
            counts[match.group(1)] = int(match.group(2))
        elif counts and not line.strip():
            break
    return counts


# ----------------------------------------------------------------------------- small utilities


def wait_for(condition, timeout_s: float) -> None:
    """Poll CONDITION until it holds; fail after TIMEOUT_S seconds."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def load_script(path: Path):
    """The script at PATH (e.g. one of tools/) as a module."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
