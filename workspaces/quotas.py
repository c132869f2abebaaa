"""Quota rules: plain functions over plain data (no Django, no database).

Staff set a quota per user and per group (workspaces.models.Quota). A user's own quota, when
there is one, is the whole truth for that user; otherwise the most generous value of their
groups' quotas applies field by field (a user in two teams gets the larger of the two), and
a user with neither has no limits.

Hard limits refuse a creation (form and API, the same message); the GPUs-in-use limit makes a
job that is within every hard limit wait in Pending instead. Every message names its quota.
Jobs in a Training Workspace run on capacity its contract pays for, so they count for
concurrent jobs and nodes per job but not for GPUs in use or the GPU-hour budget.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import TypeVar

NON_FIELD = "non_field_errors"  # DRF's key for errors of no single field; the form shows them on top

# the names the messages use, as staff see them in the admin
QUOTA_NAMES = {
    "max_gpus_in_use": "maximum GPUs in use at once",
    "max_concurrent_jobs": "maximum concurrent jobs",
    "max_nodes_per_job": "maximum nodes per job",
    "allowed_server_types": "allowed server types",
    "spot_allowed": "Spot Training allowed",
    "workspaces_allowed": "Training Workspaces allowed",
    "monthly_gpu_hour_budget": "monthly GPU-hour budget",
}


@dataclass(frozen=True)
class Limits:
    """None means no limit."""

    max_gpus_in_use: int | None = None
    max_concurrent_jobs: int | None = None
    max_nodes_per_job: int | None = None
    allowed_server_types: frozenset[str] | None = None
    spot_allowed: bool = True
    workspaces_allowed: bool = True
    monthly_gpu_hour_budget: Decimal | None = None

    @property
    def unlimited(self) -> bool:
        return self == Limits()


Number = TypeVar("Number", int, Decimal)


def _most(values: list[Number | None]) -> Number | None:
    """The most generous of several limits: no limit beats any number."""
    numbers = [v for v in values if v is not None]
    return None if len(numbers) < len(values) else max(numbers)


def effective_limits(own: Limits | None, groups: Iterable[Limits]) -> Limits:
    if own is not None:
        return own
    groups = list(groups)
    if not groups:
        return Limits()
    types = [g.allowed_server_types for g in groups if g.allowed_server_types is not None]
    return Limits(
        max_gpus_in_use=_most([g.max_gpus_in_use for g in groups]),
        max_concurrent_jobs=_most([g.max_concurrent_jobs for g in groups]),
        max_nodes_per_job=_most([g.max_nodes_per_job for g in groups]),
        allowed_server_types=None if len(types) < len(groups) else frozenset[str]().union(*types),
        spot_allowed=any(g.spot_allowed for g in groups),
        workspaces_allowed=any(g.workspaces_allowed for g in groups),
        monthly_gpu_hour_budget=_most([g.monthly_gpu_hour_budget for g in groups]),
    )


@dataclass(frozen=True)
class Usage:
    """What a user holds now, as the quotas count it."""

    gpus_in_use: int = 0  # GPUs held by placements of jobs outside workspaces
    unfinished_jobs: int = 0  # jobs that have not ended (waiting, creating, running)
    running_jobs: int = 0  # jobs whose current attempt holds nodes
    gpu_hours_this_month: Decimal = Decimal(0)  # charged GPU-hours of jobs outside workspaces
    month: str = ""  # YYYY-MM, for messages


@dataclass(frozen=True)
class JobAsk:
    learning_type: str  # "on_demand" | "spot"
    server_type: str
    gpus_per_node: int
    node_count: int
    in_workspace: bool = False

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.node_count


def _hours(value: Decimal) -> str:
    return f"{value.quantize(Decimal('0.01')).normalize():f}"


def _types(allowed: frozenset[str]) -> str:
    return ", ".join(sorted(allowed)) or "none"


def nodes_message(limit: int) -> str:
    return f"Your quota allows at most {limit} node{'s' if limit != 1 else ''} per job (quota: {QUOTA_NAMES['max_nodes_per_job']})."


def server_type_message(server_type: str, allowed: frozenset[str]) -> str:
    return (
        f"Your quota does not allow server type {server_type}; allowed: {_types(allowed)} "
        f"(quota: {QUOTA_NAMES['allowed_server_types']})."
    )


SPOT_MESSAGE = f"Your quota does not allow Spot Training (quota: {QUOTA_NAMES['spot_allowed']})."
WORKSPACES_MESSAGE = f"Your quota does not allow Training Workspaces (quota: {QUOTA_NAMES['workspaces_allowed']})."


def job_limit_errors(limits: Limits, usage: Usage, ask: JobAsk) -> dict[str, str]:
    """Hard limits at creation: {field or NON_FIELD: message}; empty when the job may be created."""
    errors: dict[str, str] = {}
    if limits.max_nodes_per_job is not None and ask.node_count > limits.max_nodes_per_job:
        errors["node_count"] = nodes_message(limits.max_nodes_per_job)
    if limits.allowed_server_types is not None and ask.server_type not in limits.allowed_server_types:
        errors["server_type"] = server_type_message(ask.server_type, limits.allowed_server_types)
    if ask.learning_type == "spot" and not limits.spot_allowed:
        errors["learning_type"] = SPOT_MESSAGE
    whole = []
    if limits.max_concurrent_jobs is not None and usage.unfinished_jobs >= limits.max_concurrent_jobs:
        whole.append(
            f"You have {usage.unfinished_jobs} Training Job(s) that have not ended; your quota allows "
            f"{limits.max_concurrent_jobs} at once (quota: {QUOTA_NAMES['max_concurrent_jobs']})."
        )
    if not ask.in_workspace:
        if limits.max_gpus_in_use is not None and ask.gpus > limits.max_gpus_in_use:
            whole.append(
                f"This job needs {ask.gpus} GPUs at once; your quota allows {limits.max_gpus_in_use} "
                f"(quota: {QUOTA_NAMES['max_gpus_in_use']})."
            )
        if budget_used_up(limits, usage):
            whole.append(budget_message(limits, usage))
    if whole:
        errors[NON_FIELD] = " ".join(whole)
    return errors


def budget_used_up(limits: Limits, usage: Usage) -> bool:
    budget = limits.monthly_gpu_hour_budget
    return budget is not None and usage.gpu_hours_this_month >= budget


def budget_message(limits: Limits, usage: Usage) -> str:
    assert limits.monthly_gpu_hour_budget is not None
    return (
        f"Your monthly budget of {_hours(limits.monthly_gpu_hour_budget)} GPU-hours is used up: "
        f"{_hours(usage.gpu_hours_this_month)} used in {usage.month} (quota: {QUOTA_NAMES['monthly_gpu_hour_budget']})."
    )


def workspace_limit_errors(limits: Limits, server_type: str) -> dict[str, str]:
    errors: dict[str, str] = {}
    if not limits.workspaces_allowed:
        errors[NON_FIELD] = WORKSPACES_MESSAGE
    if limits.allowed_server_types is not None and server_type not in limits.allowed_server_types:
        errors["server_type"] = server_type_message(server_type, limits.allowed_server_types)
    return errors


def scheduling_block(limits: Limits, usage: Usage, ask: JobAsk) -> str | None:
    """Why a created job must keep waiting now, or None. `usage` includes jobs admitted
    earlier in the same scheduler run, so two jobs cannot both slip under one limit."""
    hard = job_limit_errors(limits, Usage(gpu_hours_this_month=usage.gpu_hours_this_month, month=usage.month), ask)
    if hard:  # staff lowered a limit after the job was created
        return "Waiting: " + " ".join(hard.values())
    if limits.max_concurrent_jobs is not None and usage.running_jobs + 1 > limits.max_concurrent_jobs:
        return (
            f"Waiting for your job quota: {usage.running_jobs} of {limits.max_concurrent_jobs} jobs "
            f"run now (quota: {QUOTA_NAMES['max_concurrent_jobs']})"
        )
    if not ask.in_workspace and limits.max_gpus_in_use is not None and usage.gpus_in_use + ask.gpus > limits.max_gpus_in_use:
        return (
            f"Waiting for your GPU quota: {usage.gpus_in_use} of {limits.max_gpus_in_use} GPUs in use, "
            f"this job needs {ask.gpus} (quota: {QUOTA_NAMES['max_gpus_in_use']})"
        )
    return None
