"""The API refuses a query it does not declare, instead of guessing.

DRF takes the last of a repeated parameter and reads an empty `page=` as page 1; django-filter
reads an empty `status=` as "any status". A client that sent them meant something else (a
template with a missing value, a list joined wrongly), so the API answers 400 and says what it
takes, as the OpenAPI schema declares it (page ≥ 1; a filter given once, with a value). The job
list page keeps its own reading: its form sends `status=` for "every status".
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django_filters.rest_framework import DjangoFilterBackend
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request


def single_value(request: Request, name: str) -> str | None:
    """The one value of query parameter `name` (None when absent); 400 when it is given twice."""
    values = request.query_params.getlist(name)
    if len(values) > 1:
        raise ValidationError({name: [f"Give {name} once (it was given {len(values)} times)."]})
    return values[0] if values else None


class StrictPageNumberPagination(PageNumberPagination):
    """Pages numbered from 1; a page past the end is still a 404, as DRF answers it."""

    def get_page_number(self, request: Request, paginator: Any) -> int | str:
        value = single_value(request, self.page_query_param)
        if value is None:
            return 1
        if value in self.last_page_strings:
            return paginator.num_pages
        if not (value.isascii() and value.isdigit()) or int(value) < 1:
            raise ValidationError({self.page_query_param: [
                f"Enter a page number from 1 (not {value!r}), or leave {self.page_query_param} out for the first page."]})
        return value

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.page_query_param:
                parameter["schema"] = {**parameter["schema"], "minimum": 1}
        return parameters


class StrictFilterBackend(DjangoFilterBackend):
    """django-filter, with each declared filter given at most once and never empty."""

    def filter_queryset(self, request: Request, queryset: QuerySet, view: Any) -> QuerySet:
        filterset_class = self.get_filterset_class(view, queryset)
        for name, field in (filterset_class.base_filters.items() if filterset_class else ()):
            if single_value(request, name) == "":
                choices = ", ".join(str(value) for value, _ in getattr(field, "extra", {}).get("choices", ()))
                raise ValidationError({name: [f"{name} is empty: leave it out to not filter by it, or give a value"
                                              + (f" (one of: {choices})." if choices else ".")]})
        return super().filter_queryset(request, queryset, view)
