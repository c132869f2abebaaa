"""Validation rules of a Training Workspace, shared by the form and the API.

Plain functions over plain data; `validate_workspace` returns {field: message}.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from console.lib import validation as shared
from jobs.validation import ServerTypeInfo, node_count_error
from jobs.validation import allocation_errors as job_allocation_errors

DUPLICATE_NAME_MESSAGE = "You already have a Training Workspace with this name."


def name_error(name: str) -> str | None:
    return shared.name_error(name, min_length=1)


def contract_error(months: int | None, offered: Sequence[int]) -> str | None:
    if months in offered:
        return None
    names = [str(m) for m in sorted(offered)]
    listed = ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else "".join(names)
    return f"Choose a contract period: {listed} months." if names else "No contract period is offered; ask an administrator."


def allocation_errors(data: Mapping[str, Any], info: ServerTypeInfo | None) -> dict[str, str]:
    """A job's rules for the server type, GPUs and memory; the memory may be left out."""
    return job_allocation_errors(data, info, memory_required=False)[0]


def validate_workspace(data: Mapping[str, Any], server_types: Mapping[str, ServerTypeInfo], contract_months: Sequence[int]) -> dict[str, str]:
    """Every rule of a new workspace: name, allocation (server type, GPUs, memory), nodes, contract."""
    errors: dict[str, str] = {}
    checks = {
        "name": name_error(data.get("name") or ""),
        "node_count": node_count_error(data.get("node_count")),
        "contract_months": contract_error(data.get("contract_months"), contract_months),
    }
    errors.update({field: message for field, message in checks.items() if message})
    for field, message in allocation_errors(data, server_types.get(data.get("server_type") or "")).items():
        errors.setdefault(field, message)
    return errors
