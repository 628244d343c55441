"""Shared fixtures: where the offline data mirror lives (tests skip when it is absent)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


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
