"""Another user's job does not exist for Bob on the job page's WebSocket either (a transactional test: the consumer reads in another thread)."""

from __future__ import annotations

import pytest

from console.lib.sockets import CLOSE_NOT_FOUND, CLOSE_UNAUTHENTICATED

from .ws import job_socket, refusal, session_cookie, settled


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_the_job_websocket_refuses_bob_and_accepts_alice(alice, bob, make_job):
    job = make_job()
    bob_cookie, alice_cookie = session_cookie(bob), session_cookie(alice)

    async def scenario():
        assert await refusal(job_socket(job.pk, bob_cookie)) == CLOSE_NOT_FOUND
        assert await refusal(job_socket(job.pk, None)) == CLOSE_UNAUTHENTICATED
        assert await refusal(job_socket(job.pk + 1000, alice_cookie)) == CLOSE_NOT_FOUND
        alices = job_socket(job.pk, alice_cookie)
        connected, _ = await alices.connect()
        assert connected
        await alices.disconnect()

    settled(scenario)()
