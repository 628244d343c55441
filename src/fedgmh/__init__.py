"""fedgmh: a compact, faithful reproduction pipeline for FedGMH (Sun & Ni, 2026)."""

__version__ = "0.1.0"
