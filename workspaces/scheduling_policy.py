"""What Training Workspaces, the warm pool and quotas add to the scheduler (jobs.scheduling.policy).

Installed when Django starts (workspaces.apps). In each scheduler run:

1. workspaces take the idle nodes they wait for, before shared-pool jobs can (`reconcile`);
   the ledger then marks those nodes reserved: only the workspace's jobs may use them
   (jobs.scheduling.placement), and a job in a workspace uses no other node;
2. a job of a workspace that is being cancelled, or has no node yet, keeps waiting (`held`);
3. a job prefers nodes where its owner's environment is kept warm (same user, server type,
   image and script): `shape`;
4. a job that would exceed its owner's quota keeps waiting (`block`); a job admitted earlier
   in the same run counts for the ones behind it (`admit`);
5. each placement records whether it starts warm and the job page says why (not) (`placed`).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import timedelta

from django.contrib.auth import get_user_model

from jobs import actions as job_actions
from jobs.choices import JobStatus
from jobs.models import Placement, TrainingJob
from jobs.scheduling.capacity import JobHold, Ledger, Reservation
from jobs.scheduling.decision import Assignment, JobRequest
from nodeagent import protocol

from .agent_hints import add_warm_pool_hints
from .choices import WorkspaceStatus
from .models import Quota, WarmStart, Workspace
from .quotas import JobAsk, Limits, Usage, effective_limits, scheduling_block
from .reservations import active_reservations, reconcile_all
from .usage import gpu_hours_this_month
from .warm_data import keep_alive_window, warm_entries
from .warm_pool import ConfigKey, JobConfig, WarmEntry, WarmOutcome, by_config, config_key, outcome, warm_nodes

NOTE_LOOKBACK = timedelta(days=1)  # how far back "why not warm" looks for the owner's jobs


def config(job: TrainingJob) -> JobConfig:
    return JobConfig(job.pk, job.owner_id, job.server_type.name, job.image_url, job.script_url, job.node_count)


def limits_by_owner(owner_ids: set[int]) -> dict[int, Limits]:
    """Each owner's effective quota, in three queries whatever the number of owners."""
    if not owner_ids:
        return {}
    quotas = list(
        Quota.objects.filter(user_id__in=owner_ids).prefetch_related("allowed_server_types")
        | Quota.objects.filter(group__user__in=owner_ids).prefetch_related("allowed_server_types")
    )
    own = {q.user_id: q.limits() for q in quotas if q.user_id}
    by_group = {q.group_id: q.limits() for q in quotas if q.group_id}
    groups: dict[int, list[Limits]] = {}
    memberships = get_user_model().groups.through.objects.filter(user_id__in=owner_ids, group_id__in=list(by_group))
    for user_id, group_id in memberships.values_list("user_id", "group_id"):
        groups.setdefault(user_id, []).append(by_group[group_id])
    return {owner: effective_limits(own.get(owner), groups.get(owner, [])) for owner in owner_ids}


def usage_by_owner(limits: dict[int, Limits], ledger: Ledger) -> dict[int, Usage]:
    """What counts against each limited owner's quotas now, from the ledger."""
    owners = {owner for owner, limit in limits.items() if not limit.unlimited}
    gpus: Counter[int] = Counter()
    for node in ledger.nodes.values():
        for state in node.gpus.values():
            hold = state.hold
            # jobs in a workspace run on capacity its contract pays for: not counted
            if isinstance(hold, JobHold) and hold.owner_id in owners and hold.workspace_id is None:
                gpus[hold.owner_id] += 1
    running = Counter(
        TrainingJob.objects.filter(owner_id__in=owners, status__in=[JobStatus.CREATING, JobStatus.RUNNING])
        .values_list("owner_id", flat=True)
    )
    budgeted = get_user_model().objects.in_bulk([o for o in owners if limits[o].monthly_gpu_hour_budget is not None])
    usage = {}
    for owner in owners:
        usage[owner] = Usage(gpus_in_use=gpus[owner], running_jobs=running[owner])
        if owner in budgeted:
            hours, month = gpu_hours_this_month(budgeted[owner])
            usage[owner] = dataclasses.replace(usage[owner], gpu_hours_this_month=hours, month=month)
    return usage


def _workspace_holds(jobs: Sequence[TrainingJob], ledger: Ledger) -> dict[int, str]:
    held = {}
    ids = {job.workspace_id for job in jobs if job.workspace_id}
    states = dict(Workspace.objects.filter(pk__in=ids).values_list("pk", "status"))
    serving = {n.reservation.workspace_id for n in ledger.nodes.values() if n.reservation and not n.reservation.draining}
    for job in jobs:
        if not job.workspace_id:
            continue
        if states.get(job.workspace_id) == WorkspaceStatus.TERMINATING:
            held[job.pk] = f"Training Workspace {job.workspace.name} is being cancelled"  # reconcile stops the job
        elif job.workspace_id not in serving:
            held[job.pk] = f"Waiting for Training Workspace {job.workspace.name} to reserve its nodes ({states.get(job.workspace_id)})"
    return held


class WorkspacesRun:
    """The policies' part in one scheduler run."""

    def __init__(self, jobs: Sequence[TrainingJob], ledger: Ledger) -> None:
        self.jobs = {job.pk: job for job in jobs}
        self.ledger = ledger
        self.entries = by_config(warm_entries(keep_alive_window(), now=ledger.now, live_only=True))
        self.held = _workspace_holds(jobs, ledger)
        self.limits = limits_by_owner({job.owner_id for job in jobs})
        self.usage = usage_by_owner(self.limits, ledger)

    def shape(self, request: JobRequest) -> JobRequest:
        job = self.jobs.get(request.job_id)
        if job is None:
            return request
        job_config = config(job)
        warm = warm_nodes(self.entries.get(config_key(job_config), []), job_config, self.ledger.now)
        return dataclasses.replace(request, warm_nodes=frozenset(warm))

    def _ask(self, request: JobRequest) -> JobAsk:
        job = self.jobs[request.job_id]
        return JobAsk(job.learning_type, request.server_type, request.gpus_per_node, request.node_count, request.workspace_id is not None)

    def block(self, request: JobRequest) -> str | None:
        usage = self.usage.get(request.owner_id)
        if usage is None:
            return None  # no limits
        return scheduling_block(self.limits[request.owner_id], usage, self._ask(request))

    def admit(self, request: JobRequest) -> None:
        usage = self.usage.get(request.owner_id)
        if usage is None:
            return
        ask = self._ask(request)
        self.usage[request.owner_id] = dataclasses.replace(
            usage, running_jobs=usage.running_jobs + 1, gpus_in_use=usage.gpus_in_use + (0 if ask.in_workspace else ask.gpus),
        )

    def placed(self, started: Mapping[TrainingJob, Sequence[Assignment]]) -> None:
        """Record which placements start warm, and on each job whether it did and why (not):
        a constant number of statements for the whole run."""
        if not started:
            return
        # the jobs were read before start_attempts placed their next attempt
        new_attempt = {job.pk: job.current_attempt + 1 for job in started}
        placements = {
            (p.attempt.job_id, p.node_id): p
            for p in Placement.objects.filter(attempt__job__in=list(new_attempt)).select_related("attempt")
            if p.attempt.number == new_attempt[p.attempt.job_id]
        }
        recent: dict[int, list[WarmEntry]] = {}
        for entry in warm_entries(NOTE_LOOKBACK, owners={job.owner_id for job in started}, now=self.ledger.now):
            recent.setdefault(entry.owner_id, []).append(entry)
        reuses, notes = [], {}
        # a backlog starts hundreds of one owner's jobs per run: the nodes warm for each
        # configuration are found once, and a cold start's note (which does not depend on the
        # nodes) is worded once per configuration and workspace
        warm: dict[ConfigKey, dict[int, WarmEntry]] = {}
        cold: dict[tuple[ConfigKey, int | None], WarmOutcome] = {}
        for job, assignments in started.items():
            mine = recent.get(job.owner_id, [])
            job_config, nodes = config(job), [a.node_id for a in assignments]
            key = config_key(job_config)
            if key not in warm:
                warm[key] = warm_nodes(mine, job_config, self.ledger.now)
            if any(node_id in warm[key] for node_id in nodes):
                result = outcome(job_config, nodes, mine, self.ledger.now, self._why_taken(job, mine))
            else:
                if (key, job.workspace_id) not in cold:
                    cold[(key, job.workspace_id)] = outcome(job_config, nodes, mine, self.ledger.now, self._why_taken(job, mine))
                result = cold[(key, job.workspace_id)]
            reuses += [
                WarmStart(placement=placements[(job.pk, node_id)], source_job_id=entry.job_id, source_job_name=entry.job_name)
                for node_id, entry in result.reuse.items() if (job.pk, node_id) in placements
            ]
            notes[job.pk] = (result.started_warm, result.note)
        WarmStart.objects.bulk_create(reuses)
        job_actions.note_warm_starts(notes)  # the job page tells how the job first started

    def _why_taken(self, job: TrainingJob, recent: list[WarmEntry]) -> dict[int, str]:
        why = {}
        for node_id in {e.node_id for e in recent}:
            node = self.ledger.nodes.get(node_id)
            if node is None or not node.schedulable:
                why[node_id] = "offline or cordoned"
            elif job.workspace_id and (node.reservation is None or node.reservation.workspace_id != job.workspace_id):
                why[node_id] = "outside the job's Training Workspace"
            elif not job.workspace_id and node.reservation is not None:
                why[node_id] = "reserved by a Training Workspace"
            else:
                why[node_id] = "busy (not enough free GPUs)"
        return why


class WorkspacesPolicy:
    def reservations(self) -> list[Reservation]:
        return active_reservations()

    def reconcile(self, ledger: Ledger) -> bool:
        return reconcile_all(ledger)

    def begin(self, waiting: Sequence[TrainingJob], ledger: Ledger) -> WorkspacesRun:
        return WorkspacesRun(waiting, ledger)

    def agent_hints(self, placements: list[protocol.Placement]) -> list[protocol.Placement]:
        return add_warm_pool_hints(placements)
