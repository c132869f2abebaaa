"""Requests served over ASGI (daphne) hold no PostgreSQL connection once they are answered."""

import gc

import pytest
from asgiref.sync import async_to_sync
from channels.testing import HttpCommunicator
from django.db import connection

from console.asgi import application


def _connections_to_this_database() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")
        return cursor.fetchone()[0]


@pytest.mark.django_db(transaction=True, serialized_rollback=True)  # the requests run on threads of their own
def test_answered_api_requests_leave_no_database_connection_open():
    async def ask() -> int:
        # a bearer token the API looks up in the database (and refuses: 401)
        communicator = HttpCommunicator(application, "GET", "/api/v1/training-jobs/",
                                        headers=[(b"host", b"testserver"), (b"authorization", b"Token not-a-token")])
        response = await communicator.get_response(timeout=30)
        await communicator.wait(timeout=30)  # as daphne does: the application runs to its end
        return response["status"]

    before = _connections_to_this_database()
    gc.disable()  # each request runs on a thread of its own: left open, only a collection would close it
    try:
        statuses = [async_to_sync(ask)() for _ in range(5)]
        after = _connections_to_this_database()
    finally:
        gc.enable()
    assert statuses == [401] * 5
    assert after <= before, f"{after - before} connections of answered requests are still open"
