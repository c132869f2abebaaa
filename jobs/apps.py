from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobs"
    verbose_name = "Training Jobs"

    def ready(self) -> None:
        from . import admin_nodes  # noqa: F401  (registers the node registry's admin)
