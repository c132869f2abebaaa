"""Simulation test of the shared cluster: random sequences of what users, agents, nodes and time
do, driven through the real scheduler, lifecycle, failover, spot, warm-pool and workspace
actions on PostgreSQL, with fake agents and a controlled clock. After every step the safety
invariants hold; after every scheduler run the work-conserving ones; at the end of every
sequence, with faults healed and commands finishing, every job ends (nothing is wedged).

Budget: SIMULATION_EXAMPLES sequences (default 200) of up to SIMULATION_STEPS steps (default 40),
in four shards of their own seeds. Deterministic by default (the same sequences every run);
SIMULATION_RANDOM=1 explores others.
A failure prints the steps that reproduce it, and a `@reproduce_failure` line to replay it.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from datetime import UTC, datetime, timedelta
from unittest import mock

import pytest
from django.contrib.auth.models import Group
from django.db import transaction
from hypothesis import HealthCheck, seed, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, get_state_machine_test, invariant, rule

from jobs import actions, lifecycle
from jobs.choices import TERMINAL_STATUSES, JobStatus
from jobs.models import Node, NodeToken, Placement, TrainingJob
from jobs.models.attempts import HOLDING_STATES
from jobs.nodes import desired, hardware, registry
from jobs.recovery import failover
from jobs.scheduling import scheduler_run
from jobs.tests.factories import UserFactory, job_fields
from workspaces import actions as workspace_actions
from workspaces.actions import ResizeRefused
from workspaces.choices import ACCEPTS_JOBS, WhenBusy
from workspaces.models import Quota, Workspace
from workspaces.reservations import reconcile_now

from .invariants import check_after_scheduling, check_always, snapshot

START = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
FLUSH_STEP = timedelta(seconds=5)  # how often a listening console writes that it listens (< LISTEN_GAP)
NODE_NAMES = ["sim-1", "sim-2", "sim-3", "sim-4"]
GPU_SIZES = [1, 2, 4, 8]


class Clock:
    """The time every part of the console reads (django.utils.timezone.now), moved by the test."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


def _info(name: str) -> dict:
    return {
        "name": name, "server_type": "g2", "address": "127.0.0.1", "cpus": 96, "memory_gb": 2048,
        "runtime": "process", "agent_version": "sim",
        "gpus": [{"index": i, "uuid": f"{name}-{i}", "model": "H100", "memory_gb": 80} for i in range(8)],
    }


@pytest.fixture
def world(db, settings):
    """Three users (Bob with a GPU quota, Carol in a team with a job quota), four 8-GPU nodes."""
    settings.JOB_STOP_GRACE_SECONDS = 30
    settings.NODE_LOST_AFTER_SECONDS = 30
    users = {name: UserFactory(username=name) for name in ("alice", "bob", "carol")}
    Quota.objects.create(user=users["bob"], max_gpus_in_use=16)
    team = Group.objects.create(name="team")
    users["carol"].groups.add(team)
    Quota.objects.create(group=team, max_concurrent_jobs=2)
    clock = Clock()
    with mock.patch("django.utils.timezone.now", clock):
        tokens, resumes = {}, {}
        for name in NODE_NAMES:
            record, _ = NodeToken.mint(name)
            tokens[name] = record
            resumes[name] = registry.register(record, _info(name))[1]
        yield users, tokens, resumes, clock


class ClusterMachine(RuleBasedStateMachine):
    users: dict = {}
    tokens: dict = {}
    resumes: dict = {}  # each node's resume secret after the world's registration
    clock: Clock

    def __init__(self) -> None:
        super().__init__()
        self.savepoint = transaction.savepoint()
        self.clock.now = START
        self.node_ids = dict(Node.objects.values_list("name", "pk"))
        self.alive = dict.fromkeys(NODE_NAMES, True)
        self.resume = dict(self.resumes)  # the agents' secrets; each example starts from the world's
        self.names = itertools.count(1)

    # --- helpers --------------------------------------------------------------------------

    def _jobs(self, *statuses: str) -> list[TrainingJob]:
        query = TrainingJob.objects.order_by("pk")
        return list(query.filter(status__in=statuses) if statuses else query)

    def _pick(self, items: list, k: int):
        return items[k % len(items)] if items else None

    def _holding(self, job: TrainingJob) -> list[Placement]:
        return list(Placement.objects.filter(attempt__job=job, attempt__number=job.current_attempt, state__in=HOLDING_STATES))

    def _on_alive_node(self, placement: Placement) -> bool:
        return placement.node is not None and self.alive.get(placement.node.name, False)

    def _report(self, placement: Placement, state: str, exit_code: int | None = None, signal: int | None = None) -> None:
        lifecycle.record_placement(
            lifecycle.PlacementReport(placement.attempt.job_id, placement.attempt.number, placement.role, state,
                                      exit_code=exit_code, signal=signal),
            placement.node_id,
        )

    # --- users ----------------------------------------------------------------------------

    @rule(user=st.sampled_from(["alice", "bob", "carol"]), spot=st.booleans(), failover_on=st.booleans(),
          node_count=st.integers(1, 4), gpus=st.sampled_from(GPU_SIZES), keep=st.sampled_from([0, 10]),
          in_workspace=st.booleans())
    def create_job(self, user, spot, failover_on, node_count, gpus, keep, in_workspace) -> None:
        owner = self.users[user]
        workspace = None
        if in_workspace and not spot:
            workspace = Workspace.objects.filter(owner=owner, status__in=ACCEPTS_JOBS).first()
            if workspace is not None:
                node_count = min(node_count, workspace.node_count)
        # what the form refuses is never created: Bob's GPU quota, Carol's team's job quota
        if user == "bob" and workspace is None and node_count * gpus > 16:
            return
        if user == "carol" and TrainingJob.objects.filter(owner=owner).exclude(status__in=[*TERMINAL_STATUSES, JobStatus.TERMINATING]).count() >= 2:
            return
        actions.create_job(owner, job_fields(
            name=f"{user}-{next(self.names)}", learning_type="spot" if spot else "on_demand",
            failover_enabled=failover_on and not spot, gpus_per_node=gpus, node_count=node_count,
            memory_gb=256 * gpus, keep_alive_minutes=keep, workspace=workspace, script_url="s3://scripts/train.py",
        ), [])

    @rule(k=st.integers(0, 99))
    def delete_job(self, k) -> None:
        job = self._pick(self._jobs(), k)
        if job is not None:
            actions.delete_job(job.pk)

    @rule(user=st.sampled_from(["alice", "bob"]), node_count=st.integers(1, 2))
    def create_workspace(self, user, node_count) -> None:
        owner = self.users[user]
        if not Workspace.objects.filter(owner=owner).exists():
            workspace_actions.create_workspace(owner, {
                "name": f"ws-{user}", "server_type": "g2", "gpus_per_node": 8, "memory_gb": 2048,
                "node_count": node_count, "contract_months": 1,
            })

    @rule(k=st.integers(0, 9), node_count=st.integers(1, 3), drain=st.booleans())
    def resize_workspace(self, k, node_count, drain) -> None:
        workspace = self._pick(list(Workspace.objects.order_by("pk")), k)
        if workspace is not None:
            with contextlib.suppress(ResizeRefused):
                workspace_actions.resize_workspace(workspace.pk, node_count, WhenBusy.DRAIN if drain else WhenBusy.REFUSE)

    @rule(k=st.integers(0, 9))
    def cancel_workspace(self, k) -> None:
        workspace = self._pick(list(Workspace.objects.order_by("pk")), k)
        if workspace is not None:
            workspace_actions.cancel_workspace(workspace.pk)

    # --- agents ---------------------------------------------------------------------------

    @rule(k=st.integers(0, 99))
    def agents_start_a_job(self, k) -> None:
        job = self._pick(self._jobs(JobStatus.CREATING), k)
        for placement in self._holding(job) if job else []:
            if self._on_alive_node(placement):
                self._report(placement, "running")

    @rule(k=st.integers(0, 99), code=st.sampled_from([0, 0, 0, 1]))
    def a_command_exits(self, k, code) -> None:
        job = self._pick(self._jobs(JobStatus.RUNNING), k)
        placements = [p for p in self._holding(job) if self._on_alive_node(p)] if job else []
        if placements:
            self._report(placements[0], "exited", exit_code=code)

    @rule(k=st.integers(0, 99))
    def a_gpu_fails_under_a_job(self, k) -> None:
        """An XID 79 (fallen off the bus) reported by the agent, then the crash it causes."""
        job = self._pick(self._jobs(JobStatus.RUNNING, JobStatus.CREATING), k)
        placements = [p for p in self._holding(job) if self._on_alive_node(p)] if job else []
        if placements:
            placement = placements[0]
            hardware.record_fault(placement.node_id, {
                "kind": "xid", "xid": 79, "gpu_index": placement.gpu_indices[0], "ts": self.clock.now.timestamp(),
                "detail": "GPU has fallen off the bus",
            })
            self._report(placement, "exited", exit_code=1)

    @rule(name=st.sampled_from(NODE_NAMES))
    def an_agent_applies_its_desired_state(self, name) -> None:
        """What the agent does on every desired-state message: stop what is not wanted, start what is."""
        if not self.alive[name]:
            return
        node_id = self.node_ids[name]
        holding = list(Placement.objects.filter(node_id=node_id, state__in=HOLDING_STATES).select_related("attempt"))
        if not holding:
            return  # nothing wanted either: what a node should run holds GPUs there (one query, not the whole read)
        wanted = {(p["job_id"], p["attempt"], p["role"]) for p in desired.desired_placements(node_id)}
        for placement in holding:
            key = (placement.attempt.job_id, placement.attempt.number, placement.role)
            if key not in wanted:
                self._report(placement, "exited", signal=15)
            elif placement.state == "assigned":
                self._report(placement, "preparing")

    # --- nodes and time -------------------------------------------------------------------

    @rule(name=st.sampled_from(NODE_NAMES))
    def a_node_goes_silent(self, name) -> None:
        self.alive[name] = False

    @rule(name=st.sampled_from(NODE_NAMES))
    def a_node_comes_back(self, name) -> None:
        self.alive[name] = True
        # the same agent process, back: it presents its session's secret (its connection may still look alive)
        self.resume[name] = registry.register(self.tokens[name], _info(name), self.resume[name])[1]

    @rule(name=st.sampled_from(NODE_NAMES))
    def staff_uncordon(self, name) -> None:
        actions.set_cordon(self.node_ids[name], False)

    @rule(seconds=st.sampled_from([1, 5, 20, 45, 120, 700]))
    def time_passes(self, seconds) -> None:
        """The console listens all along (its heartbeat flusher writes every few seconds) and the
        nodes that are alive beat; then the watchdog and the failover sweep run."""
        end = self.clock.now + timedelta(seconds=seconds)
        while self.clock.now + FLUSH_STEP < end:
            self.clock.now += FLUSH_STEP
            registry.record_heartbeats([])
        self.clock.now = end
        self._beat_and_watch()

    @rule(seconds=st.sampled_from([20, 45, 120]))
    def the_console_is_down(self, seconds) -> None:
        """daphne, its database or Redis is away: no heartbeat is processed. When it listens
        again, no node that stayed alive may be declared Lost for the silence."""
        self.clock.now += timedelta(seconds=seconds)
        self._beat_and_watch()

    def _beat_and_watch(self) -> None:
        registry.record_heartbeats([
            registry.Beat(self.node_ids[name], Node.objects.get(name=name).session, self.clock.now)
            for name, alive in self.alive.items() if alive
        ])
        lost = registry.watch_heartbeats()
        assert not [name for name in lost if self.alive[name]], f"alive nodes declared Lost: {lost}"
        failover.finish_overdue_assessments()

    @rule()
    def workspaces_reconcile(self) -> None:
        reconcile_now()

    @rule()
    def the_scheduler_runs(self) -> None:
        summary = scheduler_run.run()
        check_after_scheduling(snapshot(), summary.decision or scheduler_run.Decision())

    @invariant()
    def safe(self) -> None:
        check_always(snapshot())

    # --- the end of a sequence: heal everything and let it all finish ---------------------

    def _settle(self) -> None:
        for name in NODE_NAMES:
            if not self.alive[name] or Node.objects.filter(name=name, lost=True).exists():
                self.a_node_comes_back(name)
            self.staff_uncordon(name)
        for _ in range(3):
            for name in NODE_NAMES:
                self.an_agent_applies_its_desired_state(name)
            for job in self._jobs(JobStatus.CREATING):
                for placement in self._holding(job):
                    self._report(placement, "running")
            for job in self._jobs(JobStatus.RUNNING):
                for placement in self._holding(job):
                    self._report(placement, "exited", exit_code=0)
            self.the_scheduler_runs()  # the freed GPUs go to waiting jobs, which the next pass runs
        self.time_passes(60)
        reconcile_now()
        self.the_scheduler_runs()

    def teardown(self) -> None:
        try:
            # workspaces are ended too: their reserved nodes could leave a big shared-pool job no room
            for workspace in Workspace.objects.all():
                workspace_actions.cancel_workspace(workspace.pk)
            for _ in range(25):
                self._settle()
                if not self._jobs(*(set(JobStatus) - TERMINAL_STATUSES)):
                    break
            stuck = [(j.name, j.status, j.status_reason) for j in self._jobs(*(set(JobStatus) - TERMINAL_STATUSES))]
            assert not stuck, f"wedged: {stuck}"
            check_always(snapshot())
        finally:
            transaction.savepoint_rollback(self.savepoint)


EXAMPLES = int(os.environ.get("SIMULATION_EXAMPLES", "200"))
SHARDS = 4  # the budget in four tests of their own seeds, so that pytest-xdist workers share it
RANDOM = os.environ.get("SIMULATION_RANDOM", "0") == "1"


# each shard is one test: pytest-timeout's interrupt inside a sequence would leave the database
# connection mid-query and hypothesis replaying a half-run sequence (FlakyStrategyDefinition)
@pytest.mark.timeout(1200)
@pytest.mark.duration(65)
@pytest.mark.parametrize("shard", range(SHARDS), ids=[f"shard-{n}" for n in range(SHARDS)])  # units of their own
def test_the_shared_cluster_stays_fair_and_correct_under_random_sequences(world, shard):
    users, tokens, resumes, clock = world
    ClusterMachine.users, ClusterMachine.tokens, ClusterMachine.resumes, ClusterMachine.clock = users, tokens, resumes, clock
    test = get_state_machine_test(ClusterMachine, settings=settings(
        max_examples=-(-EXAMPLES // SHARDS),
        stateful_step_count=int(os.environ.get("SIMULATION_STEPS", "40")),
        deadline=None, database=None, print_blob=True, suppress_health_check=list(HealthCheck),
    ))
    # the same sequences on every run (a seed per shard) unless SIMULATION_RANDOM=1 asks for new ones
    (test if RANDOM else seed(shard)(test))()
