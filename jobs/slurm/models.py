"""Slurm clusters staff register, the Slurm batch job of each Training Job, and its runs."""

from __future__ import annotations

import base64
import binascii
import hashlib
import secrets
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError
from django.db import models

from console import crypto

from . import jwt
from .adapters import API_VERSIONS
from .client import SlurmClient

TOKEN_LIFESPAN = 600  # seconds: a minted token outlives any single request by far


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def new_secret() -> tuple[str, str]:
    """(secret, its SHA-256): only the hash is stored."""
    secret = secrets.token_urlsafe(32)
    return secret, hash_secret(secret)


def validate_http_url(value: str) -> None:
    """http(s)://host[:port][/path]; unlike Django's URLValidator, a bare internal host name is fine."""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValidationError("Enter an http:// or https:// address, e.g. http://slurm-head:6820")


class GpuMetrics(models.TextChoices):
    AUTO = "auto", "NVML (real GPUs)"
    SIMULATED = "simulated", "Simulated GPUs (test clusters without GPUs)"
    OFF = "off", "None (node metrics only)"


class SlurmCluster(models.Model):
    """A Slurm cluster reached through slurmrestd; it serves exactly one server type."""

    name = models.SlugField(max_length=63, unique=True)
    server_type = models.OneToOneField(
        "jobs.ServerType", on_delete=models.PROTECT, related_name="slurm_cluster",
        help_text="Jobs of this server type run on this cluster instead of on node agents",
    )
    enabled = models.BooleanField(default=True, help_text="Off: jobs wait in Pending; nothing is submitted or polled")
    rest_url = models.CharField("slurmrestd URL", max_length=200, validators=[validate_http_url], help_text="e.g. http://slurm-head:6820")
    api_version = models.CharField(max_length=16, choices=[(v, v) for v in API_VERSIONS], default=API_VERSIONS[0])
    user_name = models.CharField(max_length=64, help_text="The service user: jobs run as this Unix user")
    # Fernet tokens (console.crypto); never rendered back
    jwt_key_encrypted = models.TextField(blank=True)
    token_encrypted = models.TextField(blank=True)
    on_demand_partition = models.CharField(max_length=64)
    spot_partition = models.CharField(max_length=64, help_text="Preemptible by the on-demand partition (PreemptMode=REQUEUE)")
    gpus_per_node = models.PositiveSmallIntegerField(help_text="GPUs per node (gres gpu) in both partitions")
    console_url = models.CharField(max_length=200, validators=[validate_http_url],
                                   help_text="How the cluster's nodes reach this console, e.g. http://console:8000")
    launcher = models.CharField(
        max_length=500, default="python3 -m nodeagent.slurm_step",
        help_text="Command line that starts the step launcher on a node (a Python with the nodeagent package)",
    )
    work_dir = models.CharField(max_length=500, default="/var/tmp/simpleai",
                                help_text="Node-local directory for the launchers' spools and the jobs' working directories")
    jobcomp_path = models.CharField(
        "job completion records", max_length=500,
        help_text="Where the console reads slurmctld's jobcomp/filetxt file (JobCompLoc)",
    )
    stop_grace_seconds = models.PositiveIntegerField(
        default=30, help_text="SIGTERM → this long → SIGKILL for the command; keep it under Slurm's KillWait",
    )
    gpu_metrics = models.CharField(max_length=16, choices=GpuMetrics.choices, default=GpuMetrics.AUTO)
    metrics_interval_seconds = models.PositiveIntegerField(default=10, help_text="GPU and node samples for the Monitoring tab (0: none)")
    slurm_version = models.CharField(max_length=32, blank=True, editable=False)
    last_checked_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_error = models.CharField(max_length=500, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        if not self.jwt_key_encrypted and not self.token_encrypted:
            raise ValidationError("Give either the JWT signing key or a token for the service user.")
        if self.server_type_id and self.gpus_per_node < self.server_type.gpus_per_node:
            raise ValidationError({"gpus_per_node": (
                f"Server type {self.server_type.name} offers allocations of up to {self.server_type.gpus_per_node} "
                f"GPUs per node; this cluster's nodes must have at least that many."
            )})
        if self.on_demand_partition and self.on_demand_partition == self.spot_partition:
            raise ValidationError({"spot_partition": "Spot work needs its own, preemptible partition."})

    def partition_for(self, learning_type: str) -> str:
        return self.spot_partition if learning_type == "spot" else self.on_demand_partition

    # -- credentials -----------------------------------------------------------------------------
    def set_jwt_key(self, key: bytes) -> None:
        self.jwt_key_encrypted = crypto.encrypt(base64.b64encode(key).decode()) if key else ""

    def set_token(self, token: str) -> None:
        self.token_encrypted = crypto.encrypt(token.strip())

    def token(self) -> str:
        """A token for the service user: minted when the key is known, else the stored one."""
        if self.jwt_key_encrypted:
            return jwt.mint(base64.b64decode(crypto.decrypt(self.jwt_key_encrypted)), self.user_name, TOKEN_LIFESPAN)
        return crypto.decrypt(self.token_encrypted)

    def client(self, timeout: float = 10.0) -> SlurmClient:
        return SlurmClient(self.rest_url, self.api_version, self.user_name, self.token, timeout=timeout)


def decode_key(text: str) -> bytes:
    """A signing key pasted as base64 (`base64 -w0 jwt_hs256.key`)."""
    try:
        return base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValidationError("The JWT key must be the key file in base64 (base64 -w0 jwt_hs256.key).") from exc


class SlurmJob(models.Model):
    """The Slurm batch job of one Training Job. Kept (job = NULL) after the Training Job is deleted
    until Slurm has ended it: the poll cancels such orphans."""

    job = models.OneToOneField("jobs.TrainingJob", null=True, blank=True, on_delete=models.SET_NULL, related_name="slurm")
    training_job_id = models.PositiveBigIntegerField(help_text="Kept after the Training Job is deleted")
    cluster = models.ForeignKey(SlurmCluster, on_delete=models.PROTECT, related_name="jobs")
    slurm_job_id = models.PositiveBigIntegerField(null=True, blank=True, help_text="None until submitted")
    launch_key_hash = models.CharField(max_length=64, editable=False)
    state = models.CharField(max_length=32, blank=True, help_text="As Slurm said last")
    reason = models.CharField(max_length=200, blank=True)
    restart_count = models.PositiveIntegerField(default=0)
    submitted_at = models.DateTimeField(null=True, blank=True)
    cancel_sent_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True, help_text="Outcome applied; no longer polled")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "slurm_job_id"], name="unique_slurm_job_per_cluster"),
        ]
        indexes = [
            # the poll reads a cluster's unfinished jobs every tick
            models.Index(fields=["cluster", "finished_at"], name="slurmjob_cluster_active_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.cluster.name}:{self.slurm_job_id or '-'} (job {self.training_job_id})"


class SlurmRun(models.Model):
    """One run of the batch job (Slurm starts it again after a requeue): one attempt of the job."""

    slurm_job = models.ForeignKey(SlurmJob, on_delete=models.CASCADE, related_name="runs")
    attempt = models.OneToOneField("jobs.JobAttempt", on_delete=models.CASCADE, related_name="slurm_run")
    restart_count = models.PositiveIntegerField()
    nodes = models.JSONField(default=list)
    # SHA-256 of the token the run's launchers authenticate with; empty until the batch step redeemed one
    token_hash = models.CharField(max_length=64, blank=True, db_index=True, editable=False)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    state = models.CharField(max_length=32, blank=True, help_text="How the run ended, in Slurm's words")
    exit_code = models.IntegerField(null=True, blank=True)
    exit_signal = models.IntegerField(null=True, blank=True)

    class Meta:
        ordering = ["slurm_job", "restart_count"]
        constraints = [
            models.UniqueConstraint(fields=["slurm_job", "restart_count"], name="unique_run_per_restart"),
        ]

    def __str__(self) -> str:
        return f"{self.slurm_job} run {self.restart_count}"
