"""Slurm host lists (`n[1-2],gpu[01-03,07]`) as the ordered node names they stand for.

The first name is the allocation's first host: its node runs rank 0 (`MASTER_ADDR`).
"""

from __future__ import annotations

import re

_BRACKET = re.compile(r"\[([^\[\]]*)\]")


class HostlistError(ValueError):
    """The text is not a Slurm host list."""


def _split_top_level(text: str) -> list[str]:
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for char in text:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"unbalanced ']' in host list {text!r}")
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth:
        raise HostlistError(f"unbalanced '[' in host list {text!r}")
    parts.append("".join(current))
    return [part for part in (p.strip() for p in parts) if part]


def _expand_ranges(ranges: str, text: str) -> list[str]:
    values = []
    for item in ranges.split(","):
        low, dash, high = item.strip().partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise HostlistError(f"bad range {item!r} in host list {text!r}")
        if not high:
            values.append(low)
            continue
        if int(high) < int(low):
            raise HostlistError(f"descending range {item!r} in host list {text!r}")
        width = len(low)  # n[01-10] keeps the zero padding: n01 … n10
        values.extend(str(number).zfill(width) for number in range(int(low), int(high) + 1))
    return values


def _expand_one(pattern: str, text: str) -> list[str]:
    match = _BRACKET.search(pattern)
    if match is None:
        if "[" in pattern or "]" in pattern:
            raise HostlistError(f"unbalanced brackets in host list {text!r}")
        return [pattern]
    head, tail = pattern[: match.start()], pattern[match.end():]
    return [
        name
        for value in _expand_ranges(match.group(1), text)
        for name in _expand_one(head + value + tail, text)
    ]


def expand(text: str) -> list[str]:
    """`n[1-2],login` → ["n1", "n2", "login"], in Slurm's order, without duplicates."""
    names: list[str] = []
    for part in _split_top_level(text or ""):
        for name in _expand_one(part, text):
            if name not in names:
                names.append(name)
    return names
