"""Log streams of jobs (one stream per node role; each line keyed by (attempt, seq)) and metrics."""

from django.db import models


class LogLine(models.Model):
    id = models.BigAutoField(primary_key=True)
    # indexed by unique_log_line and logline_job_stream_id_idx, which lead with it (a third index
    # would be one more write per line)
    job = models.ForeignKey("jobs.TrainingJob", on_delete=models.CASCADE, related_name="log_lines", db_index=False)
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
            # the logs cursor reads each stream by id, which a trigger makes commit order
            # (migration 0005, monitoring.log_cursor)
            models.Index(fields=["job", "stream", "id"], name="logline_job_stream_id_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.job_id}/{self.stream}#{self.attempt}.{self.seq}"


class MetricSeries(models.Model):
    """One metric of one set of dimensions: what a chart draws as one line.

    Samples and roll-ups point at a series, so their tables stay narrow (series, time, value)
    and the hot index is (series, ts). Dimensions use "" / None for "not set"; `key` spells
    them out canonically and is what the unique constraint (and ingestion's cache) relies on.
    `job_id` is a plain number, not a foreign key: deleting a job must not wait for millions
    of samples to be deleted; the retention task removes the series of deleted jobs.
    """

    id = models.BigAutoField(primary_key=True)
    key = models.CharField(max_length=255, unique=True)
    namespace = models.CharField(max_length=64)
    metric = models.CharField(max_length=64)
    job_id = models.BigIntegerField(null=True, blank=True)
    node = models.CharField(max_length=63, blank=True)
    gpu = models.SmallIntegerField(null=True, blank=True)
    stream = models.CharField(max_length=32, blank=True)

    class Meta:
        verbose_name_plural = "metric series"  # not Django's "metric seriess"
        indexes = [
            # a job's charts: its series of one metric
            models.Index(fields=["job_id", "metric"], name="series_job_metric_idx"),
            # the node pages: a node's GPUs whatever job held them
            models.Index(fields=["node", "metric"], name="series_node_metric_idx"),
        ]

    def __str__(self) -> str:
        return self.key

    @staticmethod
    def make_key(namespace: str, metric: str, job_id: int | None, node: str, gpu: int | None, stream: str) -> str:
        return f"{namespace}/{metric}|job={job_id or ''}|node={node}|gpu={'' if gpu is None else gpu}|stream={stream}"


class MetricSample(models.Model):
    """A raw sample, kept METRICS_RAW_RETENTION_DAYS. Stored once: (series, ts) is the key.

    Roll-ups and retention scan by time alone: migration 0003 adds an index on `ts` (BRIN on
    PostgreSQL: rows arrive roughly in time order, so it finds a time range for almost no
    write cost; a b-tree elsewhere).
    """

    pk = models.CompositePrimaryKey("series", "ts")
    # no index of its own: the primary key (series, ts) serves lookups by series
    series = models.ForeignKey(MetricSeries, on_delete=models.CASCADE, related_name="samples", db_index=False)
    ts = models.DateTimeField()
    value = models.FloatField()

    def __str__(self) -> str:
        return f"{self.series_id}@{self.ts.isoformat()}={self.value}"


class MetricRollup(models.Model):
    """The 5-minute statistics of one series (period start → count, sum, min, max).

    Retention deletes by `period_start`: indexed like MetricSample.ts (migration 0003).
    """

    pk = models.CompositePrimaryKey("series", "period_start")
    series = models.ForeignKey(MetricSeries, on_delete=models.CASCADE, related_name="rollups", db_index=False)
    period_start = models.DateTimeField()
    sample_count = models.IntegerField()
    total = models.FloatField()
    minimum = models.FloatField()
    maximum = models.FloatField()

    def __str__(self) -> str:
        return f"{self.series_id}@{self.period_start.isoformat()} n={self.sample_count}"


class RollupDirtyPeriod(models.Model):
    """A 5-minute period that received samples after the roll-up window passed it.

    `version` grows on every mark, so a run deletes only the marks it has processed (a mark
    renewed meanwhile survives for the next run).
    """

    period_start = models.DateTimeField(primary_key=True)
    version = models.BigIntegerField(default=1)

    def __str__(self) -> str:
        return f"{self.period_start.isoformat()} v{self.version}"


class RollupState(models.Model):
    """One row: when the last roll-up run started (the window of the next one depends on it)."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    last_run_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"roll-up last run {self.last_run_at}"
