"""tools/lease/decide.py: the lever measurement of a GPU lease's first minutes, its data and its decision
(the end-to-end run on a CPU, `--tiny`, is slow: `pytest -m slow tests/test_decide.py`)."""

from __future__ import annotations

import json
import re
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import load_script

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tools" / "lease" / "decide.py"


@pytest.fixture(scope="module")
def decide():
    return load_script(SCRIPT)


def _accuracies(fp32=(0.50, 0.52, 0.48), **seed0):
    return {**{("fp32", seed): acc for seed, acc in enumerate(fp32)}, **{(s, 0): acc for s, acc in seed0.items()}}


def test_the_fastest_setting_within_two_seed_sds_of_fp32_is_chosen(decide):
    rates = {"fp32": 1.0, "tf32": 3.0, "unfold": 2.0, "all": 4.0}
    # fp32's seeds: mean 0.50, SD 0.02; "all" is 0.05 off (outside 2 SDs), tf32 0.039 off (inside)
    chosen, passing = decide.decide(rates, _accuracies(tf32=0.539, unfold=0.50, all=0.45))
    assert chosen == "tf32" and passing == ["fp32", "tf32", "unfold"]


def test_fp32_is_chosen_when_no_faster_setting_passes(decide):
    assert decide.decide({"fp32": 1.0, "tf32": 3.0}, _accuracies(tf32=0.3))[0] == "fp32"
    assert decide.decide({"fp32": 2.0, "tf32": 1.0}, _accuracies(tf32=0.5))[0] == "fp32"  # passes, but slower


def _prepared(tmp_path: Path, decide, clients: int = 5) -> Path:
    """A data file as `prepare` writes it, from a small ExDir partition of random labels."""
    from fedgmh.partition import exdir

    rng = np.random.RandomState(0)
    labels = rng.randint(0, 10, 600)
    part = exdir(labels, num_clients=8, classes_per_client=2, alpha=0.5)
    images = rng.randint(0, 256, (600, 3, 32, 32)).astype(np.uint8)
    path = tmp_path / "decide.npz"
    np.savez(path, sizes_train=np.array([len(a) for a in part.train]), sizes_test=np.array([len(a) for a in part.test]),
             **decide.subset(part, images, labels, clients))
    return path, part, images, labels


def test_the_prepared_clients_keep_their_samples_and_the_budget(tmp_path, decide):
    path, part, images, labels = _prepared(tmp_path, decide)
    arrays = decide.load(str(path), 3)
    train, test = decide.splits(arrays["subset_train"], arrays["subset_test"])
    for client in range(3):
        assert np.array_equal(arrays["labels"][train[client]], labels[part.train[client]])
        assert np.array_equal(arrays["images"][test[client]], images[part.test[client]])
    assert len(arrays["sizes_train"]) == 3
    assert len(arrays["labels"]) == sum(len(part.train[c]) + len(part.test[c]) for c in range(3))
    per_sample = images[0].nbytes
    first_two = sum(len(part.train[c]) + len(part.test[c]) for c in range(2)) * per_sample
    assert decide.leading_clients(part.train, part.test, first_two, per_sample) == 2
    assert decide.leading_clients(part.train, part.test, first_two - 1, per_sample) == 1


@pytest.mark.slow
def test_a_tiny_run_on_the_cpu_measures_every_setting_and_ends_with_its_decision(tmp_path, decide):
    path = _prepared(tmp_path, decide)[0]
    out = tmp_path / "out"
    env = dict(os.environ, OUT=str(out), PYTHONPATH=f"{REPO / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    done = subprocess.run([sys.executable, str(SCRIPT), "run", str(path), "--tiny"], env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("fastest setting that passes the numerics check: ")
    entries = [json.loads(line) for line in (out / "decide.jsonl").read_text().splitlines()]
    assert sorted(e["setting"] for e in entries if e["phase"] == "speed") == sorted([*decide.SETTINGS, "fp32 runs_per_job=2"])
    grouping = re.search(r"; runs_per_job: (\d+) with (\d+) jobs on the GPU", last)  # the grouped runs' rate decides it
    assert grouping and grouping.groups() in (("1", "2"), ("2", "1"))
    assert len([e for e in entries if e["phase"] == "numerics"]) == len(decide.SETTINGS) - 1 + len(decide.BASELINE_SEEDS)
    assert last.split(": ")[1].split(" ")[0] in decide.SETTINGS
