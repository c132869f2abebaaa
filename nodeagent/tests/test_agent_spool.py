"""The spool: messages are on disk before they are sent, dropped when acked, kept across restarts."""

from __future__ import annotations

import json

from nodeagent.spool import Spool


def _logs(n: int) -> dict:
    return {"type": "logs", "job_id": 1, "attempt": 1, "stream": "master", "lines": [[n, 0.0, f"line {n}"]]}


def _file_ids(spool: Spool) -> list[int]:
    return [json.loads(line)["msg_id"] for line in spool.messages_path.read_text().splitlines()]


def test_it_numbers_messages_and_writes_them_before_they_are_sent(tmp_path):
    spool = Spool(tmp_path)
    assert [spool.append(_logs(i)) for i in range(3)] == [1, 2, 3]
    spool.sync()
    assert _file_ids(spool) == [1, 2, 3]
    assert [msg_id for msg_id, _ in spool.unsent(0)] == [1, 2, 3]
    assert json.loads(spool.unsent(2)[0][1])["lines"] == [[2, 0.0, "line 2"]]


def test_an_ack_drops_everything_up_to_it(tmp_path):
    spool = Spool(tmp_path)
    for i in range(5):
        spool.append(_logs(i))
    spool.ack(3)
    assert [msg_id for msg_id, _ in spool.unsent(0)] == [4, 5]
    spool.ack(2)  # late, smaller acks change nothing
    assert len(spool) == 2 and spool.acked == 3


def test_it_compacts_the_file_once_most_of_it_is_acked(tmp_path):
    spool = Spool(tmp_path, compact_min=4)
    for i in range(10):
        spool.append(_logs(i))
    spool.sync()
    spool.ack(3)  # 3 acked of 10: not worth a rewrite
    assert len(_file_ids(spool)) == 10
    spool.ack(6)  # 6 of 10
    assert _file_ids(spool) == [7, 8, 9, 10]
    spool.append(_logs(11))
    spool.sync()
    assert _file_ids(spool) == [7, 8, 9, 10, 11]


def test_unacked_messages_and_the_counter_survive_a_restart(tmp_path):
    spool = Spool(tmp_path, compact_min=1)
    for i in range(4):
        spool.append(_logs(i))
    spool.ack(2)
    spool.close()  # what an agent restart leaves behind

    again = Spool(tmp_path)
    assert [msg_id for msg_id, _ in again.unsent(0)] == [3, 4]
    assert again.append(_logs(5)) == 5


def test_the_counter_survives_when_everything_was_acked_and_compacted(tmp_path):
    spool = Spool(tmp_path, compact_min=1)
    for i in range(3):
        spool.append(_logs(i))
    spool.ack(3)
    assert spool.messages_path.read_text() == ""
    # no close(): a crash right after the compaction
    assert Spool(tmp_path).append(_logs(9)) == 4


def test_an_acked_line_left_in_the_file_is_not_resent_after_a_restart(tmp_path):
    spool = Spool(tmp_path, compact_min=1000)
    for i in range(3):
        spool.append(_logs(i))
    spool.sync()
    spool.ack(2)
    assert [msg_id for msg_id, _ in Spool(tmp_path).unsent(0)] == [3]


def test_it_ignores_a_line_torn_by_a_crash(tmp_path):
    spool = Spool(tmp_path)
    spool.append(_logs(1))
    spool.sync()
    with open(spool.messages_path, "a") as file:
        file.write('{"type": "logs", "msg_id": 2, "li')
    again = Spool(tmp_path)
    assert [msg_id for msg_id, _ in again.unsent(0)] == [1]
    assert again.append(_logs(2)) == 2
    again.sync()
    assert _file_ids(again) == [1, 2]


def test_resend_order_is_msg_id_order_after_a_partial_send(tmp_path):
    spool = Spool(tmp_path)
    for i in range(6):
        spool.append(_logs(i))
    spool.ack(2)
    # a connection sent up to 4 and dropped; the next one starts again from the last ack
    assert [msg_id for msg_id, _ in spool.unsent(spool.acked)] == [3, 4, 5, 6]


def test_an_ack_above_the_counter_moves_the_counter(tmp_path):
    spool = Spool(tmp_path)  # e.g. the work dir was wiped, the console remembers more
    spool.append(_logs(1))
    spool.ack(50)
    assert spool.append(_logs(2)) == 51


def test_it_tells_the_sender_about_new_messages(tmp_path):
    calls = []
    spool = Spool(tmp_path, on_append=lambda: calls.append(1))
    spool.append(_logs(1))
    assert calls == [1]
