"""Pinned requirement lists of training environments: parsing and rules (plain functions).

A training environment is built on a node from a list like `torch==2.13.0` / `deepspeed==0.18.9`,
one exact pin per line. Exact pins make an environment reproducible (the node's cache key is
the list itself) and keep pip from choosing versions on its own; torch must be pinned because
pulling another torch downloads gigabytes.
"""

from __future__ import annotations

import re

# PEP 508 names (normalised later), exact version pins only; optional extras
_PIN_RE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[A-Za-z0-9,._-]+\])?==([A-Za-z0-9.+!_-]+)$")
MAX_LINES = 100


def canonical_name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_requirements(text: str) -> tuple[list[str], list[str]]:
    """`(pins, errors)`: the list's lines without blanks and comments, and what is wrong with it."""
    pins: list[str] = []
    errors: list[str] = []
    seen: set[str] = set()
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = _PIN_RE.fullmatch(line.replace(" ", ""))
        if match is None:
            errors.append(f"line {number}: {line!r} is not an exact pin like numpy==2.4.6 (no ranges, URLs or pip options)")
            continue
        name = canonical_name(match.group(1))
        if name in seen:
            errors.append(f"line {number}: {match.group(1)} is pinned twice")
            continue
        seen.add(name)
        pins.append(line.replace(" ", ""))
    if len(pins) > MAX_LINES:
        errors.append(f"at most {MAX_LINES} packages")
    if not errors and "torch" not in seen:
        errors.append("pin torch (e.g. torch==2.13.0): every training environment is built on it")
    return pins, errors


def pinned_version(pins: list[str], package: str) -> str | None:
    """The version `package` is pinned to in `pins`, or None."""
    for pin in pins:
        name, _, version = pin.partition("==")
        if canonical_name(name.split("[", 1)[0]) == canonical_name(package):
            return version
    return None


def summary(pins: list[str]) -> str:
    """`torch 2.13.0, transformers 5.10.2, …`: what an environment holds, for the form and the admin."""
    return ", ".join(pin.replace("==", " ") for pin in pins)
