"""The node registry the scheduler allocates from: nodes, their GPUs, and agent tokens."""

from __future__ import annotations

import hashlib
import secrets

from django.db import models
from django.utils import timezone

from ..choices import NodeStatus


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class NodeToken(models.Model):
    """A node agent's credential. Only its SHA-256 is stored; the token is shown once."""

    name = models.CharField(max_length=63, help_text="The node this token registers")
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name", "-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({'revoked' if self.revoked_at else 'active'})"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None

    @classmethod
    def mint(cls, name: str) -> tuple[NodeToken, str]:
        """A new token for `name`; earlier active tokens of that node are revoked."""
        cls.objects.filter(name=name, revoked_at__isnull=True).update(revoked_at=timezone.now())
        token = f"sat_{secrets.token_urlsafe(32)}"
        return cls.objects.create(name=name, token_hash=hash_token(token)), token

    def revoke(self) -> None:
        self.revoked_at = timezone.now()
        self.save(update_fields=["revoked_at"])


class Node(models.Model):
    name = models.CharField(max_length=63, unique=True)
    server_type = models.ForeignKey("jobs.ServerType", on_delete=models.PROTECT, related_name="nodes")
    address = models.CharField(max_length=255, help_text="Where other nodes reach this one")
    cpus = models.PositiveIntegerField(default=0)
    memory_gb = models.PositiveIntegerField(default=0)
    runtime = models.CharField(max_length=16, default="process")
    agent_version = models.CharField(max_length=32, blank=True)
    connected = models.BooleanField(default=False)
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)
    lost = models.BooleanField(default=False, help_text="No heartbeat within the grace period")
    cordoned = models.BooleanField(default=False, help_text="Takes no new placements")
    cordon_reason = models.CharField(max_length=500, blank=True)
    # grows with every accepted hello: only the newest connection of a node may act for it
    session = models.PositiveBigIntegerField(default=0)
    # SHA-256 of the current session's resume secret (the welcome's `resume`): while the node's
    # connection is alive, only a hello presenting it may open a new session (jobs.nodes.registry)
    resume_hash = models.CharField(max_length=64, blank=True, default="", editable=False)
    # when the agent sent its newest processed heartbeat, on the console's clock (jobs.channel.heartbeats)
    last_sent_at = models.DateTimeField(null=True, blank=True)
    # when its agent's connection closed without the console asking (the agent process ended,
    # or its machine reset the connection), as confirmed by the console process that saw it
    # live on (jobs.channel.heartbeats): evidence of death the watchdog acts on within seconds
    closed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def status(self, busy: bool | None = None) -> str:
        """Ready, Busy, Cordoned or Lost; `busy` may be passed in to save a query."""
        if self.lost:
            return NodeStatus.LOST
        if self.cordoned:
            return NodeStatus.CORDONED
        if busy is None:
            busy = self.placements.filter(state__in=["assigned", "preparing", "running"]).exists()
        return NodeStatus.BUSY if busy else NodeStatus.READY


class NodeGPU(models.Model):
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveSmallIntegerField()
    uuid = models.CharField(max_length=80)
    model = models.CharField(max_length=64)
    memory_gb = models.PositiveIntegerField()
    healthy = models.BooleanField(default=True)

    class Meta:
        ordering = ["node", "index"]
        constraints = [models.UniqueConstraint(fields=["node", "index"], name="unique_gpu_index_per_node")]

    def __str__(self) -> str:
        return f"{self.node.name}:{self.index} {self.model}"


class HardwareEvent(models.Model):
    """Hardware evidence an agent reported (XID, ECC, row remap, NVLink, GPU lost, ...)."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="hardware_events")
    gpu_index = models.PositiveSmallIntegerField(null=True, blank=True, help_text="None: the whole node")
    kind = models.CharField(max_length=32)
    xid = models.PositiveIntegerField(null=True, blank=True)
    detail = models.CharField(max_length=500, blank=True)
    occurred_at = models.DateTimeField()
    received_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-occurred_at"]
        indexes = [
            # the failover decision reads a node's events since an attempt started
            models.Index(fields=["node", "occurred_at"], name="hwevent_node_time_idx"),
        ]

    def __str__(self) -> str:
        what = f"XID {self.xid}" if self.kind == "xid" else self.kind
        return f"{self.node.name} GPU {self.gpu_index}: {what}"


class RejectedAgentMessage(models.Model):
    """An agent message the console refused (malformed, out of range, or a write the node may not
    make): acknowledged so the agent drops it, and kept here for staff to look at."""

    node = models.ForeignKey(Node, null=True, blank=True, on_delete=models.SET_NULL, related_name="rejected_messages")
    node_name = models.CharField(max_length=63, blank=True, help_text="The token's node, kept when the node is deleted")
    msg_type = models.CharField(max_length=40, blank=True)
    msg_id = models.BigIntegerField(null=True, blank=True)
    reason = models.CharField(max_length=500)
    body = models.TextField(blank=True, help_text="The message as received, cut to 64 kB")
    received_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-received_at", "-id"]

    def __str__(self) -> str:
        return f"{self.node_name}: {self.msg_type or '?'} #{self.msg_id}: {self.reason[:60]}"


class ConsoleListening(models.Model):
    """One row: when the console last processed agents' heartbeats, and since when it has done
    so without a gap. The watchdog declares a node Lost only for a silence the console itself
    was listening through, so an outage of the console, its database or Redis loses no node."""

    alive_at = models.DateTimeField()
    listening_since = models.DateTimeField()
    # how late the console read the heartbeats it wrote (the worst of a flush, kept for
    # LISTEN_GAP): a console that far behind gives every node that much longer before Lost
    read_lag_seconds = models.FloatField(default=0.0)
    read_lag_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"listening since {self.listening_since:%Y-%m-%d %H:%M:%S}, last at {self.alive_at:%H:%M:%S}"
