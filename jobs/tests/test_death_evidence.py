"""Faster death detection: a closed connection and a goodbye are evidence; the default grace
keeps a live node safe while declaring a dead one within 10 s of its last beat."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings as django_settings
from django.utils import timezone

from jobs.models import ConsoleListening, Node, TrainingJob
from jobs.nodes import liveness, registry

from .test_failover_flow import make_node, running_job

pytestmark = pytest.mark.django_db


def test_the_default_settings_act_on_a_dead_node_within_10_s_and_leave_a_live_one_slack():
    grace, watch, beat = (django_settings.NODE_LOST_AFTER_SECONDS, django_settings.NODE_WATCH_SECONDS,
                          django_settings.NODE_HEARTBEAT_SECONDS)
    assert liveness.settings_problem(grace, watch, beat) is None
    limit = liveness.silence_limit(grace, watch, beat, read_lag=0)
    # declared at the first watchdog run after the limit, however late that run starts
    assert limit + watch + liveness.WATCHDOG_LATENESS <= 10
    # a live node's newest beat is at most one beat (plus the console's read lag) old
    assert limit - beat >= 3


def _closed(node: Node, seconds_ago: float) -> None:
    registry.disconnected(node.pk, node.session)
    registry.record_heartbeats([], closes=[registry.Close(node.pk, node.session, timezone.now() - timedelta(seconds=seconds_ago))])


def test_a_connection_closed_unasked_fails_the_job_over_once_the_short_grace_is_over(alice, listening_console, settings):
    settings.NODE_CLOSED_GRACE_SECONDS = 2
    gone, _ = make_node("gpu-01"), make_node("gpu-02")
    job = running_job(alice, gone, failover_enabled=True)
    _closed(gone, seconds_ago=1)
    assert registry.watch_heartbeats() == []  # an agent whose connection blipped is back within it
    Node.objects.filter(pk=gone.pk).update(closed_at=timezone.now() - timedelta(seconds=3))
    assert registry.watch_heartbeats() == ["gpu-01"]  # its last beat is recent: the close decided
    job.refresh_from_db()
    assert job.status == "Pending - failoverinprogress"
    assert "node gpu-01 lost its agent's connection, which did not come back" in job.status_reason


def test_a_node_that_connected_again_after_a_close_is_not_lost(alice, listening_console):
    node = make_node("gpu-01")
    _closed(node, seconds_ago=5)
    Node.objects.filter(pk=node.pk).update(connected=True, closed_at=None)  # what its next hello does
    assert registry.watch_heartbeats() == []
    assert not Node.objects.get(pk=node.pk).lost


def test_a_close_of_an_older_session_is_no_evidence(alice, listening_console):
    node = make_node("gpu-01")
    old = node.session
    Node.objects.filter(pk=node.pk).update(session=old + 1)  # a newer connection took over
    registry.record_heartbeats([], closes=[registry.Close(node.pk, old, timezone.now() - timedelta(seconds=30))])
    assert Node.objects.get(pk=node.pk).closed_at is None
    assert registry.watch_heartbeats() == []


def test_a_close_is_no_evidence_while_the_console_was_not_listening(alice):
    """A console that went down with all its connections must not blame the nodes for it."""
    node = make_node("gpu-01")
    _closed(node, seconds_ago=30)
    assert registry.watch_heartbeats() == []  # no ConsoleListening row: the console never listened


def test_a_goodbye_fails_the_job_over_at_once_and_names_why(alice):
    leaving, _ = make_node("gpu-01"), make_node("gpu-02")
    job = running_job(alice, leaving, failover_enabled=True)
    assert registry.said_goodbye(leaving.pk, leaving.session, "the node agent is shutting down")
    node = Node.objects.get(pk=leaving.pk)
    assert node.lost and not node.connected
    job = TrainingJob.objects.get(pk=job.pk)
    assert job.status == "Pending - failoverinprogress"
    assert "node gpu-01 went away: its agent shut down (the node agent is shutting down)" in job.status_reason
    assert not registry.said_goodbye(leaving.pk, leaving.session, "again")  # once


def test_a_goodbye_of_an_older_session_changes_nothing(alice):
    node = make_node("gpu-01")
    job = running_job(alice, node, failover_enabled=True)
    assert not registry.said_goodbye(node.pk, node.session - 1, "stale")
    assert TrainingJob.objects.get(pk=job.pk).status == "Running"
    assert not Node.objects.get(pk=node.pk).lost


def test_a_console_that_stalled_blames_no_node_for_its_own_stall(alice, listening_console, settings):
    """The watchdog counts silence up to the console's newest flush: a loop stalled for 6 s
    read nobody's beats, and a node whose newest beat is 9 s old is not silent by its fault."""
    settings.NODE_LOST_AFTER_SECONDS, settings.NODE_WATCH_SECONDS, settings.NODE_HEARTBEAT_SECONDS = 10, 1, 2
    now = timezone.now()
    listening_console.alive_at = now - timedelta(seconds=6)
    listening_console.save(update_fields=["alive_at"])
    waiting, dead = make_node("gpu-01"), make_node("gpu-02")
    Node.objects.filter(pk=waiting.pk).update(last_sent_at=now - timedelta(seconds=9))
    Node.objects.filter(pk=dead.pk).update(last_sent_at=now - timedelta(seconds=14))
    assert registry.watch_heartbeats(now) == ["gpu-02"]


def test_a_console_reading_late_gives_a_closed_connection_that_much_longer(alice, listening_console, settings):
    settings.NODE_CLOSED_GRACE_SECONDS = 2
    node = make_node("gpu-01")
    _closed(node, seconds_ago=4)
    ConsoleListening.objects.filter(pk=1).update(read_lag_seconds=5, read_lag_at=timezone.now())
    assert registry.watch_heartbeats() == []
    Node.objects.filter(pk=node.pk).update(closed_at=timezone.now() - timedelta(seconds=8))
    assert registry.watch_heartbeats() == ["gpu-01"]


def test_a_lost_event_of_an_older_session_does_not_close_a_newer_connection():
    """A node declared Lost (e.g. its old connection closed) whose agent registered again
    meanwhile: the event naming the old session must not close the new connection."""
    import asyncio

    from jobs.channel.consumer import AgentConsumer

    told: list[str] = []

    class Connection(AgentConsumer):
        async def declared_lost(self) -> None:
            told.append("lost")

    connection = Connection()
    connection.session = 8
    asyncio.run(connection.node_lost({"type": "node.lost", "session": 7}))
    assert told == []
    asyncio.run(connection.node_lost({"type": "node.lost", "session": 8}))
    assert told == ["lost"]


def test_a_hello_answered_late_counts_as_the_console_reading_late(alice):
    """A fleet connecting at once: until a hello is answered its node's beats wait behind it,
    so the console gives every node that much longer (its read lag)."""
    registry.record_heartbeats([], extra_lag=25.0)
    assert ConsoleListening.objects.get(pk=1).read_lag_seconds == pytest.approx(25.0)
