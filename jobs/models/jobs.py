"""Training Jobs, their tags and status history, and the server-type catalogue."""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.db import models
from django.urls import reverse

from console.lib import crypto
from console.lib.history import StatusChange

from ..choices import FRAMEWORK_VERSIONS, Framework, JobStatus, LearningType
from ..scheduling.catalogue import Allocation, allocations
from ..validation import ServerTypeInfo


class ServerType(models.Model):
    """A GPU bare-metal server type (seeded by a data migration: g2, g3)."""

    name = models.SlugField(max_length=16, unique=True)
    description = models.CharField(max_length=200)
    gpu_model = models.CharField(max_length=64)
    gpu_architecture = models.CharField(max_length=64)
    gpu_letter = models.CharField(max_length=2, help_text="Letter of the GPU in allocation names (h, b)")
    gpus_per_node = models.PositiveSmallIntegerField()
    gpu_memory_gb = models.PositiveIntegerField()
    vcpus = models.PositiveIntegerField()
    memory_gb = models.PositiveIntegerField()
    infiniband_gbps = models.PositiveIntegerField(help_text="InfiniBand RDMA, Gb/s")
    service_network_gbps = models.PositiveIntegerField(default=100)
    nvswitch_gbs = models.PositiveIntegerField(help_text="GPU P2P through NVSwitch, GB/s")
    fp4_tflops = models.PositiveIntegerField(null=True, blank=True)
    fp8_tflops = models.PositiveIntegerField(null=True, blank=True)
    fp16_tflops = models.PositiveIntegerField(null=True, blank=True)
    on_demand_price_per_gpu_hour = models.DecimalField(max_digits=8, decimal_places=4)
    spot_price_per_gpu_hour = models.DecimalField(max_digits=8, decimal_places=4)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.gpus_per_node}× {self.gpu_model})"

    def allocations(self) -> list[Allocation]:
        return allocations(self.name, self.gpu_letter, self.gpus_per_node, self.vcpus, self.memory_gb)

    def info(self) -> ServerTypeInfo:
        return ServerTypeInfo(self.name, tuple(self.allocations()))

    def tflops_summary(self) -> str:
        parts = [
            f"{value:,} TFLOPS {label}"
            for label, value in (("FP4", self.fp4_tflops), ("FP8", self.fp8_tflops), ("FP16", self.fp16_tflops))
            if value
        ]
        return ", ".join(parts) + " Tensor Core per GPU"

    def nvswitch_display(self) -> str:
        if self.nvswitch_gbs >= 1000:
            return f"{self.nvswitch_gbs / 1000:g} TB/s"
        return f"{self.nvswitch_gbs} GB/s"

    def price_per_gpu_hour(self, learning_type: str) -> Decimal:
        if learning_type == LearningType.SPOT:
            return self.spot_price_per_gpu_hour
        return self.on_demand_price_per_gpu_hour


# a job created from another job's checkpoint whose copy is not made yet: no scheduler places it
AWAITING_CHECKPOINT_COPY = models.Q(from_checkpoint_step__isnull=False, checkpoint_step__isnull=True)


class TrainingJob(models.Model):
    # no index of its own: the owner's name and status indexes below lead with it, and every
    # index is one more write on each status change (hundreds a second from a fleet)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="training_jobs",
                              db_index=False)
    name = models.CharField(max_length=63)
    learning_type = models.CharField(max_length=16, choices=LearningType.choices, default=LearningType.ON_DEMAND)
    framework = models.CharField(max_length=16, choices=Framework.choices, default=Framework.PYTORCH)
    framework_version = models.CharField(max_length=16, default=FRAMEWORK_VERSIONS[Framework.PYTORCH][0])
    failover_enabled = models.BooleanField(default=False)
    # spot only: interrupted and not resumed within this many minutes, the job resumes on on-demand
    # capacity (billed at the on-demand price from then on); None waits for spot capacity forever
    spot_fallback_after_minutes = models.PositiveIntegerField(null=True, blank=True)
    # when the fallback budget ran out: from then on the job is placed, kept and billed as on-demand
    on_demand_since = models.DateTimeField(null=True, blank=True)
    # the on-demand price per GPU-hour when it fell back (a later price change does not alter it)
    on_demand_price_per_gpu_hour = models.DecimalField(max_digits=10, decimal_places=4, null=True, blank=True)
    server_type = models.ForeignKey(ServerType, on_delete=models.PROTECT, related_name="jobs")
    gpus_per_node = models.PositiveSmallIntegerField()
    memory_gb = models.PositiveIntegerField()
    node_count = models.PositiveSmallIntegerField(default=1)
    shm_size_gb = models.PositiveIntegerField(default=64)
    image_url = models.CharField(max_length=255)
    registry_username = models.CharField(max_length=128, blank=True)
    # Fernet token (console.lib.crypto); never rendered or serialised
    registry_password_encrypted = models.TextField(blank=True)
    volume_mount_path = models.CharField(max_length=255, blank=True)
    script_url = models.CharField(max_length=1024, blank=True)
    command = models.TextField()
    # the user's project (s3://<owner bucket>/workdirs/<sha256>.tar.gz): the command's working directory
    workdir_url = models.CharField(max_length=1024, blank=True)
    # data synced onto each node before the command starts: [{"name": NAME, "url": s3://...}]
    inputs = models.JSONField(default=list, blank=True)
    # the job whose newest durable checkpoint was copied into this one's before its first attempt
    from_checkpoint = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # that job's step this one starts from; until the copy is made (checkpoint_step still None)
    # the job waits outside the scheduler's queue (AWAITING_CHECKPOINT_COPY)
    from_checkpoint_step = models.IntegerField(null=True, blank=True)
    status = models.CharField(max_length=40, choices=JobStatus.choices, default=JobStatus.PENDING)
    status_reason = models.CharField(max_length=500, blank=True)
    # number of the attempt that may run now; messages of any other attempt are fenced off
    current_attempt = models.PositiveIntegerField(default=0)
    result_url = models.CharField(max_length=1024, blank=True, help_text="Where OUTPUT_DIR was uploaded")
    failover_count = models.PositiveSmallIntegerField(default=0, help_text="Failovers so far (at most 3)")
    # the newest checkpoint durable in object storage, committed by the current attempt's agent
    checkpoint_step = models.IntegerField(null=True, blank=True)
    checkpoint_url = models.CharField(max_length=1024, blank=True)
    checkpoint_at = models.DateTimeField(null=True, blank=True)
    # warm pool: how long the nodes stay warm after the job ends, and how this job started
    keep_alive_minutes = models.PositiveSmallIntegerField(default=10)
    # Slurm-served server types: --time; None for the cluster's default (jobs.slurm.request)
    time_limit_minutes = models.PositiveIntegerField(null=True, blank=True)
    started_warm = models.BooleanField(null=True, blank=True, help_text="None until placed")
    warm_note = models.CharField(max_length=300, blank=True, help_text="Why it started warm, or why not")
    # a job in a Training Workspace runs only on the workspace's reserved nodes (workspaces.scheduler)
    workspace = models.ForeignKey(
        "workspaces.Workspace", null=True, blank=True, on_delete=models.SET_NULL, related_name="jobs",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["owner", "name"], name="unique_job_name_per_owner"),
        ]
        indexes = [
            # the list page filters a user's jobs by status, newest first
            models.Index(fields=["owner", "status", "-created_at"], name="job_owner_status_idx"),
            # the scheduler scans waiting jobs in FIFO order
            models.Index(fields=["status", "created_at"], name="job_status_fifo_idx"),
        ]

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("jobs:detail", args=[self.pk])

    @property
    def runs_as_spot(self) -> bool:
        """Placed and preempted as a spot job: spot, and not fallen back to on-demand capacity."""
        return self.learning_type == LearningType.SPOT and self.on_demand_since is None

    @property
    def total_gpus(self) -> int:
        return self.gpus_per_node * self.node_count

    @property
    def has_registry_password(self) -> bool:
        return bool(self.registry_password_encrypted)

    def set_registry_password(self, password: str) -> None:
        self.registry_password_encrypted = crypto.encrypt(password)

    def registry_password(self) -> str:
        """Decrypted only to hand it to the node agent that pulls the image."""
        return crypto.decrypt(self.registry_password_encrypted)


class JobTag(models.Model):
    job = models.ForeignKey(TrainingJob, on_delete=models.CASCADE, related_name="tags")
    key = models.CharField(max_length=128)
    value = models.CharField(max_length=256, blank=True)

    class Meta:
        ordering = ["key"]
        constraints = [models.UniqueConstraint(fields=["job", "key"], name="unique_tag_key_per_job")]

    def __str__(self) -> str:
        return f"{self.key}={self.value}"


class JobStatusChange(StatusChange):
    """One row per status change (and per failover decision): the job's history."""

    SUBJECT = "job"
    job = models.ForeignKey(TrainingJob, on_delete=models.CASCADE, related_name="status_changes")
