"""The OpenAPI schema lists the error answers each endpoint really gives, not only its success.

drf-spectacular documents what a view returns when all goes well; DRF itself adds the rest,
the same way for every view: 401 without credentials, 403 for staff-only endpoints (and for a
session without its CSRF token on a write), 404 for an object that is not the caller's or a
page number past the end, 400 for a body that does not validate or a `page` that is no page
number (console.lib.api_strict). `ConsoleAutoSchema` adds
those from what the view declares; codes only a view knows (202, 409, a validated query)
stay in that view's `@extend_schema`. The schemathesis run in the suite
(jobs/tests/e2e/test_api_schema.py) fails on any status code the schema does not list.
"""

from __future__ import annotations

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers
from rest_framework.permissions import IsAdminUser

UNSAFE = {"POST", "PUT", "PATCH", "DELETE"}


class ErrorSerializer(serializers.Serializer):
    detail = serializers.CharField(help_text="what went wrong, in words")


VALIDATION_ERROR_SCHEMA = {
    "type": "object",
    "description": "each invalid field (or `non_field_errors`) with its messages",
    "additionalProperties": {},
}


# for a view's @extend_schema when it validates its query string
QUERY_ERRORS = OpenApiResponse(VALIDATION_ERROR_SCHEMA, description="a query parameter is invalid (named, with why)")


class ConsoleAutoSchema(AutoSchema):
    def _get_response_bodies(self, direction="response"):
        responses = super()._get_response_bodies(direction)
        if direction != "response":
            return responses
        for code, body in self._error_responses():
            responses.setdefault(code, self._get_response_for_code(body, code, direction=direction))
        return responses

    def _error_responses(self) -> list[tuple[str, object]]:
        errors: list[tuple[str, object]] = [("401", ErrorSerializer)]
        staff_only = any(issubclass(p, IsAdminUser) for p in getattr(self.view, "permission_classes", []))
        if staff_only or self.method in UNSAFE:
            errors.append(("403", ErrorSerializer))
        paginated = self._is_list_view() and self._get_paginator() is not None
        if "{" in self.path or paginated:
            errors.append(("404", ErrorSerializer))
        # a body that does not validate; a page that is no page number (console.lib.api_strict)
        if self.method in {"POST", "PUT", "PATCH"} or paginated:
            errors.append(("400", VALIDATION_ERROR_SCHEMA))
        return errors
