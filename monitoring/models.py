"""Log streams of jobs. One stream per node role; each line keyed by (attempt, seq)."""

from django.db import models


class LogLine(models.Model):
    id = models.BigAutoField(primary_key=True)
    job = models.ForeignKey("jobs.TrainingJob", on_delete=models.CASCADE, related_name="log_lines")
    stream = models.CharField(max_length=32)  # master, worker-1, ...
    attempt = models.PositiveIntegerField()
    seq = models.PositiveBigIntegerField()
    ts = models.DateTimeField()
    text = models.TextField()

    class Meta:
        ordering = ["ts", "attempt", "seq"]
        constraints = [
            # a line re-sent after a reconnect hits this key and is stored once
            models.UniqueConstraint(fields=["job", "stream", "attempt", "seq"], name="unique_log_line"),
        ]
        indexes = [
            # the Logs tab and the API page a job's lines by insertion id ("since")
            models.Index(fields=["job", "id"], name="logline_job_id_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.job_id}/{self.stream}#{self.attempt}.{self.seq}"
