"""What goes wrong, as exceptions the command prints as one line.

`SimpleAIError` and its kinds end the command with status 1 (an API refusal, a console it
cannot reach, a token it does not accept); `UsageError` with status 2 (the command line or the
job file is wrong before anything is sent).
"""

from __future__ import annotations


class SimpleAIError(Exception):
    """The console refused or could not be asked; the message is the whole story."""


class Unreachable(SimpleAIError):
    """No answer from the console: refused connection, timeout, DNS, TLS."""


class AuthRefused(SimpleAIError):
    """No token, or one the console does not accept (401)."""


class NotFound(SimpleAIError):
    """404: nothing of the caller's at that address (someone else's job looks the same)."""


class ApiError(SimpleAIError):
    """The console answered with an error; `fields` holds a 400's field messages, as the form words them."""

    def __init__(self, status: int, message: str, fields: dict[str, list[str]] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.fields = fields or {}


class UsageError(Exception):
    """The command line or the job file is wrong (exit status 2)."""
