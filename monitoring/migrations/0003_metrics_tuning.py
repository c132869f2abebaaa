"""Indexes by time, covering primary keys and immediate foreign-key checks (PostgreSQL-aware).

A migration of its own: Django adds the foreign keys of 0002 at the end of that migration,
so they can only be altered here.
"""

from django.db import migrations

# Roll-ups and retention read samples and roll-ups by time alone. On PostgreSQL a BRIN index
# does it for almost no write cost (rows arrive roughly in time order); elsewhere a b-tree.
TIME_INDEXES = [
    ("metricsample_ts_idx", "monitoring_metricsample", "ts"),
    ("metricrollup_period_idx", "monitoring_metricrollup", "period_start"),
]


# Charts read one series' rows for a time range. Rows are written time after time for every
# series, so a series' rows sit one per heap page: a 7-day chart of 8 GPUs would read ~16,000
# pages. Primary keys that carry the values answer it from the index alone (~100 pages).
COVERING_KEYS = [
    ("monitoring_metricsample", "series_id, ts", "value"),
    ("monitoring_metricrollup", "series_id, period_start", "sample_count, total, minimum, maximum"),
]


def _primary_keys(schema_editor, include: bool) -> None:
    for table, key, values in COVERING_KEYS:
        schema_editor.execute(f"ALTER TABLE {table} DROP CONSTRAINT {table}_pkey")
        covering = f" INCLUDE ({values})" if include else ""
        schema_editor.execute(f"ALTER TABLE {table} ADD CONSTRAINT {table}_pkey PRIMARY KEY ({key}){covering}")


def _series_foreign_keys(schema_editor):
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("""
            SELECT conrelid::regclass::text, conname FROM pg_constraint
            WHERE contype = 'f' AND confrelid = 'monitoring_metricseries'::regclass
        """)
        return cursor.fetchall()


def tune_for_ingestion(apps, schema_editor):
    using = " USING brin" if schema_editor.connection.vendor == "postgresql" else ""
    for name, table, column in TIME_INDEXES:
        schema_editor.execute(f"CREATE INDEX {name} ON {table}{using} ({column})")
    if schema_editor.connection.vendor == "postgresql":
        # Ingestion inserts samples under a cached series id; when retention has deleted that
        # series the insert must fail at once, so ingestion can look the series up again
        # (Django's deferred check would fail the commit instead, or nothing in an outer one).
        for table, constraint in _series_foreign_keys(schema_editor):
            schema_editor.execute(f'ALTER TABLE {table} ALTER CONSTRAINT "{constraint}" NOT DEFERRABLE')
        _primary_keys(schema_editor, include=True)


def untune(apps, schema_editor):
    for name, _, _ in TIME_INDEXES:
        schema_editor.execute(f"DROP INDEX {name}")
    if schema_editor.connection.vendor == "postgresql":
        for table, constraint in _series_foreign_keys(schema_editor):
            schema_editor.execute(f'ALTER TABLE {table} ALTER CONSTRAINT "{constraint}" DEFERRABLE INITIALLY DEFERRED')
        _primary_keys(schema_editor, include=False)


class Migration(migrations.Migration):

    dependencies = [
        ("monitoring", "0002_metrics"),
    ]

    operations = [
        migrations.RunPython(tune_for_ingestion, untune),
    ]
