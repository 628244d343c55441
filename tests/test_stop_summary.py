"""Ctrl-C in a Snakemake run: the stopped jobs' reports held back, one summary line (fedgmh.stop_summary)."""

from __future__ import annotations

import io
import logging
import os
import signal

import pytest

from fedgmh.stop_summary import JOB_ERROR, StopSummary


@pytest.fixture
def terminal():
    """A logger with one terminal handler writing to a buffer, and the SIGINT handler restored afterwards."""
    logger, out = logging.getLogger("stop-summary-test"), io.StringIO()
    handler = logging.StreamHandler(out)
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    before = signal.getsignal(signal.SIGINT)
    yield logger, out
    signal.signal(signal.SIGINT, before)
    logger.removeHandler(handler)


def test_before_a_stop_every_report_passes_after_it_only_the_information(terminal) -> None:
    logger, out = terminal
    summary = StopSummary()
    summary.install(logger)
    logger.error("Error in rule train (a real failure)", extra={"event": JOB_ERROR})
    summary.stop()
    for job in ("fedavg", "fedgmh"):
        logger.error(f"Error in rule train ({job}): log ...", extra={"event": JOB_ERROR})
    logger.error("At least one job did not complete successfully.")
    logger.info("Complete log(s): ...")
    assert out.getvalue().splitlines() == ["Error in rule train (a real failure)", "Complete log(s): ..."]
    assert summary.stopped_jobs == 2
    assert summary.summary("logs/smoke").startswith("stopped on request: 2 running jobs ended unfinished (their logs: logs/smoke/)")


def test_sigint_marks_the_stop_and_still_interrupts(terminal) -> None:
    logger, _ = terminal
    summary = StopSummary()
    summary.install(logger)
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
    assert summary.stopping
