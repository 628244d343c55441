"""CLI subcommands that turn run directories into tables and figures (see fedgmh.report)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    """Add the reporting subcommands to the `fedgmh` parser."""
