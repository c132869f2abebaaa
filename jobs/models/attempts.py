"""Attempts: every placement of a job on nodes is one attempt; each node's part is a Placement."""

from __future__ import annotations

from django.db import models

from console.lib.choices import TextChoices


class PlacementState(TextChoices):
    ASSIGNED = "assigned"
    PREPARING = "preparing"
    RUNNING = "running"
    EXITED = "exited"
    LOST = "lost"  # the node stopped answering while it held this placement
    # its job stopped and the stop grace ended without the agent confirming: it holds nothing
    RELEASED = "released"


# A placement in one of these holds its node's GPUs.
HOLDING_STATES = (PlacementState.ASSIGNED, PlacementState.PREPARING, PlacementState.RUNNING)


class AttemptKind(TextChoices):
    INITIAL = "initial"
    FAILOVER = "failover"  # placed again after a hardware fault or a lost node
    SPOT_RESUME = "spot_resume"  # placed again after a spot interruption
    # placed on on-demand capacity: spot capacity did not return within the job's fallback budget
    ON_DEMAND_FALLBACK = "fallback", "On-demand fallback"


class JobAttempt(models.Model):
    # indexed by unique_attempt_number, which leads with it (no second index to write)
    job = models.ForeignKey("jobs.TrainingJob", on_delete=models.CASCADE, related_name="attempts", db_index=False)
    number = models.PositiveIntegerField()
    kind = models.CharField(max_length=16, choices=AttemptKind.choices, default=AttemptKind.INITIAL)
    master_addr = models.CharField(max_length=255)
    master_port = models.PositiveIntegerField()
    resume_step = models.IntegerField(null=True, blank=True)
    # placed on on-demand capacity after a spot job's fallback: billed at the on-demand price
    on_demand = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    running_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    # when its job left Creating/Running: from then on its placements hold GPUs only for the
    # stop grace (jobs.scheduling.capacity)
    stop_requested_at = models.DateTimeField(null=True, blank=True)
    cause = models.CharField(max_length=500, blank=True, help_text="Why this attempt ended")
    # what ended it, for the time-lost breakdown (jobs.recovery.goodput): when the fault happened as well as
    # the console knows (a node's last beat or closed connection, a GPU's event, the exit), whose
    # fault it was ("platform" or "user") and on which node
    fault_at = models.DateTimeField(null=True, blank=True)
    fault_by = models.CharField(max_length=8, blank=True)
    fault_node = models.CharField(max_length=63, blank=True)
    # when the checkpoint it resumed from became durable (the steps after it were redone)
    resume_checkpoint_at = models.DateTimeField(null=True, blank=True)
    # seconds of training redone or waited for because of how the previous attempt ended
    lost_seconds = models.FloatField(default=0)
    # the attempt's own object-storage identity job-<job id>-a<number> (jobs.storage.credentials):
    # its key, its secret (a Fernet token, console.lib.crypto), and when it was revoked; no key: none
    # was minted (no object storage, or an attempt older than tenant storage)
    storage_access_key = models.CharField(max_length=32, blank=True)
    storage_secret_encrypted = models.TextField(blank=True)
    storage_revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["job", "number"]
        constraints = [models.UniqueConstraint(fields=["job", "number"], name="unique_attempt_number")]
        indexes = [
            # the credential sweep (jobs.storage.credentials.sweep) reads only the attempts whose
            # keys still work: a few, however many attempts there ever were
            models.Index(fields=["id"], name="attempt_live_keys_idx",
                         condition=models.Q(storage_revoked_at__isnull=True) & ~models.Q(storage_access_key="")),
        ]

    def __str__(self) -> str:
        return f"{self.job_id}#{self.number}"


class Placement(models.Model):
    # both indexed by the constraint and the index below, which lead with them: a report's state
    # change rewrites every index of its row, so none is kept twice
    attempt = models.ForeignKey(JobAttempt, on_delete=models.CASCADE, related_name="placements", db_index=False)
    node = models.ForeignKey("jobs.Node", on_delete=models.SET_NULL, null=True, related_name="placements", db_index=False)
    node_name = models.CharField(max_length=63, help_text="Kept when the node row is deleted")
    role = models.CharField(max_length=32)
    node_rank = models.PositiveSmallIntegerField()
    gpu_indices = models.JSONField(default=list)
    state = models.CharField(max_length=16, choices=PlacementState.choices, default=PlacementState.ASSIGNED)
    exit_code = models.IntegerField(null=True, blank=True)
    exit_signal = models.IntegerField(null=True, blank=True)
    message = models.CharField(max_length=1000, blank=True)
    # set when the agent could not prepare the placement or upload its output (protocol.PREPARATION_FAILURES)
    failure = models.CharField(max_length=32, blank=True)
    output_url = models.CharField(max_length=1024, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    # the warm hold on its GPUs after it ended (jobs.scheduling.capacity): released early when another job
    # took them, and for what
    warm_released_at = models.DateTimeField(null=True, blank=True)
    warm_released_for = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["attempt", "node_rank"]
        constraints = [models.UniqueConstraint(fields=["attempt", "role"], name="unique_role_per_attempt")]
        indexes = [
            # free-GPU accounting and desired-state lookups scan a node's holding placements
            models.Index(fields=["node", "state"], name="placement_node_state_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.attempt} {self.role}@{self.node_name}"
