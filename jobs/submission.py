"""What a new Training Job must pass before it is created: the one check the creation form and
the API both call, so they fill in the same values and answer with the same messages.

jobs.validation holds the plain rules; this adds what needs the database or object storage:
the offered framework versions and allocations, the script object, the owner's job names, and
the workspace and quota rules (workspaces.admission).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workspaces.admission import job_errors as workspace_job_errors

from . import environments
from .choices import Framework
from .models import TrainingJob
from .script_check import script_object_error
from .validation import DUPLICATE_NAME_MESSAGE, ServerTypeInfo, allocation_for, validate_job


def check_new_job(
    owner: Any,
    data: dict[str, Any],
    server_types: Mapping[str, ServerTypeInfo],
    framework_versions: Mapping[str, list[str]],
) -> dict[str, str]:
    """Fill in what follows from the choices made (the framework's default version, the
    allocation's memory) into `data`, then return every broken rule as {field: message}.

    `data` holds plain values (the server type by name, tags as key/value mappings). A field's
    own rule wins over the checks that need it valid (the script object, a duplicate name), and
    those over the workspace and quota rules. Without an owner those last two are skipped.
    """
    framework = data.get("framework")
    if framework in Framework.values and not data.get("framework_version"):
        data["framework_version"] = environments.default_version(framework, framework_versions) or ""
    info = server_types.get(data.get("server_type") or "")
    if data.get("memory_gb") is None:
        allocation = allocation_for(info, data.get("gpus_per_node") or 0) if info else None
        data["memory_gb"] = allocation.memory_gb if allocation else None
    errors = validate_job(data, server_types, framework_versions=framework_versions)
    if data.get("script_url") and "script_url" not in errors and (message := script_object_error(data["script_url"])):
        errors["script_url"] = message
    if owner is None:
        return errors
    if "name" not in errors and TrainingJob.objects.filter(owner=owner, name=data.get("name")).exists():
        errors["name"] = DUPLICATE_NAME_MESSAGE
    return {**workspace_job_errors(owner, data), **errors}
