"""Within a stream, a log line's id follows commit order: the logs cursor relies on it.

A trigger makes every insert into a stream wait for the stream's previous writer to end
(a transaction-scoped advisory lock on (job, stream)) and only then takes the row's id. Ids
of one stream therefore become visible in increasing order, whoever writes: the agent's
batches, a re-sent batch on a new connection, the console's own lines (jobs.console_log).
Different streams never wait for each other. See monitoring.log_cursor.
"""

from django.db import migrations, models

LOCK_AND_NUMBER = """
CREATE FUNCTION monitoring_logline_in_commit_order() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- held until this transaction ends; the two-int key space is apart from the bigint
    -- advisory locks of jobs.scheduling.locks and monitoring.rollup_runs (a hash collision only waits)
    PERFORM pg_advisory_xact_lock(mod(NEW.job_id, 2147483647)::int, hashtext(NEW.stream));
    -- the default id was drawn before the lock: draw again, now in the stream's commit order
    NEW.id := nextval('{sequence}'::regclass);
    RETURN NEW;
END
$$;
CREATE TRIGGER logline_in_commit_order BEFORE INSERT ON monitoring_logline
    FOR EACH ROW EXECUTE FUNCTION monitoring_logline_in_commit_order();
"""

DROP = """
DROP TRIGGER IF EXISTS logline_in_commit_order ON monitoring_logline;
DROP FUNCTION IF EXISTS monitoring_logline_in_commit_order();
"""


def create_trigger(apps, schema_editor) -> None:
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT pg_get_serial_sequence('monitoring_logline', 'id')")
        sequence = cursor.fetchone()[0]
    # the sequence is named once, here: the function's plan then resolves it once per session
    schema_editor.execute(LOCK_AND_NUMBER.format(sequence=sequence))


def drop_trigger(apps, schema_editor) -> None:
    schema_editor.execute(DROP)


class Migration(migrations.Migration):

    dependencies = [
        ("monitoring", "0004_metric_series_plural"),
    ]

    operations = [
        migrations.RunPython(create_trigger, drop_trigger),
        migrations.RemoveIndex(model_name="logline", name="logline_job_id_idx"),
        migrations.AddIndex(
            model_name="logline",
            index=models.Index(fields=["job", "stream", "id"], name="logline_job_stream_id_idx"),
        ),
    ]
