from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobs"
    verbose_name = "Training Jobs"

    def ready(self) -> None:
        from . import lookups  # noqa: F401  (registers `__any`)
        from .nodes import admin  # noqa: F401  (registers the node registry's admin)
