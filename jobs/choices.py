"""Choice sets of a Training Job. Status values are the seed's words exactly."""

from django.db import models

from console.lib.choices import TextChoices

from .statuses import Status


class LearningType(TextChoices):
    ON_DEMAND = "on_demand", "On-Demand Training"
    SPOT = "spot", "Spot Training"


class Framework(TextChoices):
    PYTORCH = "pytorch", "PyTorch"
    DEEPSPEED = "deepspeed", "DeepSpeed"


# The training environments seeded by migration 0007, newest first (the first one is the
# default). What the form and the API offer comes from the TrainingEnvironment rows staff
# edit (jobs.environments.offered.offered_versions); this is the fallback of plain validation.
# Only versions that install on the nodes here: the seed's torch 2.12.1 is not on local disk.
FRAMEWORK_VERSIONS: dict[str, list[str]] = {
    Framework.PYTORCH: ["2.13.0"],
    Framework.DEEPSPEED: ["0.18.9"],
}


# The plain enum's values (jobs.statuses, which the state machine reads), with each label spelled
# out as its value: Django would derive "Spot Interrupted" from the member name, and the filter
# must read exactly like the badge (the seed's spelling)
JobStatus = models.TextChoices("JobStatus", [(s.name, (s.value, s.value)) for s in Status], module=__name__)


# Grouped by lifecycle (netbox style): pages and the scheduler filter on these.
WAITING_STATUSES = frozenset({
    JobStatus.PENDING, JobStatus.FAILOVER_IN_PROGRESS, JobStatus.SPOT_INTERRUPTED,
})
ACTIVE_STATUSES = frozenset({JobStatus.CREATING, JobStatus.RUNNING, JobStatus.TERMINATING})
TERMINAL_STATUSES = frozenset({
    JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.STOPPED,
    JobStatus.INTERNAL_ERROR, JobStatus.MAX_RETRIES_EXCEEDED, JobStatus.IMAGE_PULL_BACKOFF,
})


class NodeStatus(TextChoices):
    READY = "Ready"
    BUSY = "Busy"
    CORDONED = "Cordoned"
    LOST = "Lost"
