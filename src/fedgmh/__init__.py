"""fedgmh: a compact, faithful reproduction pipeline for FedGMH (Sun & Ni, 2026)."""

import subprocess
from pathlib import Path

__version__ = "0.1.0"

# Bumped whenever a change alters the numbers any run produces (docs/store.md): a run record is
# reused only by code of the same results version.
RESULTS_VERSION = 1


def code_version() -> str | None:
    """The git commit of this source tree; None outside a git checkout or without git."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None
