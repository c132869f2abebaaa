"""Which files of a project stay on the laptop: `.gitignore` and `.simpleaiignore` rules, as git reads them.

Each ignore file applies to the directory it is in and everything below it; within the rules
that apply to a path the last one that matches wins (so `!keep.csv` after `*.csv` keeps it, and a
`.simpleaiignore` overrides the `.gitignore` of the same directory). As in git, a file under an
ignored directory cannot be brought back: the directory is not even read.

Supported: blank lines and `#` comments, `!` negation, a trailing `/` (directories only), a `/`
at the start or in the middle (anchored to the ignore file's directory; otherwise the name
matches at any depth), `*`, `?`, `[a-z]` / `[!a-z]`, `**/` (any leading directories), `/**`
(everything inside) and `/**/` (zero or more directories), and a backslash escape.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

IGNORE_FILES = (".gitignore", ".simpleaiignore")


@dataclass(frozen=True)
class Rule:
    base: str  # the directory of the ignore file, relative to the project root ("" for the root)
    pattern: str  # the line as written (for messages)
    regex: re.Pattern[str]
    negated: bool
    directories_only: bool

    def matches(self, path: str, is_dir: bool) -> bool:
        """`path` is relative to the project root, with `/` between its parts."""
        if self.directories_only and not is_dir:
            return False
        if self.base:
            if not path.startswith(self.base + "/"):
                return False
            path = path[len(self.base) + 1:]
        return self.regex.fullmatch(path) is not None


def parse(text: str, base: str = "") -> list[Rule]:
    """The rules of one ignore file whose directory is `base` (relative to the project root)."""
    rules = []
    for raw in text.splitlines():
        rule = parse_line(raw, base)
        if rule is not None:
            rules.append(rule)
    return rules


def parse_line(raw: str, base: str = "") -> Rule | None:
    line = raw.rstrip("\r")
    # trailing spaces are dropped unless escaped with a backslash
    stripped = line.rstrip(" ")
    if stripped.endswith("\\") and len(stripped) < len(line):
        stripped += " "
    line = stripped
    if not line or line.startswith("#"):
        return None
    negated = line.startswith("!")
    if negated or line.startswith(("\\!", "\\#")):
        line = line[1:]
    directories_only = line.endswith("/") and not line.endswith("\\/")
    line = line.rstrip("/") if directories_only else line
    if not line:
        return None
    anchored = "/" in line
    line = line.lstrip("/")
    body = translate(line)
    regex = body if anchored else f"(?:.*/)?{body}"
    return Rule(base, raw.strip(), re.compile(regex, re.DOTALL), negated, directories_only)


def translate(glob: str) -> str:
    """A gitignore glob (without its leading `/`) as a regular expression over a relative path."""
    out: list[str] = []
    i, n = 0, len(glob)
    while i < n:
        if glob.startswith("**/", i) and (i == 0 or glob[i - 1] == "/"):
            out.append("(?:.*/)?")  # zero or more directories
            i += 3
        elif glob.startswith("**", i) and (i == 0 or glob[i - 1] == "/") and i + 2 == n:
            out.append(".*")  # `dir/**`: everything inside
            i += 2
        elif glob[i] == "*":
            while i < n and glob[i] == "*":  # other runs of stars are one star
                i += 1
            out.append("[^/]*")
        elif glob[i] == "?":
            out.append("[^/]")
            i += 1
        elif glob[i] == "[":
            end = _class_end(glob, i)
            if end < 0:
                out.append(re.escape("["))
                i += 1
            else:
                inner = glob[i + 1:end]
                if inner.startswith("!"):
                    inner = "^" + inner[1:]
                out.append("[" + inner.replace("\\", "\\\\") + "]")
                i = end + 1
        elif glob[i] == "\\" and i + 1 < n:
            out.append(re.escape(glob[i + 1]))
            i += 2
        else:
            out.append(re.escape(glob[i]))
            i += 1
    return "".join(out)


def _class_end(glob: str, start: int) -> int:
    """The index of the `]` closing the class opened at `start`, or -1 when it is not closed."""
    i = start + 1
    if i < len(glob) and glob[i] in "!^":
        i += 1
    if i < len(glob) and glob[i] == "]":
        i += 1  # a `]` first in the class is itself
    while i < len(glob):
        if glob[i] == "]":
            return i
        i += 1
    return -1


def is_ignored(rules: list[Rule], path: str, is_dir: bool) -> bool:
    """Whether the last rule that matches `path` ignores it (not ignored when none matches)."""
    for rule in reversed(rules):
        if rule.matches(path, is_dir):
            return not rule.negated
    return False


def rules_in(directory: Path, base: str) -> list[Rule]:
    """The rules of the ignore files in `directory` (`.gitignore` first, then `.simpleaiignore`)."""
    rules: list[Rule] = []
    for name in IGNORE_FILES:
        path = directory / name
        if path.is_file():
            rules += parse(path.read_text(encoding="utf-8", errors="replace"), base)
    return rules
