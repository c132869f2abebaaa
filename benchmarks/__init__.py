"""Benchmarks: one script per measurement, each run as `python -m benchmarks.<name>` from the
repository root; they print figures and assert nothing (docs/benchmarks/). `_stack` holds what
they share. Nothing outside benchmarks/ imports them (lint-imports).
"""
