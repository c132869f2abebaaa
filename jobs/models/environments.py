"""Training environments: what a (framework, version) choice of the form really gives a job."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import models

from ..choices import Framework
from ..environments.requirements import parse_requirements, summary


class TrainingEnvironment(models.Model):
    """A pinned requirement list (process runtime: a Python environment the node agent builds
    once and caches) and the image that provides the same set (Docker runtime)."""

    name = models.SlugField(max_length=64, unique=True, help_text="Shown in job logs, e.g. deepspeed-0.18.9")
    framework = models.CharField(max_length=16, choices=Framework.choices)
    version = models.CharField(max_length=16, help_text="The version the form offers, e.g. 0.18.9")
    requirements = models.TextField(
        help_text="One exact pin per line (torch==2.13.0). Under the process runtime each node builds a "
        "Python environment from this list once and reuses it; torch must be pinned.",
    )
    image = models.CharField(
        max_length=255, blank=True,
        help_text="An image that holds the same set, for nodes with the Docker runtime (shown on the form)",
    )
    description = models.CharField(max_length=200, blank=True)
    enabled = models.BooleanField(default=True, help_text="Offered on the creation form and the API")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["framework", "-version"]
        constraints = [
            models.UniqueConstraint(fields=["framework", "version"], name="unique_environment_per_framework_version"),
        ]

    def __str__(self) -> str:
        return f"{self.get_framework_display()} {self.version} ({self.name})"

    def clean(self) -> None:
        _, errors = parse_requirements(self.requirements)
        if errors:
            raise ValidationError({"requirements": errors})

    def pins(self) -> list[str]:
        return parse_requirements(self.requirements)[0]

    def holds(self) -> str:
        return summary(self.pins())
