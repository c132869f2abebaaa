"""The time-lost split and goodput (jobs.recovery.goodput): plain arithmetic over attempt times."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from jobs.recovery import goodput
from jobs.recovery.goodput import AttemptTimes


def t(seconds: float) -> datetime:
    return datetime(2026, 12, 4, 12, 0, tzinfo=UTC) + timedelta(seconds=seconds)


# attempt 1 placed at 0, running at 10, checkpoint durable at 100, fault (XID) at 130, acted on at
# 133; attempt 2 placed at 140, running at 150, its checkpoint loaded at 154 (in 2 s), done at 300
FIRST = AttemptTimes(1, t(0), running_at=t(10), ended_at=t(133), fault_at=t(130), fault_by="platform",
                     fault_node="gpu-01", cause="hardware fault: XID 79 on GPU 0")
SECOND = AttemptTimes(2, t(140), running_at=t(150), ended_at=t(300), resume_checkpoint_at=t(100),
                      loaded_at=t(154), load_seconds=2.0)


def test_an_interruption_is_split_into_detection_rescheduling_preparation_load_and_steps_redone():
    [loss] = goodput.losses([FIRST, SECOND], t(300))
    assert (loss.detection, loss.rescheduling, loss.preparation, loss.checkpoint_load, loss.steps_redone) == \
        (3.0, 7.0, 12.0, 2.0, 30.0)
    assert loss.total == 54.0 and loss.fault_by == "platform" and loss.fault_node == "gpu-01"
    assert loss.charged == 0.0  # the platform's fault costs the user nothing


def test_goodput_is_training_time_less_the_steps_redone_over_wall_time():
    found = goodput.goodput([FIRST, SECOND], t(400), ended_at=t(300))
    # trained 10→130 (120 s) and 154→300 (146 s); 30 s of it redone
    assert found.wall == 300.0 and found.productive == 236.0
    assert found.ratio == pytest.approx(236 / 300)


def test_an_interruption_not_yet_resumed_keeps_counting_rescheduling():
    [loss] = goodput.losses([FIRST], t(160))
    assert loss.rescheduling == 27.0 and loss.preparation == 0.0 and loss.steps_redone == 0.0


def test_without_a_checkpoint_every_step_of_the_attempt_is_redone_and_without_the_librarys_line_no_load_is_known():
    second = AttemptTimes(2, t(140), running_at=t(150), ended_at=t(300))
    [loss] = goodput.losses([FIRST, second], t(300))
    assert loss.steps_redone == 120.0 and loss.checkpoint_load == 0.0 and loss.preparation == 10.0


def test_a_users_fault_is_charged_its_redone_steps():
    first = AttemptTimes(1, t(0), running_at=t(10), ended_at=t(130), fault_at=t(130), fault_by="user")
    [loss] = goodput.losses([first, SECOND], t(300))
    assert loss.steps_redone == 30.0 and loss.charged == 30.0


def test_a_fault_after_the_console_acted_counts_from_its_action():
    late = AttemptTimes(1, t(0), running_at=t(10), ended_at=t(133), fault_at=t(140), fault_by="platform")
    assert goodput.losses([late], t(133))[0].detection == 0.0


def test_a_job_never_placed_has_no_goodput_yet():
    assert goodput.goodput([], t(0)).ratio is None


def test_the_checkpoint_librarys_line_gives_the_load_time():
    assert goodput.loaded_seconds("[default0]:[Concurrent Checkpoint] loaded step 40 in 0.512 s (from s3)") == 0.512
    assert goodput.loaded_seconds("step 40 loss 0.1") is None
