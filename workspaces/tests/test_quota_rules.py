"""Quota rules (workspaces.quotas): plain data, no database."""

from __future__ import annotations

from decimal import Decimal

from workspaces.quotas import (
    NON_FIELD,
    JobAsk,
    Limits,
    Usage,
    effective_limits,
    job_limit_errors,
    scheduling_block,
    workspace_limit_errors,
)

ASK = JobAsk("on_demand", "g2", 8, 2)  # 16 GPUs


def test_no_quota_means_no_limits():
    assert effective_limits(None, []).unlimited
    assert job_limit_errors(Limits(), Usage(unfinished_jobs=99, gpus_in_use=999), ASK) == {}


def test_a_users_own_quota_replaces_their_groups():
    own = Limits(max_nodes_per_job=1)
    assert effective_limits(own, [Limits(max_nodes_per_job=8, spot_allowed=False)]) == own


def test_of_several_groups_the_most_generous_value_applies():
    a = Limits(max_gpus_in_use=8, max_nodes_per_job=None, allowed_server_types=frozenset({"g2"}), spot_allowed=False,
               monthly_gpu_hour_budget=Decimal(100))
    b = Limits(max_gpus_in_use=16, max_nodes_per_job=2, allowed_server_types=frozenset({"g3"}), workspaces_allowed=False,
               monthly_gpu_hour_budget=None)
    limits = effective_limits(None, [a, b])
    assert limits.max_gpus_in_use == 16
    assert limits.max_nodes_per_job is None  # no limit beats any number
    assert limits.allowed_server_types == {"g2", "g3"}
    assert limits.spot_allowed and limits.workspaces_allowed
    assert limits.monthly_gpu_hour_budget is None


def test_each_hard_limit_is_refused_with_a_message_naming_its_quota():
    limits = Limits(max_nodes_per_job=1, allowed_server_types=frozenset({"g3"}), spot_allowed=False,
                    max_concurrent_jobs=2, max_gpus_in_use=8, monthly_gpu_hour_budget=Decimal(10))
    usage = Usage(unfinished_jobs=2, gpu_hours_this_month=Decimal("10.5"), month="2026-11")
    errors = job_limit_errors(limits, usage, JobAsk("spot", "g2", 8, 2))
    assert errors["node_count"] == "Your quota allows at most 1 node per job (quota: maximum nodes per job)."
    assert errors["server_type"] == "Your quota does not allow server type g2; allowed: g3 (quota: allowed server types)."
    assert errors["learning_type"] == "Your quota does not allow Spot Training (quota: Spot Training allowed)."
    whole = errors[NON_FIELD]
    assert "You have 2 Training Job(s) that have not ended; your quota allows 2 at once (quota: maximum concurrent jobs)." in whole
    assert "This job needs 16 GPUs at once; your quota allows 8 (quota: maximum GPUs in use at once)." in whole
    assert "Your monthly budget of 10 GPU-hours is used up: 10.5 used in 2026-11 (quota: monthly GPU-hour budget)." in whole


def test_gpus_in_use_now_do_not_refuse_a_job_they_make_it_wait():
    limits = Limits(max_gpus_in_use=16)
    usage = Usage(gpus_in_use=8)
    assert job_limit_errors(limits, usage, ASK) == {}
    assert scheduling_block(limits, usage, ASK) == (
        "Waiting for your GPU quota: 8 of 16 GPUs in use, this job needs 16 (quota: maximum GPUs in use at once)"
    )
    assert scheduling_block(limits, Usage(gpus_in_use=0), ASK) is None


def test_running_jobs_beyond_the_concurrent_quota_wait():
    limits = Limits(max_concurrent_jobs=2)
    assert scheduling_block(limits, Usage(running_jobs=2), ASK).startswith("Waiting for your job quota: 2 of 2 jobs run now")
    assert scheduling_block(limits, Usage(running_jobs=1), ASK) is None


def test_a_limit_lowered_after_creation_keeps_the_job_waiting_with_its_reason():
    reason = scheduling_block(Limits(max_nodes_per_job=1), Usage(), ASK)
    assert reason == "Waiting: Your quota allows at most 1 node per job (quota: maximum nodes per job)."
    assert scheduling_block(Limits(monthly_gpu_hour_budget=Decimal(5)), Usage(gpu_hours_this_month=Decimal(5), month="2026-11"), ASK).startswith(
        "Waiting: Your monthly budget of 5 GPU-hours is used up"
    )


def test_jobs_in_a_workspace_count_for_jobs_and_nodes_but_not_gpus_or_budget():
    limits = Limits(max_gpus_in_use=4, monthly_gpu_hour_budget=Decimal(0), max_nodes_per_job=1)
    in_workspace = JobAsk("on_demand", "g2", 8, 2, in_workspace=True)
    assert set(job_limit_errors(limits, Usage(gpus_in_use=4), in_workspace)) == {"node_count"}
    assert scheduling_block(Limits(max_gpus_in_use=4), Usage(gpus_in_use=4), in_workspace) is None


def test_workspaces_can_be_forbidden_or_limited_to_server_types():
    errors = workspace_limit_errors(Limits(workspaces_allowed=False, allowed_server_types=frozenset({"g3"})), "g2")
    assert errors[NON_FIELD] == "Your quota does not allow Training Workspaces (quota: Training Workspaces allowed)."
    assert errors["server_type"].startswith("Your quota does not allow server type g2")
    assert workspace_limit_errors(Limits(), "g2") == {}
