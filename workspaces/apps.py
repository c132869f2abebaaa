from django.apps import AppConfig


class WorkspacesConfig(AppConfig):
    name = "workspaces"
    verbose_name = "Training Workspaces"

    def ready(self) -> None:
        from . import signals  # noqa: F401  (connects the billing ledger to job creation and deletion)
