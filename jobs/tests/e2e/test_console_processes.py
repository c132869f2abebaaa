"""Several daphne processes serve one console (`CONSOLE_PROCESSES`): they share one listening
socket, and a node whose daphne dies reconnects to another without losing its job's lines."""

from __future__ import annotations

import json
import signal
import urllib.request

import psutil
import pytest
from rest_framework.authtoken.models import Token

from .helpers import create_job, stream_text, wait_for_status
from .stack import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]
CONSOLE_PROCESSES = 2  # read by the stack fixture

COUNT = "python -c 'import time\nfor i in range(60):\n    print(f\"line {i}\", flush=True); time.sleep(0.1)'"


def serving_daphne(stack, agent) -> str:
    """The name of the daphne process at the other end of the agent's WebSocket."""
    agent_ports = {c.laddr.port for c in psutil.Process(agent.process.pid).net_connections("tcp")
                   if c.raddr and c.raddr.port == stack.port and c.status == psutil.CONN_ESTABLISHED}
    for name, process in stack.daphnes().items():
        for connection in psutil.Process(process.pid).net_connections("tcp"):
            if connection.raddr and connection.raddr.port in agent_ports:
                return name
    return ""


def api_job(stack, user, job_id: int) -> dict:
    token, _ = Token.objects.get_or_create(user=user)
    request = urllib.request.Request(f"{stack.url}/api/v1/training-jobs/{job_id}/",
                                     headers={"Authorization": f"Token {token.key}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def test_a_node_whose_daphne_dies_goes_on_through_the_other_one(alice, stack, start_nodes, e2e_settings):
    assert len(stack.daphnes()) == 2
    [agent] = start_nodes("node-a")
    first = wait_until(lambda: serving_daphne(stack, agent), timeout=20, message="the agent's daphne")
    job = create_job(alice, "outlives-its-daphne", COUNT)
    wait_until(lambda: len(stream_text(job.pk, "master")) > 5, timeout=60, message="the first lines")

    stack.daphnes()[first].send_signal(signal.SIGKILL)  # a crash: no goodbye to the agent

    # the agent reconnects through the same address to the daphne that is left
    second = wait_until(lambda: (name := serving_daphne(stack, agent)) != first and name, timeout=30,
                        message="the agent to reconnect to the other daphne")
    assert stack.daphnes()[second].poll() is None
    job = wait_for_status(job.pk, "Completed", "Failed", timeout=90)
    assert job.status == "Completed", job.status_reason
    printed = [line for line in stream_text(job.pk, "master") if line.startswith("line ")]
    assert printed == [f"line {i}" for i in range(60)]
    # the API answers on the same address, served by the process that is left
    assert api_job(stack, alice, job.pk)["status"] == "Completed"

    # a job created now is pushed to the agent through the daphne that holds its connection
    again = create_job(alice, "after-the-crash", "echo second job")
    assert wait_for_status(again.pk, "Completed", "Failed", timeout=60).status == "Completed"
    assert "second job" in stream_text(again.pk, "master")
