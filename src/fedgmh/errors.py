"""One exception type for problems the user can fix (bad input, missing files), and one for a
process asked to stop.

The CLI prints these as a one-line message instead of a traceback and exits with status 2
(UserError) or 128 + the signal number (Interrupted: 130 for Ctrl-C, 143 for SIGTERM).
"""


import difflib
from collections.abc import Iterable


class UserError(Exception):
    """An error caused by the user's input, with a message that says what to do."""


class ConfigError(UserError):
    """A config value the workflow cannot run; the message names the config key."""


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """' (did you mean 'x'?)' for the known name closest to `name`, case and '-'/'_' aside; '' when none is close."""
    known = list(known)
    folded = {k.lower().replace("-", "_"): k for k in known}
    wanted = name.lower().replace("-", "_")
    if wanted in folded:
        return f" (did you mean {folded[wanted]!r}?)"
    close = difflib.get_close_matches(wanted, list(folded), n=1, cutoff=0.6)
    return f" (did you mean {folded[close[0]]!r}?)" if close else ""


class Interrupted(KeyboardInterrupt):
    """The process was asked to stop: Ctrl-C (SIGINT) or SIGTERM. `message` is the one line the CLI
    prints (e.g. the round a training run stopped at and how it resumes)."""

    def __init__(self, signum: int, message: str = "interrupted", **details) -> None:
        super().__init__(message)
        self.signum, self.message, self.details = signum, message, details
