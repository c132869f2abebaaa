"""An agent's batch of lines and a job action that writes a console line into the same stream
never deadlock (migration 0006: every writer locks the job's row, then the stream).

Seen with real agents: a node's hello ended a lost placement (the job's row locked, then a
console line) while the agent's last batch of the same stream was being stored; PostgreSQL
killed one of them, and the agent's connection was closed as if the database were away.
Transactional: the two writers are two connections, as in the console.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

import pytest
from django.db import connection, transaction

from jobs.models import TrainingJob
from monitoring import ingest
from monitoring.models import LogLine

pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)


def test_a_batch_and_an_action_writing_the_same_stream_both_commit(make_job):
    job = make_job()
    holding, errors = threading.Event(), []

    def action() -> None:
        try:
            with transaction.atomic():
                TrainingJob.objects.select_for_update().get(pk=job.pk)
                holding.set()
                time.sleep(1.0)  # the agent's batch arrives meanwhile
                LogLine.objects.create(job_id=job.pk, stream="master", attempt=1, seq=10**12,
                                       ts=datetime.now(tz=UTC), text="[console] attempt 1 ended")
        except Exception as exc:
            errors.append(exc)
        finally:
            connection.close()

    def batch() -> None:
        holding.wait(timeout=10)
        try:
            ingest._insert_postgresql(job.pk, "master", 1, [[1, time.time(), "step 1"], [2, time.time(), "step 2"]])
        except Exception as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=action), threading.Thread(target=batch)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert errors == []  # before: "deadlock detected" for one of them
    texts = list(LogLine.objects.filter(job=job).order_by("id").values_list("text", flat=True))
    # the batch waited for the action: the stream's ids follow the commit order
    assert texts == ["[console] attempt 1 ended", "step 1", "step 2"]
