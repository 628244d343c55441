"""fedgmh: a compact, faithful reproduction pipeline for FedGMH (Sun & Ni, 2026)."""

__version__ = "0.1.0"

# Bumped whenever a change alters the numbers any run produces (docs/store.md): a run record is
# reused only by code of the same results version.
RESULTS_VERSION = 1
