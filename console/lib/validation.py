"""What every app's forms and API say the same way about what a user names and types: plain
functions over plain data, each returning a message or None (jobs.validation and
workspaces.validation build their rules on them).
"""

from __future__ import annotations

import re

INTEGER_MESSAGE = "Enter a whole number."
NAME_MAX = 63
NAME_CHARS_RE = re.compile(r"^[a-z0-9.-]*$")
# name_error's rule as one pattern, for names of two characters or more: what the OpenAPI schema
# declares for a job's name (3 at least)
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9.-]*[a-z0-9]$")


def name_error(name: str, min_length: int = 1) -> str | None:
    """The name of a job, a workspace or a node: `min_length` to 63 lowercase letters, digits,
    '-' and '.', starting and ending with a letter or digit (a DNS name's characters)."""
    if not min_length <= len(name) <= NAME_MAX:
        return f"Enter {min_length} to {NAME_MAX} characters."
    if not NAME_CHARS_RE.fullmatch(name):
        return "Use only lowercase letters, digits, '-' and '.'."
    if not (name[0].isalnum() and name[-1].isalnum()):  # of NAME_CHARS_RE's, only [a-z0-9]
        return "The name must start and end with a lowercase letter or digit."
    return None
