"""Validation rules of a Training Workspace, shared by the form and the API.

Plain functions over plain data; `validate_workspace` returns {field: message}.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from jobs.validation import MAX_NODES, SERVER_TYPE_MESSAGE, ServerTypeInfo, allocation_for

NAME_RE = re.compile(r"^[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?$")
NAME_CHARS_RE = re.compile(r"^[a-z0-9.-]*$")
DUPLICATE_NAME_MESSAGE = "You already have a Training Workspace with this name."
NODES_MESSAGE = f"Enter 1 to {MAX_NODES} nodes (distributed training from 2)."


def name_error(name: str) -> str | None:
    if not 1 <= len(name) <= 63:
        return "Enter 1 to 63 characters."
    if not NAME_CHARS_RE.fullmatch(name):
        return "Use only lowercase letters, digits, '-' and '.'."
    if not NAME_RE.fullmatch(name):
        return "The name must start and end with a lowercase letter or digit."
    return None


def node_count_error(nodes: int | None) -> str | None:
    return None if nodes is not None and 1 <= nodes <= MAX_NODES else NODES_MESSAGE


def contract_error(months: int | None, offered: Sequence[int]) -> str | None:
    if months in offered:
        return None
    names = [str(m) for m in sorted(offered)]
    listed = ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else "".join(names)
    return f"Choose a contract period: {listed} months." if names else "No contract period is offered; ask an administrator."


def allocation_errors(data: Mapping, info: ServerTypeInfo | None) -> dict[str, str]:
    if info is None:
        return {"server_type": SERVER_TYPE_MESSAGE}
    allocation = allocation_for(info, data.get("gpus_per_node") or 0)
    if allocation is None:
        offered = ", ".join(str(a.gpus) for a in info.allocations)
        return {"gpus_per_node": f"Server type {info.name} offers {offered} GPUs per node."}
    if data.get("memory_gb") is not None and data["memory_gb"] != allocation.memory_gb:
        return {"memory_gb": f"{allocation.gpus} GPU(s) on {info.name} come with {allocation.memory_gb} GB of memory."}
    return {}


def validate_workspace(data: Mapping, server_types: Mapping[str, ServerTypeInfo], contract_months: Sequence[int]) -> dict[str, str]:
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
