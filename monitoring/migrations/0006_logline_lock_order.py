"""A log line's writer locks its job's row before the stream's advisory lock, like every job action.

The foreign key check of an insert takes a KEY SHARE lock on the job's row at the end of the
statement, after the commit-order trigger (0005) took the stream's advisory lock. A job action
that holds the row (`select_for_update`) and then writes a console line into the same stream
takes them the other way round: the two deadlocked (an agent's batch against a node's hello
that ended a lost placement). Taking the row's KEY SHARE lock first, in the trigger, gives
every writer one order: the job's row, then the stream.
"""

from django.db import migrations

LOCK_ROW_THEN_STREAM = """
CREATE OR REPLACE FUNCTION monitoring_logline_in_commit_order() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- the job's row first (what the foreign key check takes anyway; held until the end)
    PERFORM 1 FROM jobs_trainingjob WHERE id = NEW.job_id FOR KEY SHARE;
    -- held until this transaction ends; the two-int key space is apart from the bigint
    -- advisory locks of jobs.scheduling.locks and monitoring.rollup_runs (a hash collision only waits)
    PERFORM pg_advisory_xact_lock(mod(NEW.job_id, 2147483647)::int, hashtext(NEW.stream));
    -- the default id was drawn before the lock: draw again, now in the stream's commit order
    NEW.id := nextval('{sequence}'::regclass);
    RETURN NEW;
END
$$;
"""

STREAM_ONLY = """
CREATE OR REPLACE FUNCTION monitoring_logline_in_commit_order() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(mod(NEW.job_id, 2147483647)::int, hashtext(NEW.stream));
    NEW.id := nextval('{sequence}'::regclass);
    RETURN NEW;
END
$$;
"""


def _replace(schema_editor, body: str) -> None:
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT pg_get_serial_sequence('monitoring_logline', 'id')")
        sequence = cursor.fetchone()[0]
    schema_editor.execute(body.format(sequence=sequence))


def lock_row_first(apps, schema_editor) -> None:
    _replace(schema_editor, LOCK_ROW_THEN_STREAM)


def lock_stream_only(apps, schema_editor) -> None:
    _replace(schema_editor, STREAM_ONLY)


class Migration(migrations.Migration):

    dependencies = [
        ("monitoring", "0005_logline_stream_commit_order"),
        ("jobs", "0001_initial"),
    ]

    operations = [migrations.RunPython(lock_row_first, lock_stream_only)]
