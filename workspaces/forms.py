"""Forms of the workspace pages; their rules live in workspaces.validation and quotas (shared
with the API), so a page and the API refuse with the same message."""

from __future__ import annotations

from typing import Any

from django import forms

from console.lib.fields import form_integer
from jobs.models import ServerType
from jobs.validation import MAX_NODES, allocation_for, node_count_error

from .admission import workspace_quota_errors
from .choices import WhenBusy
from .models import ContractTerm, Workspace
from .validation import DUPLICATE_NAME_MESSAGE, contract_error, validate_workspace


def check_workspace(owner: Any, data: dict[str, Any], server_types: list[ServerType]) -> dict[str, str]:
    """Every rule of a new workspace, the database ones included: {field: message}."""
    by_name = {st.name: st for st in server_types}
    server_type = by_name.get(data.get("server_type") or "")
    if data.get("memory_gb") is None and server_type is not None:
        allocation = allocation_for(server_type.info(), data.get("gpus_per_node") or 0)
        data["memory_gb"] = allocation.memory_gb if allocation else None
    months = list(ContractTerm.objects.values_list("months", flat=True))
    errors = validate_workspace(data, {st.name: st.info() for st in server_types}, months)
    if "name" not in errors and Workspace.objects.filter(owner=owner, name=data.get("name")).exists():
        errors["name"] = DUPLICATE_NAME_MESSAGE
    if server_type is not None:
        for field, message in workspace_quota_errors(owner, server_type.name).items():
            errors.setdefault(field, message)
    return errors


class WorkspaceForm(forms.Form):
    name = forms.CharField(required=False, label="Training Workspace name", help_text="Up to 63 lowercase letters, digits, '-' and '.'; starts and ends with a letter or digit.")
    server_type = forms.CharField(required=False, widget=forms.RadioSelect)
    gpus_per_node = form_integer("Resource allocation", widget=forms.Select)
    node_count = form_integer("Number of nodes", widget=forms.NumberInput(attrs={"min": 1, "max": MAX_NODES}))
    contract_months = forms.TypedChoiceField(
        required=False, coerce=int, empty_value=None, label="Contract period",
    )

    def __init__(self, *args: Any, owner: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.owner = owner
        self.server_types = list(ServerType.objects.all())
        self.terms = list(ContractTerm.objects.all())
        self.fields["contract_months"].choices = [(t.months, str(t)) for t in self.terms]
        # a forged period gets the API's message, not the select's generic one
        self.fields["contract_months"].error_messages["invalid_choice"] = contract_error(None, [t.months for t in self.terms])
        self.fields["gpus_per_node"].widget.choices = sorted(
            {(a.gpus, f"{a.gpus} GPU") for st in self.server_types for a in st.allocations()}
        )
        if not self.is_bound:
            self.initial.setdefault("node_count", 2)
            if self.server_types:
                self.initial.setdefault("server_type", self.server_types[0].name)
                self.initial.setdefault("gpus_per_node", self.server_types[0].gpus_per_node)
            if self.terms:
                self.initial.setdefault("contract_months", self.terms[0].months)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        data["server_type"] = data.get("server_type") or ""
        data["memory_gb"] = None
        for field, message in check_workspace(self.owner, data, self.server_types).items():
            if field not in self._errors:
                self.add_error(field if field in self.fields else None, message)
        return data

    def workspace_fields(self) -> dict[str, Any]:
        data = self.cleaned_data
        return {key: data[key] for key in ("name", "server_type", "gpus_per_node", "memory_gb", "node_count", "contract_months")}


class ResizeForm(forms.Form):
    node_count = form_integer("Number of nodes", widget=forms.NumberInput(attrs={"min": 1, "max": MAX_NODES}))
    when_busy = forms.ChoiceField(
        choices=WhenBusy.choices, initial=WhenBusy.REFUSE, widget=forms.RadioSelect, required=False,
        label="If a node to release runs a job",
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if "node_count" not in self._errors and (message := node_count_error(data.get("node_count"))):
            self.add_error("node_count", message)
        data["when_busy"] = data.get("when_busy") or WhenBusy.REFUSE
        return data

