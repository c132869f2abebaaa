from django.apps import AppConfig


class SlurmConfig(AppConfig):
    name = "jobs.slurm"
    label = "slurm"
    verbose_name = "Slurm clusters"
    default_auto_field = "django.db.models.BigAutoField"
