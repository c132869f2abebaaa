"""The agent channel under hostile input and misbehaving agents, against a real daphne.

A raw WebSocket client speaks for a node with a real token, beside real agents running jobs:
nothing it sends may jam its own connection, write into another node's job, or cordon a
shared node; a second agent with the same token is refused while the first lives, and gets the
node once the first is gone; a console that cannot reach its database asks its agents to come
back later, and their jobs go on.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from asgiref.sync import async_to_sync
from websockets.asyncio.client import connect

from jobs.channel.writes import checkpoint_prefix
from jobs.models import JobAttempt, Node, NodeToken, RejectedAgentMessage
from monitoring.models import LogLine, MetricSeries
from nodeagent import protocol

from .helpers import DatabaseGate, create_job, stream_text, wait_for_status
from .stack import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

LOOP = "for i in $(seq 1 {n}); do echo step $i; sleep 0.5; done"


def hello(name: str) -> dict:
    return {"type": "hello", "protocol": 1, "running": [], "sent_at": time.time(), "node": {
        "name": name, "server_type": "g2", "address": "127.0.0.1", "cpus": 8, "memory_gb": 64,
        "runtime": "process", "agent_version": "raw",
        "gpus": [{"index": 0, "uuid": f"{name}-0", "model": "H100", "memory_gb": 80}],
    }}


class RawNode:
    """A hand-driven agent connection: send anything, read what the console answers."""

    def __init__(self, ws) -> None:
        self.ws = ws

    async def send(self, frame) -> None:
        await self.ws.send(frame if isinstance(frame, str | bytes) else json.dumps(frame))

    async def replies(self, seconds: float = 1.5) -> list[dict]:
        """Everything the console sends within `seconds` (desired-state pushes skipped)."""
        got = []
        deadline = asyncio.get_running_loop().time() + seconds
        while (left := deadline - asyncio.get_running_loop().time()) > 0:
            try:
                message = json.loads(await asyncio.wait_for(self.ws.recv(), timeout=left))
            except TimeoutError:
                break
            if message.get("type") != "desired":
                got.append(message)
        return got


async def raw_node(stack, name: str, scenario):
    _, token = await asyncio.to_thread(NodeToken.mint, name)
    url = stack.url.replace("http", "ws") + protocol.AGENT_PATH
    async with connect(url, additional_headers={"Authorization": f"Bearer {token}"}, max_size=None) as ws:
        node = RawNode(ws)
        await node.send(hello(name))
        assert [m["type"] for m in await node.replies(2)] == ["welcome"]
        return await scenario(node)


def malformed(job_id: int) -> list[tuple[str, object]]:
    """Sixteen-plus ways to send what the protocol does not allow, each with what is wrong."""
    now = time.time()
    line = lambda seq, ts=now, text="x": [seq, ts, text]  # noqa: E731
    logs = lambda msg_id, **over: {"type": "logs", "msg_id": msg_id, "job_id": job_id, "attempt": 1, "stream": "master", "lines": [line(1)], **over}  # noqa: E731
    return [
        ("not JSON", "{this is not json"),
        ("binary frame", b"\x00\x01binary"),
        ("a JSON list", "[1, 2, 3]"),
        ("unknown type", {"type": "gossip", "msg_id": 1}),
        ("missing msg_id", {"type": "logs", "job_id": job_id, "attempt": 1, "stream": "master", "lines": [line(1)]}),
        ("msg_id as text", logs("seven")),
        ("seq 2^70", logs(2, lines=[line(2**70)])),
        ("seq -1", logs(3, lines=[line(-1)])),
        ("NaN timestamp", json.dumps(logs(4, lines=[line(1, float("nan"))]))),
        ("a 10,000-character stream", logs(5, stream="w" * 10_000)),
        ("a line too long", logs(6, lines=[line(1, now, "A" * 20_000)])),
        ("a line that is not a triple", logs(7, lines=[[1, now]])),
        ("job_id 2^70", logs(8, job_id=2**70)),
        ("XID over 32 bits", {"type": "fault", "msg_id": 9, "kind": "xid", "xid": 2**40, "gpu_index": 0, "ts": now}),
        ("an unknown fault kind", {"type": "fault", "msg_id": 10, "kind": "meteor", "gpu_index": 0, "ts": now}),
        ("a negative GPU index", {"type": "fault", "msg_id": 11, "kind": "gpu_lost", "gpu_index": -1, "ts": now}),
        ("step 2^40", {"type": "checkpoint", "msg_id": 12, "job_id": job_id, "attempt": 1, "role": "master", "step": 2**40, "url": "s3://x/y"}),
        ("an unknown attempt state", {"type": "attempt", "msg_id": 13, "job_id": job_id, "attempt": 1, "role": "master", "state": "dancing"}),
        ("an infinite metric", json.dumps({"type": "metrics", "msg_id": 14, "samples": [["GPUUtilization", now, float("inf"), {"gpu": 0}]]})),
        ("an unknown metric dimension", {"type": "metrics", "msg_id": 15, "samples": [["GPUUtilization", now, 1.0, {"rack": 3}]]}),
    ]


def test_malformed_messages_are_refused_one_by_one_and_the_connection_lives_on(alice, stack, start_nodes):
    """Each used to end in an unhandled exception, a 1011 close and a 100-line traceback."""
    start_nodes("busy-1")
    job = create_job(alice, "victim", LOOP.format(n=20))
    wait_for_status(job.pk, "Running", timeout=60)
    cases = malformed(job.pk)

    async def scenario(node: RawNode):
        answers = []
        for _, frame in cases:
            await node.send(frame)
            answers.append(await node.replies(0.6))
        # still the same connection, still served: a heartbeat and a valid metrics message
        await node.send({"type": "heartbeat", "running": [], "sent_at": time.time()})
        await node.send({"type": "metrics", "msg_id": 99, "samples": [["GPUTemperature", time.time(), 40.0, {"gpu": 0}]]})
        return answers, await node.replies(2), node.ws.close_code

    answers, after, close_code = async_to_sync(raw_node)(stack, "hostile-1", scenario)
    for (what, _), replies in zip(cases, answers, strict=True):
        errors = [r for r in replies if r["type"] == "error"]
        assert len(errors) == 1 and errors[0]["message"].startswith("malformed message"), (what, replies)
    assert close_code is None and {"type": "ack", "upto": 99} in after
    assert RejectedAgentMessage.objects.filter(node_name="hostile-1").count() == len(cases)
    assert "Traceback" not in (stack.log_dir / "daphne.log").read_text(errors="replace")
    assert wait_for_status(job.pk, "Completed", timeout=60).status == "Completed"  # the busy node was not disturbed


def test_a_node_cannot_write_into_another_nodes_job(alice, stack, start_nodes, e2e_settings):
    """With node B's valid token: log lines into A's stream (even replacing real ones), a new
    stream, a checkpoint an attacker chose, and training metrics were all accepted."""
    start_nodes("node-a")
    job = create_job(alice, "on-a", LOOP.format(n=40))
    wait_for_status(job.pk, "Running", timeout=60)
    wait_until(lambda: LogLine.objects.filter(job=job, stream="master", text="step 2").exists(), timeout=30, message="A's lines")
    now = time.time()
    forged = [
        {"type": "logs", "msg_id": 1, "job_id": job.pk, "attempt": 1, "stream": "master", "lines": [[1, now, "forged"], [50_000, now, "forged"]]},
        {"type": "logs", "msg_id": 2, "job_id": job.pk, "attempt": 1, "stream": "worker-1", "lines": [[1, now, "a new stream"]]},
        {"type": "checkpoint", "msg_id": 3, "job_id": job.pk, "attempt": 1, "role": "master", "step": 999_999, "url": "s3://attacker-bucket/evil"},
        {"type": "metrics", "msg_id": 4, "samples": [["TrainingLoss", now, 0.0, {"job": job.pk, "stream": "master"}]]},
        {"type": "attempt", "msg_id": 5, "job_id": job.pk, "attempt": 1, "role": "master", "state": "exited", "exit_code": 0},
    ]

    async def scenario(node: RawNode):
        answers = []
        for message in forged:
            await node.send(message)
            answers.append(await node.replies(0.8))
        return answers

    answers = async_to_sync(raw_node)(stack, "node-b", scenario)
    for message, replies in zip(forged, answers, strict=True):
        assert [r["type"] for r in replies] == ["error", "ack"], (message["type"], replies)
        assert "no placement" in replies[0]["message"] or "never ran" in replies[0]["message"]
    assert not LogLine.objects.filter(job=job, text__in=["forged", "a new stream"]).exists()
    assert set(LogLine.objects.filter(job=job).values_list("stream", flat=True)) == {"master"}
    assert not MetricSeries.objects.filter(job_id=job.pk, node="node-b").exists()
    job = wait_for_status(job.pk, "Completed", timeout=60)  # A's own report decides, not B's forgery
    assert job.checkpoint_step is None and job.checkpoint_url == ""
    assert RejectedAgentMessage.objects.filter(node_name="node-b").count() == len(forged)
    # and a commit outside the job's own prefix is refused even from its own node
    assert checkpoint_prefix(job.owner_id, job.pk).endswith(f"/jobs/{job.pk}/checkpoints/")


def test_output_that_mentions_an_ecc_error_cordons_nothing(alice, bob, start_nodes):
    """Any user's job that printed "uncorrectable ECC error encountered" and exited 1 was judged
    a hardware fault: its node was cordoned for everyone (the agent's own echo of the command
    line matched too)."""
    start_nodes("shared-ecc")
    line = "RuntimeError: CUDA error: uncorrectable ECC error encountered"
    job = create_job(alice, "prints-ecc", f"echo '{line}'; exit 1", failover_enabled=True)
    job = wait_for_status(job.pk, "Pending - internalerror", "Pending - failoverinprogress", "Failed", timeout=60)
    job = wait_for_status(job.pk, "Pending - internalerror", timeout=30)  # the recheck found no agent evidence
    assert "a second look found no hardware fault" in job.status_reason
    node = Node.objects.get(name="shared-ecc")
    assert not node.cordoned and node.gpus.filter(healthy=False).count() == 0
    assert JobAttempt.objects.filter(job=job).count() == 1  # no failover
    # the node still takes other users' jobs
    other = create_job(bob, "next-user", "echo fine")
    assert wait_for_status(other.pk, "Completed", timeout=60).status == "Completed"


def test_long_output_lines_reach_the_log_and_jam_nothing(alice, start_nodes):
    """300 lines of 8,000 characters made a 2.4 MB batch over daphne's 1 MiB limit: the node
    reconnected 36 times in 65 s, the job stayed Running and the next one Creating."""
    agents = start_nodes("chatty")
    command = "python -c \"[print('A' * 8000) for _ in range(300)]; print('B' * 100000)\""
    job = wait_for_status(create_job(alice, "long-lines", command).pk, "Completed", "Failed", timeout=90)
    assert job.status == "Completed", job.status_reason
    texts = [t for t in stream_text(job.pk, "master") if t and t[0] in "AB"]
    assert texts[:300] == ["A" * 8000] * 300
    assert "".join(texts[300:]) == "B" * 100_000 and all(len(t) <= 16_384 for t in texts)  # split, not cut
    nxt = create_job(alice, "next", "echo next")
    assert wait_for_status(nxt.pk, "Completed", timeout=60).status == "Completed"
    assert "reconnecting" not in agents[0].output()


def test_a_second_agent_with_the_nodes_token_is_refused_while_the_first_runs(alice, stack, start_nodes):
    """Whoever held a node's token took its place: its hello (an empty `running`) made the console
    drop the real agent's placements, and the desired state went to it. Refused now while the
    real agent lives; once it is gone (killed), a new agent process gets the node."""
    [first] = start_nodes("twin")
    job = create_job(alice, "twin-job", LOOP.format(n=60), failover_enabled=True)
    wait_for_status(job.pk, "Running", timeout=60)
    wait_until(lambda: LogLine.objects.filter(job=job, text="step 2").exists(), timeout=30, message="step 2")
    session = Node.objects.get(name="twin").session

    second = stack.agent("twin", first.token, work_name="twin-2")  # same token, its own (empty) work dir
    wait_until(lambda: second.output().count("held by another live connection") >= 2, timeout=30,
               message="the second agent to be refused, and to try again")
    assert "is connected over another connection whose agent is alive" in second.output()  # the console's words
    assert second.process.poll() is None and first.process.poll() is None  # neither gave up
    assert "registered as node" not in second.output()  # no welcome, so no desired state either
    node = Node.objects.get(name="twin")
    assert node.session == session and node.connected
    job.refresh_from_db()
    assert job.status == "Running" and job.current_attempt == 1
    assert JobAttempt.objects.get(job=job, number=1).placements.get().state == "running"

    first.kill()  # the real agent is gone: its connection closes
    node = wait_until(lambda: Node.objects.filter(name="twin", session__gt=session, connected=True).first(),
                      timeout=60, message="the second agent to get the node")
    # the console records the node before its welcome reaches the agent, which logs it then
    wait_until(lambda: "registered as node twin" in second.output(), timeout=30, message="the welcome")
    # the killed agent's processes are gone with it as far as the console knows: lost, run again
    attempt = JobAttempt.objects.get(job=job, number=1)
    assert "came back without this placement" in attempt.cause
    job = wait_for_status(job.pk, "Completed", "Failed", timeout=120)
    assert job.status == "Completed", job.status_reason
    assert job.current_attempt == 2 and JobAttempt.objects.get(job=job, number=2).placements.get().node_id == node.pk


def test_a_console_without_its_database_asks_the_agent_to_retry_and_the_job_goes_on(alice, stack, start_nodes):
    """daphne answered with a close code its WebSocket library refuses to send (1013): the close
    became an error, and the agent read it as a broken connection instead of "try again"."""
    [agent] = start_nodes("steady")
    job = create_job(alice, "steady", LOOP.format(n=40))
    wait_for_status(job.pk, "Running", timeout=60)
    wait_until(lambda: LogLine.objects.filter(job=job, text="step 3").exists(), timeout=30, message="step 3")

    gate = DatabaseGate()
    gate.close([process.pid for process in stack.processes.values()])
    try:  # the agent's next batch of lines cannot be stored: the console says so and closes 4503
        wait_until(lambda: "the console is degraded" in agent.output(), timeout=30, message="the agent to hear it")
    finally:
        gate.open()

    job = wait_for_status(job.pk, "Completed", "Failed", "Pending - failoverinprogress", timeout=90)
    assert job.status == "Completed", job.status_reason
    texts = stream_text(job.pk, "master")
    assert [t for t in texts if t.startswith("step ")] == [f"step {i}" for i in range(1, 41)]  # each once, in order
    daphne = (stack.log_dir / "daphne.log").read_text()
    assert "invalid close code" not in daphne
    assert "fencing" not in agent.output() and not Node.objects.get(name="steady").lost
