"""One exception type for problems the user can fix (bad input, missing files).

The CLI prints these as a one-line message and exits with status 2 instead of a traceback.
"""


class UserError(Exception):
    """An error caused by the user's input, with a message that says what to do."""
