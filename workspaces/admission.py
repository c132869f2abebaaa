"""Whether a user may create this job or workspace: quotas, the job's workspace, its keep-alive.

Called by the job form and the job serializer alike (and by the workspace form and
serializer), so the page and the API refuse with the same message.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from django.conf import settings

from jobs.choices import TERMINAL_STATUSES, JobStatus, LearningType
from jobs.models import Placement, TrainingJob
from jobs.models.attempts import HOLDING_STATES

from .choices import ACCEPTS_JOBS
from .models import Quota, Workspace
from .quotas import JobAsk, Limits, Usage, effective_limits, job_limit_errors, workspace_limit_errors
from .usage import gpu_hours_this_month

WORKSPACE_MESSAGE = "Select one of your Training Workspaces, or none to use the shared pool."


def limits_for(user: Any) -> Limits:
    quotas = Quota.objects.filter(user=user).prefetch_related("allowed_server_types")
    own = next(iter(quotas), None)
    if own is not None:
        return own.limits()
    groups = Quota.objects.filter(group__user=user).prefetch_related("allowed_server_types")
    return effective_limits(None, [q.limits() for q in groups])


def usage_for(user: Any, limits: Limits | None = None) -> Usage:
    """What counts against the user's quotas now. The GPU-hours are summed only when a budget
    is set (or `limits` is None: the quota page shows everything)."""
    holding = Placement.objects.filter(
        state__in=HOLDING_STATES, attempt__job__owner=user, attempt__job__workspace__isnull=True,
    )
    gpus = sum(len(indices) for indices in holding.values_list("gpu_indices", flat=True))
    jobs = TrainingJob.objects.filter(owner=user)
    unfinished = jobs.exclude(status__in=[*TERMINAL_STATUSES, JobStatus.TERMINATING]).count()
    running = jobs.filter(status__in=[JobStatus.CREATING, JobStatus.RUNNING]).count()
    usage = Usage(gpus_in_use=gpus, unfinished_jobs=unfinished, running_jobs=running)
    if limits is None or limits.monthly_gpu_hour_budget is not None:
        hours, month = gpu_hours_this_month(user)
        usage = dataclasses.replace(usage, gpu_hours_this_month=hours, month=month)
    return usage


def workspace_for(owner: Any, value: Any) -> Workspace | None:
    """The owner's workspace named `value` (a name or a Workspace), or None for the shared pool."""
    if not value:
        return None
    if isinstance(value, Workspace):
        return value if value.owner_id == owner.pk else None
    return Workspace.objects.filter(owner=owner, name=str(value)).select_related("server_type").first()


def _workspace_errors(workspace: Workspace, data: Mapping[str, Any]) -> dict[str, str]:
    errors: dict[str, str] = {}
    if workspace.status not in ACCEPTS_JOBS:
        errors["workspace"] = f"Training Workspace {workspace.name} is {workspace.status}; it takes no new jobs."
    if data.get("learning_type") == LearningType.SPOT:
        errors["learning_type"] = "Spot Training cannot run in a Training Workspace: its nodes are reserved for you."
    if data.get("server_type") and data.get("server_type") != workspace.server_type.name:
        errors["server_type"] = f"Training Workspace {workspace.name} has {workspace.server_type.name} nodes; choose server type {workspace.server_type.name}."
    gpus = data.get("gpus_per_node")
    if isinstance(gpus, int) and gpus > workspace.gpus_per_node:
        errors["gpus_per_node"] = f"Training Workspace {workspace.name} offers {workspace.gpus_per_node} GPUs per node."
    nodes = data.get("node_count")
    if isinstance(nodes, int) and nodes > workspace.node_count:
        errors["node_count"] = f"Training Workspace {workspace.name} has {workspace.node_count} node(s); a job in it can use at most {workspace.node_count}."
    return errors


def keep_alive_error(value: Any) -> str | None:
    """None (left out) means the default of 10 minutes."""
    maximum = settings.WARM_POOL_MAX_KEEP_ALIVE_MINUTES
    if value is not None and not 0 <= value <= maximum:
        return f"Keep the nodes warm for 0 to {maximum} minutes."
    return None


def job_errors(owner: Any, data: Mapping[str, Any]) -> dict[str, str]:
    """{field or non_field_errors: message} for a job about to be created by `owner`."""
    errors: dict[str, str] = {}
    if (message := keep_alive_error(data.get("keep_alive_minutes"))) is not None:
        errors["keep_alive_minutes"] = message
    workspace = None
    if data.get("workspace"):
        workspace = workspace_for(owner, data["workspace"])
        if workspace is None:
            return {**errors, "workspace": WORKSPACE_MESSAGE}
        errors.update(_workspace_errors(workspace, data))
    if not isinstance(data.get("node_count"), int) or not isinstance(data.get("gpus_per_node"), int):
        return errors  # the field rules have said what is wrong
    limits = limits_for(owner)
    if limits.unlimited:
        return errors
    ask = JobAsk(
        learning_type=str(data.get("learning_type", "")), server_type=str(data.get("server_type", "")),
        gpus_per_node=data["gpus_per_node"], node_count=data["node_count"], in_workspace=workspace is not None,
    )
    for field, message in job_limit_errors(limits, usage_for(owner, limits), ask).items():
        errors.setdefault(field, message)
    return errors


def workspace_quota_errors(owner: Any, server_type: str) -> dict[str, str]:
    limits = limits_for(owner)
    return {} if limits.unlimited else workspace_limit_errors(limits, server_type)

