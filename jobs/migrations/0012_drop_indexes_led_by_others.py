"""Drop the single-column indexes of foreign keys that a wider index already leads with.

A fleet's reports change hundreds of placements' and jobs' states a second, and each change
writes every index of its row: these were written for nothing (the unique and composite indexes
that start with the same column answer the same lookups and cascades). Only the indexes are
dropped; the foreign keys stay as they are (Django's own AlterField would drop and re-add each
constraint, checking every row of the table again)."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

# (table, column, the index Django created for the foreign key)
DROPPED = [
    ("jobs_jobattempt", "job_id", "jobs_jobattempt_job_id_05797094"),
    ("jobs_placement", "attempt_id", "jobs_placement_attempt_id_28c19855"),
    ("jobs_placement", "node_id", "jobs_placement_node_id_2db5108f"),
    ("jobs_trainingjob", "owner_id", "jobs_trainingjob_owner_id_ceea9f3f"),
]


class Migration(migrations.Migration):

    dependencies = [
        ("jobs", "0011_console_read_lag"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(f'DROP INDEX IF EXISTS "{index}"', f'CREATE INDEX "{index}" ON "{table}" ("{column}")')
                for table, column, index in DROPPED
            ],
            state_operations=[
                migrations.AlterField(
                    model_name="jobattempt",
                    name="job",
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE,
                                            related_name="attempts", to="jobs.trainingjob"),
                ),
                migrations.AlterField(
                    model_name="placement",
                    name="attempt",
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE,
                                            related_name="placements", to="jobs.jobattempt"),
                ),
                migrations.AlterField(
                    model_name="placement",
                    name="node",
                    field=models.ForeignKey(db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL,
                                            related_name="placements", to="jobs.node"),
                ),
                migrations.AlterField(
                    model_name="trainingjob",
                    name="owner",
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE,
                                            related_name="training_jobs", to=settings.AUTH_USER_MODEL),
                ),
            ],
        ),
    ]
