"""Compatibility package: `from datastates.llm import DecoratedCheckpointing` (the seed's scripts).

Backed by `concurrent_checkpoint` from the same vendor directory.
"""
