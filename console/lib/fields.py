"""Whole-number fields of forms and serializers that leave every bound to the app's validation,
so a page and the API give the same message for a value out of range, and the same
INTEGER_MESSAGE for one that is no number.
"""

from __future__ import annotations

from typing import Any

from django import forms
from rest_framework import serializers

from .validation import INTEGER_MESSAGE


def form_integer(label: str, widget: Any = None) -> forms.IntegerField:
    """An optional form field: a blank value reaches the app's rules, which say what is missing."""
    return forms.IntegerField(required=False, label=label, error_messages={"invalid": INTEGER_MESSAGE}, widget=widget)


def api_integer(**kwargs: Any) -> serializers.IntegerField:
    """A serializer field that takes null; the app's rules say what is missing or out of range."""
    return serializers.IntegerField(allow_null=True, error_messages={"invalid": INTEGER_MESSAGE}, **kwargs)
