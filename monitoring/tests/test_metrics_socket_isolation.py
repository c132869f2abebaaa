"""Bob hears nothing of Alice's metrics on a WebSocket (transactional: the consumer reads in another thread)."""

from __future__ import annotations

import time

import pytest
from asgiref.sync import sync_to_async

from console.lib.sockets import CLOSE_NOT_FOUND
from jobs.tests.ws import job_socket, refusal, session_cookie, settled

from .conftest import place
from .test_metrics_ingest import connect_node


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_bob_hears_no_metrics_of_alices_job(alice, bob, make_job):
    alices, bobs = make_job(name="alices"), make_job(owner=bob, name="bobs")
    batch = {"type": "metrics", "msg_id": 1, "samples": [["GPUUtilization", time.time(), 99.0, {"gpu": 0, "job": alices.pk}]]}
    cookie, alices_cookie = session_cookie(bob), session_cookie(alice)

    async def scenario():
        spy = job_socket(alices.pk, cookie)
        code = await refusal(spy)
        own = job_socket(bobs.pk, cookie)
        assert (await own.connect())[0]
        owner = job_socket(alices.pk, alices_cookie)
        assert (await owner.connect())[0]
        agent = await connect_node("gpu-01")
        await sync_to_async(place)(alices, "gpu-01")
        assert (await agent.receive_json_from(timeout=5))["type"] == "desired"  # the placement
        await agent.send_json_to(batch)
        await agent.receive_json_from(timeout=5)  # ack: stored and published
        seen_by_alice = await owner.receive_json_from(timeout=5)
        while seen_by_alice["type"] != "job.metrics":  # the placement's status change came first
            seen_by_alice = await owner.receive_json_from(timeout=5)
        heard = await own.receive_nothing(timeout=0.5)
        # every application instance ends here (a refused one still listens on its channel)
        for socket in (agent, own, owner, spy):
            await socket.disconnect()
        return code, heard, seen_by_alice

    code, heard_nothing, seen_by_alice = settled(scenario)()
    assert code == CLOSE_NOT_FOUND
    assert seen_by_alice["type"] == "job.metrics"  # the event exists; it just never reaches Bob
    assert heard_nothing
