"""Slurm clusters staff register, the Slurm batch job of each Training Job, and its runs."""

from __future__ import annotations

import base64
import binascii
import hashlib
import secrets
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models

from console.lib import crypto
from console.lib.choices import TextChoices

from . import jwt, request
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


class GpuMetrics(TextChoices):
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
    # Fernet tokens (console.lib.crypto); never rendered back
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
    # -- the request: how this cluster runs the server type's jobs (jobs.slurm.request) --------------
    gpu_type = models.CharField(
        "GPU GRES type", max_length=32, blank=True,
        help_text="The GPU type the cluster declares in gres.conf (Type=), e.g. h100: jobs ask for gpu:h100:N. "
                  "Empty: untyped gpu:N",
    )
    constraint = models.CharField(max_length=200, blank=True, help_text="Node features every job needs (--constraint), e.g. ib&nvlink")
    qos = models.CharField("QoS", max_length=64, blank=True, help_text="--qos for on-demand jobs (and spot jobs unless set below)")
    spot_qos = models.CharField("spot QoS", max_length=64, blank=True, help_text="--qos for spot jobs")
    default_account = models.CharField(
        max_length=64, blank=True,
        help_text="--account for users without an account of their own (Slurm accounts below); empty: the user's default",
    )
    default_time_limit_minutes = models.PositiveIntegerField(
        default=24 * 60, validators=[MinValueValidator(1)], help_text="--time for jobs that set none (minutes)",
    )
    max_time_limit_minutes = models.PositiveIntegerField(
        default=7 * 24 * 60, validators=[MinValueValidator(1)], help_text="The longest time limit a job may ask for (minutes)",
    )
    extra_sbatch_options = models.CharField(
        "fixed sbatch options", max_length=500, blank=True,
        help_text="Added to every job, e.g. --reservation=train --mail-type=END,FAIL --mail-user=ops@example.com",
    )
    accounting = models.BooleanField(
        "slurmdbd accounting", default=False,
        help_text="The cluster has slurmdbd and slurmrestd serves its endpoints (-s openapi/dbv0.0.38): each ended "
                  "job's account, elapsed time and allocated TRES are read from accounting",
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
        if self.default_time_limit_minutes and self.max_time_limit_minutes and \
                self.default_time_limit_minutes > self.max_time_limit_minutes:
            raise ValidationError({"default_time_limit_minutes": "The default time limit is longer than the maximum."})
        try:
            request.parse_options(self.extra_sbatch_options)
        except ValueError as exc:
            raise ValidationError({"extra_sbatch_options": str(exc)}) from exc

    def rules(self) -> request.Rules:
        return request.Rules(
            on_demand_partition=self.on_demand_partition, spot_partition=self.spot_partition, gpu_type=self.gpu_type,
            constraint=self.constraint, qos=self.qos, spot_qos=self.spot_qos, account=self.default_account,
            default_time_minutes=self.default_time_limit_minutes, max_time_minutes=self.max_time_limit_minutes,
            extra_options=self.extra_sbatch_options,
        )

    def partition_for(self, learning_type: str) -> str:
        return self.spot_partition if learning_type == "spot" else self.on_demand_partition

    # -- credentials -----------------------------------------------------------------------------
    def set_jwt_key(self, key: bytes) -> None:
        self.jwt_key_encrypted = crypto.encrypt(base64.b64encode(key).decode()) if key else ""

    def set_token(self, token: str) -> None:
        self.token_encrypted = crypto.encrypt(token.strip())

    def token(self, user: str = "") -> str:
        """A token for the service user (or `user`, minted with the key): minted when the key is
        known, else the stored one."""
        if self.jwt_key_encrypted:
            return jwt.mint(base64.b64decode(crypto.decrypt(self.jwt_key_encrypted)), user or self.user_name, TOKEN_LIFESPAN)
        if user and user != self.user_name:
            raise ValueError(f"cluster {self.name} has no JWT key: it cannot speak for Unix user {user}")
        return crypto.decrypt(self.token_encrypted)

    def client(self, timeout: float = 10.0, user: str = "") -> SlurmClient:
        """slurmrestd as the service user, or as `user`: what that client submits runs as that Unix user."""
        name = user or self.user_name
        return SlurmClient(self.rest_url, self.api_version, name, lambda: self.token(name), timeout=timeout)


def check_cluster(cluster: SlurmCluster) -> tuple[bool, str]:
    """Ping slurmrestd with the service user's token and look for both partitions; records the
    Slurm version and the error on the row. (ok, what to tell the operator)."""
    from django.utils import timezone

    from .client import SlurmError

    try:
        client = cluster.client(timeout=5)
        version = client.ping()
        partitions = set(client.partitions())
    except (SlurmError, ValueError) as exc:
        SlurmCluster.objects.filter(pk=cluster.pk).update(last_checked_at=timezone.now(), last_error=str(exc)[:500])
        return False, str(exc)
    missing = [p for p in (cluster.on_demand_partition, cluster.spot_partition) if p not in partitions]
    error = f"no partition {', '.join(missing)} (Slurm has {', '.join(sorted(partitions))})" if missing else ""
    SlurmCluster.objects.filter(pk=cluster.pk).update(slurm_version=version, last_checked_at=timezone.now(), last_error=error)
    if error:
        return False, f"Slurm {version} answers, but there is {error}"
    return True, f"Slurm {version} answers; partitions found"


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
    account = models.CharField(max_length=64, blank=True, help_text="The Slurm account it was submitted to")
    run_as = models.CharField(max_length=64, blank=True, help_text="The Unix user it runs as (empty: the service user)")
    # from slurmdbd once the job ended (clusters with accounting): what sacct says it used
    accounted_at = models.DateTimeField(null=True, blank=True)
    accounted_state = models.CharField(max_length=32, blank=True)
    elapsed_seconds = models.PositiveIntegerField(null=True, blank=True, help_text="Slurm's elapsed time of its last run")
    allocated_tres = models.CharField(max_length=300, blank=True, help_text="e.g. cpu=128,mem=4194304M,node=1,gres/gpu=8")
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


class SlurmAccount(models.Model):
    """Who a console user is in Slurm: the account their jobs are charged to (fair-share, limits,
    sacct), set for one user or for a team (a group); and where the site has per-user Unix
    accounts, the Unix user a user's jobs run as (the console mints that user's token: it needs
    the cluster's JWT key, which lets it speak for any user, as slurmrestd's own design intends)."""

    cluster = models.ForeignKey(SlurmCluster, on_delete=models.CASCADE, related_name="accounts")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="slurm_accounts")
    team = models.ForeignKey("auth.Group", null=True, blank=True, on_delete=models.CASCADE, related_name="slurm_accounts")
    account = models.CharField(max_length=64, help_text="The Slurm account (sacctmgr add account …)")
    unix_user = models.CharField(
        max_length=64, blank=True,
        help_text="Only for a user: the Unix user their jobs run as (it must exist on every node). Empty: the service user",
    )

    class Meta:
        ordering = ["cluster", "account"]
        constraints = [
            models.CheckConstraint(condition=models.Q(user__isnull=True) ^ models.Q(team__isnull=True), name="slurm_account_user_xor_team"),
            models.UniqueConstraint(fields=["cluster", "user"], name="unique_slurm_account_per_user"),
            models.UniqueConstraint(fields=["cluster", "team"], name="unique_slurm_account_per_team"),
        ]

    def __str__(self) -> str:
        return f"{self.user or self.team} → {self.account} on {self.cluster}"

    def clean(self) -> None:
        if (self.user_id is None) == (self.team_id is None):
            raise ValidationError("Map either one user or one team.")
        if self.unix_user and self.team_id is not None:
            raise ValidationError({"unix_user": "A team has no single Unix user: set it for each user."})
        if self.unix_user and self.cluster_id is not None and not self.cluster.jwt_key_encrypted:
            raise ValidationError({"unix_user": "Running jobs as their users needs the cluster's JWT key (a stored token "
                                                "speaks for the service user only)."})
