"""The seed's import path: `from datastates.llm import DecoratedCheckpointing`."""

from .decorator import DecoratedCheckpointing

__all__ = ["DecoratedCheckpointing"]
