from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobs"
    verbose_name = "Training Jobs"

    def ready(self) -> None:
        from .nodes import admin  # noqa: F401  (registers the node registry's admin)
        from .sql import lookups  # noqa: F401  (registers `__any`)
        from .storage import admin as storage_admin  # noqa: F401  (storage spaces)
