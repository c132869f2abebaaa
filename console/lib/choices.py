"""The choices of a model field (statuses, kinds, actions), typed as what Django makes of them.

Without django-stubs `models.TextChoices` is Any to mypy, so a member written
`PENDING = "pending", "Pending"` reads as that tuple, and passing it where a str is expected, or
comparing it with one, fails the check. At run time Django's enum makes it a str (its value) with
a label; this class says so to the type checker and is Django's own at run time.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    class _ChoicesType(enum.EnumMeta):  # Django's ChoicesType: the lists a model field takes
        @property
        def choices(cls) -> list[tuple[str, str]]: ...

        @property
        def values(cls) -> list[str]: ...

        @property
        def labels(cls) -> list[str]: ...

        @property
        def names(cls) -> list[str]: ...

    class TextChoices(enum.StrEnum, metaclass=_ChoicesType):
        @property
        def label(self) -> str: ...
else:
    from django.db.models import TextChoices

__all__ = ["TextChoices"]
