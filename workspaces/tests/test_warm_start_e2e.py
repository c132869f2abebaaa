"""Warm start vs cold start with real processes: daphne, Celery, SeaweedFS and two node agents.

A cold start downloads the training script; the next job of the same user with the same image
and script lands on the same (warm) nodes and skips the preparation step entirely.
"""

from __future__ import annotations

import pytest

from jobs.tests.e2e.helpers import create_job, stream_text, wait_for_status
from jobs.tests.storage import put_in_space

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

SCRIPT = "print('step 1 loss 0.5', flush=True)\n" + "# padding: a script with its data beside it\n" * 20000  # ~900 kB


@pytest.fixture
def warm_script(alice, object_store, e2e_settings) -> str:
    """The script in Alice's own storage space, uploaded with her own keys."""
    return put_in_space(alice, object_store.endpoint, "uploads/warm/train.py", SCRIPT.encode())


def test_the_second_job_starts_warm_without_preparation(alice, start_nodes, warm_script, e2e_settings):
    start_nodes("node-a", "node-b")
    cold = create_job(alice, "cold", "python train.py", node_count=2, script_url=warm_script)
    cold = wait_for_status(cold.pk, "Completed", "Failed", timeout=60)
    assert cold.status == "Completed", cold.status_reason
    assert cold.started_warm is False and cold.warm_note.startswith("Cold start: ")
    for stream in ("master", "worker-1"):
        assert any(line.startswith("[INFO] Downloading training script") for line in stream_text(cold.pk, stream))

    warm = create_job(alice, "warm", "python train.py", node_count=2, script_url=warm_script)
    warm = wait_for_status(warm.pk, "Completed", "Failed", timeout=60)
    assert warm.status == "Completed", warm.status_reason
    assert warm.started_warm is True, warm.warm_note
    assert warm.warm_note == "Started warm on node-a, node-b: environment reused from job cold"
    for stream in ("master", "worker-1"):
        lines = stream_text(warm.pk, stream)
        assert f"[INFO] Warm start: environment reused from job cold (#{cold.pk}); already on this node: the training script train.py" in lines
        # the preparation step was skipped: no image check, no download, no library check
        assert not any("Downloading training script" in line or line.startswith("[INFO] Image ") for line in lines), lines
        assert "step 1 loss 0.5" in lines

    other = create_job(alice, "other-image", "python train.py", node_count=2, script_url=warm_script,
                       image_url="127.0.0.1:5055/team/trainer:2")
    other = wait_for_status(other.pk, "Completed", "Failed", timeout=60)
    assert other.started_warm is False
    assert other.warm_note.startswith("Cold start: your warm nodes (node-")
    assert "hold a different image (127.0.0.1:5055/team/trainer:1)" in other.warm_note
    assert any(line.startswith("[INFO] Downloading training script") for line in stream_text(other.pk, "master"))
