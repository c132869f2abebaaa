"""What a new Training Job must pass before it is created: the one check the creation form and
the API both call, so they fill in the same values and answer with the same messages.

jobs.validation holds the plain rules; this adds what needs the database or object storage:
the offered framework versions and allocations, the script object (checked as the owner:
jobs.storage.checks), the owner's job names, and the workspace and quota rules
(workspaces.admission).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workspaces.admission import job_errors as workspace_job_errors

from .choices import Framework
from .environments import offered
from .models import TrainingEnvironment, TrainingJob
from .storage.checks import Locator, audit_elsewhere, provision_quietly, script_object_error
from .storage.models import bucket_name
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
        data["framework_version"] = offered.default_version(framework, framework_versions) or ""
    info = server_types.get(data.get("server_type") or "")
    if data.get("memory_gb") is None:
        allocation = allocation_for(info, data.get("gpus_per_node") or 0) if info else None
        data["memory_gb"] = allocation.memory_gb if allocation else None
    if not data.get("image_url") and framework in Framework.values:
        # the environment's own image, for nodes whose runtime needs one (process nodes do not)
        data["image_url"] = TrainingEnvironment.objects.filter(
            framework=framework, version=data.get("framework_version") or "").values_list("image", flat=True).first() or ""
    data.setdefault("inputs", [])
    bucket = bucket_name(owner.pk) if owner is not None else ""
    errors = validate_job(data, server_types, framework_versions=framework_versions, bucket=bucket)
    if owner is not None:
        errors.update({field: message for field, message in _location_errors(owner, data, errors).items()
                       if field not in errors})
    if "server_type" not in errors and "time_limit_minutes" not in errors:
        from .slurm.job_request import time_limit_error  # the cluster serving the server type sets the bounds

        if message := time_limit_error(data.get("server_type") or "", data.get("time_limit_minutes")):
            errors["time_limit_minutes"] = message
    if data.get("script_url") and "script_url" not in errors:
        # checked as the owner, with their own keys: another tenant's object is refused (and audited)
        if message := script_object_error(owner, data["script_url"]):
            errors["script_url"] = message
    elif not errors:
        provision_quietly(owner)  # the owner's first job: their storage space is made now
    if owner is None:
        return errors
    if "name" not in errors and TrainingJob.objects.filter(owner=owner, name=data.get("name")).exists():
        errors["name"] = DUPLICATE_NAME_MESSAGE
    return {**workspace_job_errors(owner, data), **errors}


def _location_errors(owner: Any, data: dict[str, Any], errors: Mapping[str, str]) -> dict[str, str]:
    """What needs the database or the owner's storage, for fields whose own rule passed: the
    workdir and input objects (asked with the owner's keys, in their bucket only; an input
    folder named without its "/" gets it) and the job to start from. A location in another
    bucket was refused by its text; the attempt is audited here."""
    found: dict[str, str] = {}
    given = data.get("inputs")
    inputs = given if isinstance(given, list) else []
    if "workdir_url" in errors:
        audit_elsewhere(owner, "workdir_url", [str(data.get("workdir_url") or "")])
    if "inputs" in errors:
        audit_elsewhere(owner, "inputs", [str(i.get("url", "")) for i in inputs if isinstance(i, Mapping)])
    locator = Locator(owner)
    if data.get("workdir_url") and "workdir_url" not in errors and (message := locator.workdir_error(data["workdir_url"])):
        found["workdir_url"] = message
    if inputs and "inputs" not in errors:
        located = []
        for item in inputs:
            url, message = locator.input_error(item["name"], item["url"])
            if message:
                found["inputs"] = message
                break
            located.append({"name": item["name"], "url": url})
        else:
            data["inputs"] = located
    source = data.get("from_checkpoint")
    if source is not None and source != "" and "from_checkpoint" not in errors and (
            message := from_checkpoint_error(owner, source)):
        found["from_checkpoint"] = message
    return found


def from_checkpoint_error(owner: Any, job_id: int) -> str | None:
    """Only the owner's own jobs, and only one with a durable checkpoint (another user's job
    gets the same answer as one that does not exist: nothing is told of it)."""
    source = TrainingJob.objects.filter(pk=job_id, owner=owner).only("pk", "checkpoint_step").first()
    if source is None:
        return f"Job {job_id} is not one of your jobs."
    if source.checkpoint_step is None:
        return f"Job {job_id} has no checkpoint to start from."
    return None
