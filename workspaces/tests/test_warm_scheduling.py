"""The warm pool in the scheduler: warm nodes first, held for their user, and the job page's note."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.models import Placement
from jobs.nodes import desired
from jobs.tests.factories import api_payload, form_post
from workspaces.models import WarmStart

from .factories import create_job, finish, make_node, place

pytestmark = pytest.mark.django_db

SCRIPT = "s3://scripts/train.py"


@pytest.fixture
def warm_gpu02(alice, db):
    """Two idle nodes; Alice's job `first` just completed on gpu-02 (keep-alive 10 minutes)."""
    gpu01, gpu02 = make_node("gpu-01"), make_node("gpu-02")
    first = create_job(alice, name="first", script_url=SCRIPT)
    place(first, gpu02)
    finish(first)
    return gpu01, gpu02, first


def placed_on(job) -> list[str]:
    return sorted(Placement.objects.filter(attempt__job=job).values_list("node_name", flat=True))


def test_the_next_compatible_job_of_the_same_user_starts_warm_on_its_node(alice, warm_gpu02, run_scheduler):
    _, gpu02, first = warm_gpu02
    second = create_job(alice, name="second", script_url=SCRIPT)
    run_scheduler()
    second.refresh_from_db()
    # best fit alone would pick gpu-01 (same free GPUs, first by name): the warm node wins
    assert placed_on(second) == ["gpu-02"]
    assert second.started_warm is True
    assert second.warm_note == "Started warm on gpu-02: environment reused from job first"
    assert WarmStart.objects.get(placement__attempt__job=second).source_job_id == first.pk
    [message] = desired.desired_placements(gpu02.pk)
    assert message["warm_pool"] == {"owner": alice.pk, "keep_alive_seconds": 600, "reuse_from_job": first.pk}


def test_a_cold_placement_still_tells_the_agent_what_to_keep(alice, warm_gpu02, run_scheduler):
    _, gpu02, first = warm_gpu02
    other = create_job(alice, name="other", script_url="s3://scripts/other.py", keep_alive_minutes=3)
    run_scheduler()
    # best fit: gpu-02's free GPUs; the warm GPU stays with `first`'s environment
    [placement] = Placement.objects.filter(attempt__job=other)
    assert placement.node_id == gpu02.pk and placement.gpu_indices == [1]
    assert Placement.objects.get(attempt__job=first).warm_released_at is None
    [message] = desired.desired_placements(gpu02.pk)
    assert message["warm_pool"] == {"owner": alice.pk, "keep_alive_seconds": 180, "reuse_from_job": None}


def test_another_users_job_takes_warm_gpus_rather_than_wait_and_the_owner_sees_it(alice, bob, warm_gpu02, run_scheduler):
    _, _, first = warm_gpu02
    bobs = [create_job(bob, name=f"bob-{i}", gpus_per_node=8, memory_gb=2048) for i in (1, 2)]
    run_scheduler()
    for job in bobs:
        job.refresh_from_db()
    # the node with no warm hold first; the second whole-node job takes Alice's warm GPU at once
    assert placed_on(bobs[0]) == ["gpu-01"]
    assert placed_on(bobs[1]) == ["gpu-02"] and bobs[1].status == "Creating"
    hold = Placement.objects.get(attempt__job=first)
    assert hold.warm_released_at is not None
    assert hold.warm_released_for == "another user's job on gpu-02"


def test_a_warm_gpu_stays_with_its_owner_while_free_gpus_serve_others(alice, bob, warm_gpu02, run_scheduler):
    gpu01, gpu02, first = warm_gpu02
    other = create_job(bob, name="bob-1")
    mine = create_job(alice, name="second", script_url=SCRIPT)
    run_scheduler()
    # bob's 1-GPU job (first in line) takes a free GPU of gpu-02 (best fit: 7 unheld GPUs), not
    # Alice's warm GPU 0; Alice's job then starts warm on it
    assert Placement.objects.get(attempt__job=first).gpu_indices == [0]
    [bob_placement] = Placement.objects.filter(attempt__job=other)
    [alice_placement] = Placement.objects.filter(attempt__job=mine)
    assert (bob_placement.node_id, bob_placement.gpu_indices) == (gpu02.pk, [1])
    assert (alice_placement.node_id, alice_placement.gpu_indices) == (gpu02.pk, [0])
    assert Placement.objects.get(attempt__job=first).warm_released_for == "your job second on gpu-02"


def test_a_different_image_starts_cold_and_says_why(alice, warm_gpu02, run_scheduler):
    job = create_job(alice, name="new-image", script_url=SCRIPT, image_url="registry.example.com:5000/team/trainer:2.0")
    run_scheduler()
    job.refresh_from_db()
    assert job.started_warm is False
    assert job.warm_note == (
        "Cold start: your warm nodes (gpu-02, job first) hold a different image (registry.example.com:5000/team/trainer:1.0)"
    )


def test_an_expired_keep_alive_starts_cold_and_says_why(alice, warm_gpu02, run_scheduler):
    Placement.objects.filter(attempt__job__name="first").update(ended_at=timezone.now() - timedelta(minutes=30))
    job = create_job(alice, name="late", script_url=SCRIPT)
    run_scheduler()
    job.refresh_from_db()
    assert job.started_warm is False and job.warm_note.startswith("Cold start: the keep-alive of job first's nodes expired at")


def test_taken_warm_nodes_start_cold_and_say_why(alice, warm_gpu02, run_scheduler):
    busy = create_job(alice, name="busy", gpus_per_node=8, memory_gb=2048)
    place(busy, warm_gpu02[1])
    job = create_job(alice, name="next", script_url=SCRIPT)
    run_scheduler()
    job.refresh_from_db()
    assert placed_on(job) == ["gpu-01"]
    assert job.warm_note == "Cold start: the warm nodes of job first (gpu-02) were busy (not enough free GPUs)"


def test_a_keep_alive_of_zero_releases_the_nodes_at_once(alice, bob, db, run_scheduler):
    node = make_node("gpu-01")
    first = create_job(alice, name="first", keep_alive_minutes=0)
    place(first, node)
    finish(first)
    bobs = create_job(bob, name="bobs")
    run_scheduler()
    assert placed_on(bobs) == ["gpu-01"]


def test_a_keep_alive_beyond_the_maximum_is_refused_alike_by_the_form_and_the_api(alice_client, alice_api, settings):
    settings.WARM_POOL_MAX_KEEP_ALIVE_MINUTES = 60
    message = "Keep the nodes warm for 0 to 60 minutes."
    assert message in alice_client.post("/jobs/create/", form_post(keep_alive_minutes="61")).content.decode()
    assert alice_api.post("/api/v1/training-jobs/", api_payload(keep_alive_minutes=61), format="json").json()["keep_alive_minutes"] == [message]
    created = alice_api.post("/api/v1/training-jobs/", api_payload(keep_alive_minutes=60), format="json")
    assert created.status_code == 201 and created.json()["keep_alive_minutes"] == 60


def test_a_job_that_completed_before_it_was_marked_running_leaves_warm_nodes(alice, db, run_scheduler):
    """A command that ends at once: the master exits before the worker reports running, so the
    job goes Creating → Completed and its attempt never gets running_at."""
    from jobs import actions as job_actions

    node = make_node("gpu-01")
    make_node("gpu-02")
    quick = create_job(alice, name="quick", script_url=SCRIPT)
    place(quick, node)
    Placement.objects.filter(attempt__job=quick).update(state="exited", started_at=timezone.now(), ended_at=timezone.now())
    job_actions.transition(quick.pk, "Completed")
    second = create_job(alice, name="second", script_url=SCRIPT)
    run_scheduler()
    second.refresh_from_db()
    assert second.started_warm is True and placed_on(second) == ["gpu-01"]
