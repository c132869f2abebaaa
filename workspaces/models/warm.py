"""Which placements start warm: the node agent reuses the environment a previous job prepared."""

from __future__ import annotations

from django.db import models


class WarmStart(models.Model):
    """Written by the scheduler when it puts a placement on a node warm for its job; the
    desired state sent to the agent then says to reuse the kept environment."""

    placement = models.OneToOneField("jobs.Placement", on_delete=models.CASCADE, related_name="warm_start")
    source_job_id = models.BigIntegerField(help_text="The job whose prepared environment is reused")
    source_job_name = models.CharField(max_length=63)

    def __str__(self) -> str:
        return f"{self.placement} reuses job {self.source_job_name}"
