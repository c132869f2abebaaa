from django.apps import AppConfig


class WorkspacesConfig(AppConfig):
    name = "workspaces"
    verbose_name = "Training Workspaces"

    def ready(self) -> None:
        from jobs.scheduling import policy

        from . import signals  # noqa: F401  (connects the billing ledger to job creation and deletion)
        from .scheduling_policy import WorkspacesPolicy

        # reserved nodes, warm-pool preferences and quotas shape every scheduler run
        policy.install(WorkspacesPolicy())
