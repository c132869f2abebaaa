"""Drop the log lines' own index on job_id: unique_log_line and logline_job_stream_id_idx lead
with it, and every index is one more write per stored line. The foreign key stays as it is
(Django's own AlterField would re-add it, checking every stored line again)."""

import django.db.models.deletion
from django.db import migrations, models

INDEX = "monitoring_logline_job_id_c24459e8"


class Migration(migrations.Migration):

    dependencies = [
        ("jobs", "0012_drop_indexes_led_by_others"),
        ("monitoring", "0006_logline_lock_order"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(f'DROP INDEX IF EXISTS "{INDEX}"', f'CREATE INDEX "{INDEX}" ON "monitoring_logline" ("job_id")'),
            ],
            state_operations=[
                migrations.AlterField(
                    model_name="logline",
                    name="job",
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE,
                                            related_name="log_lines", to="jobs.trainingjob"),
                ),
            ],
        ),
    ]
