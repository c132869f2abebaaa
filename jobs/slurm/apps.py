from django.apps import AppConfig


class SlurmConfig(AppConfig):
    name = "jobs.slurm"
    label = "slurm"
    verbose_name = "Slurm clusters"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from jobs.scheduling import policy

        from .backend import SlurmBackend

        # jobs of Slurm-served server types go to their cluster, not to the agents' scheduler
        policy.install_backend(SlurmBackend())
