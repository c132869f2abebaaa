"""The job list's filters: one FilterSet for the list page (jobs.views) and the API
(jobs.api.views, whose OpenAPI schema documents them from it, as netbox does)."""

from __future__ import annotations

import django_filters
from django.db.models import Q, QuerySet

from .choices import JobStatus, LearningType
from .models import TrainingJob


def _choose(what: str, choices: list[tuple[str, str]]) -> dict[str, str]:
    """A wrong value's message names the right ones (%(value)s is Django's placeholder)."""
    return {"invalid_choice": f"%(value)s is not a {what}; choose one of: {', '.join(value for value, _ in choices)}."}


class JobFilter(django_filters.FilterSet):
    status = django_filters.ChoiceFilter(
        choices=JobStatus.choices, error_messages=_choose("status", JobStatus.choices),
        help_text="Only jobs in this status.",
    )
    learning_type = django_filters.ChoiceFilter(
        choices=LearningType.choices, error_messages=_choose("learning type", LearningType.choices),
        help_text="Only On-Demand (`on_demand`) or Spot (`spot`) jobs.",
    )
    # names are unique per owner: the `simpleai` command finds "one of my jobs" by its name
    name = django_filters.CharFilter(help_text="Only the job with exactly this name.")
    search = django_filters.CharFilter(
        method="search_name_and_tags", help_text="Jobs whose name, or a tag's key or value, contains this (any case).",
    )

    class Meta:
        model = TrainingJob
        fields = ["status", "learning_type", "name", "search"]

    def search_name_and_tags(self, jobs: QuerySet[TrainingJob], name: str, value: str) -> QuerySet[TrainingJob]:
        return jobs.filter(
            Q(name__icontains=value) | Q(tags__key__icontains=value) | Q(tags__value__icontains=value)
        ).distinct()
