"""Ctrl-C in a Snakemake run: one summary line instead of every stopped job's error report and log.

The terminal's SIGINT reaches Snakemake and its running jobs at once; each job then ends non-zero and
Snakemake reports it as failed, printing its log (the workflow profile's show-failed-logs). Once the
user has asked to stop, `StopSummary` keeps those reports off the terminal (Snakemake's log file and
the jobs' logs keep them), counts the stopped jobs and gives the one line that replaces them.
"""

from __future__ import annotations

import logging
import signal
import threading

#: the `event` of Snakemake's report of a failed job (snakemake_interface_logger_plugins' LogEvent.JOB_ERROR)
JOB_ERROR = "job_error"


class StopSummary(logging.Filter):
    """A filter for Snakemake's terminal handlers: everything passes until `stop`; then warnings and
    errors (the stopped jobs' reports, the final "did not complete") are held back, the jobs counted."""

    def __init__(self) -> None:
        super().__init__()
        self.stopping = False
        self._reports: list[logging.LogRecord] = []  # each counted once, whichever handlers it passes

    def stop(self) -> None:
        self.stopping = True

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.stopping:
            return True
        if str(getattr(record, "event", "")) == JOB_ERROR and not any(record is seen for seen in self._reports):
            self._reports.append(record)
        return record.levelno < logging.WARNING

    @property
    def stopped_jobs(self) -> int:
        return len(self._reports)

    def summary(self, logs: str) -> str:
        """The line printed after a stop."""
        jobs = f"{self.stopped_jobs} running job{'' if self.stopped_jobs == 1 else 's'}"
        return (f"stopped on request: {jobs} ended unfinished (their logs: {logs}/); "
                "the same command resumes, keeping every finished run")

    def install(self, logger: logging.Logger) -> None:
        """Filter the terminal handlers of `logger` (the logger itself when it has none yet) and, from the
        main thread, note SIGINT before Python's own handler turns it into KeyboardInterrupt."""
        terminals = [h for h in logger.handlers if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)]
        for handler in terminals or [logger]:
            handler.addFilter(self)
        if threading.current_thread() is not threading.main_thread():
            return
        previous = signal.getsignal(signal.SIGINT)

        def on_interrupt(signum, frame) -> None:
            self.stop()
            if callable(previous):
                previous(signum, frame)
            else:
                raise KeyboardInterrupt

        signal.signal(signal.SIGINT, on_interrupt)
