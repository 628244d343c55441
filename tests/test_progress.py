"""`fedgmh train`'s progress: one line redrawn with \\r on a terminal, plain lines in logs."""

from __future__ import annotations

import io
import math
import sys

import pytest

from fedgmh import train
from fedgmh.cli import main


class Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.fixture
def colour_terminal(monkeypatch):
    """An environment in which a terminal gets the live line (no NO_COLOR, a real TERM)."""
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setenv("COLUMNS", "200")


def _play(monkeypatch, stream) -> None:
    """A 3-round run at 2 s per round: round 0 not evaluated, rounds 1-3 evaluated (the last one trains nothing)."""
    clock = iter(float(t) for t in range(0, 100, 2))
    monkeypatch.setattr(train.time, "perf_counter", lambda: next(clock))
    log = train.ProgressLog("fedavg", rounds=3, stream=stream)
    log.played(0)
    for rnd, acc, loss in [(1, 0.5, 1.25), (2, 0.75, 0.5), (3, 0.625, math.nan)]:
        log({"round": rnd, "test_acc": acc, "train_loss": loss})
        log.played(rnd)
    log.close()


def test_a_terminal_gets_one_line_redrawn_after_every_round_and_ended_by_a_newline(monkeypatch, colour_terminal):
    out = Terminal()
    _play(monkeypatch, out)
    text = out.getvalue()
    assert text.endswith("\n") and text.count("\n") == 1
    drawn = text[:-1].split("\r")
    assert drawn[0] == "" and len(drawn) == 5  # one redraw per round played
    lines = [line.rstrip() for line in drawn[1:]]
    assert lines[0] == "[fedavg] round 0/3  25% | 0:00:02 elapsed, ETA 0:00:06 | acc n/a"
    assert lines[1] == "[fedavg] round 1/3  50% | 0:00:04 elapsed, ETA 0:00:04 | acc 50.00 % best 50.00 % train_loss 1.2500"
    assert lines[3] == "[fedavg] round 3/3 100% | 0:00:08 elapsed, ETA 0:00:00 | acc 62.50 % best 75.00 % train_loss n/a"
    # a shorter line covers what is left of the longer one before it
    assert all(len(now) >= len(before.rstrip()) for before, now in zip(drawn[1:], drawn[2:]))


def test_a_log_gets_todays_plain_lines_and_no_live_line(monkeypatch, colour_terminal):
    out = io.StringIO()
    _play(monkeypatch, out)
    assert out.getvalue() == (
        "[fedavg] round 1/3 acc 50.00 % best 50.00 % train_loss 1.2500 | 0:00:02 elapsed, ETA 0:00:02\n"
        "[fedavg] round 2/3 acc 75.00 % best 75.00 % train_loss 0.5000 | 0:00:04 elapsed, ETA 0:00:01\n"
        "[fedavg] round 3/3 acc 62.50 % best 75.00 % train_loss n/a | 0:00:06 elapsed, ETA 0:00:00\n")


@pytest.mark.parametrize("variable,value", [("NO_COLOR", "1"), ("TERM", "dumb")])
def test_a_terminal_that_asks_for_plain_output_gets_the_plain_lines(monkeypatch, colour_terminal, variable, value):
    plain, terminal = io.StringIO(), Terminal()
    _play(monkeypatch, plain)
    monkeypatch.setenv(variable, value)
    _play(monkeypatch, terminal)
    assert terminal.getvalue() == plain.getvalue() and "\r" not in terminal.getvalue()


def test_fedgmh_train_on_a_terminal_ends_its_live_line_before_anything_else(monkeypatch, colour_terminal, digits_root,
                                                                          digits_partition, tmp_path):
    err = Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    assert main(["train", "--root", str(digits_root), "--partition", str(digits_partition), "--algorithm", "fedavg",
                 "--rounds", "2", "--local-epochs", "1", "--join-ratio", "0.5", "--threads", "1",
                 "--out", str(tmp_path / "run")]) == 0
    live = [line for line in err.getvalue().split("\n") if "\r" in line]
    assert len(live) == 1 and live[0].count("\r[fedavg] round ") == 3  # rounds 0, 1 and 2, on one line
    assert err.getvalue().endswith("\n")
