"""Choice sets of Training Workspaces, quotas and billing. Status values are the seed's words."""

from console.lib.choices import TextChoices


class WorkspaceStatus(TextChoices):
    CREATING = "Creating"  # reserving its nodes
    DEPLOYED = "Deployed"  # every node reserved; operating normally
    UPDATING = "Updating"  # the node count is changing (growing waits for free nodes, shrinking drains)
    TERMINATING = "Terminating"  # cancelled: its jobs stop, then its nodes return to the shared pool
    ERROR = "Error"  # a reserved node is lost or cordoned


# Jobs may be created in a workspace in these statuses (they wait in Pending until nodes are there).
ACCEPTS_JOBS = frozenset({
    WorkspaceStatus.CREATING, WorkspaceStatus.DEPLOYED, WorkspaceStatus.UPDATING, WorkspaceStatus.ERROR,
})


class WhenBusy(TextChoices):
    """What shrinking does when the nodes it would release run jobs."""

    REFUSE = "refuse", "Refuse: keep every node that runs a job"
    DRAIN = "drain", "Drain: release busy nodes when their jobs end"


class Plan(TextChoices):
    ON_DEMAND = "on_demand", "On-Demand"
    SPOT = "spot", "Spot"
    WORKSPACE = "workspace", "Training Workspace"


class UsageKind(TextChoices):
    JOB = "job", "Training Job"
    WORKSPACE = "workspace", "Training Workspace"
