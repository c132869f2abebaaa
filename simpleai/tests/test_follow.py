"""Following logs: every line once across pages and a console that stops answering for a while;
the end when the job has ended; giving up after the patience."""

from __future__ import annotations

import io

import pytest

from simpleai.errors import ApiError, NotFound, Unreachable
from simpleai.follow import Follower

from .fake_console import job


class ScriptedClient:
    """Answers the follower's calls from a script: each entry is a page, a job, or an error to raise."""

    def __init__(self, logs: list, jobs: list) -> None:
        self.log_answers, self.job_answers = logs, jobs
        self.cursors: list[str | None] = []

    def logs(self, job_id: int, *, cursor=None, stream=None, limit=1000):
        self.cursors.append(cursor)
        return self._next(self.log_answers)

    def job(self, job_id: int):
        return self._next(self.job_answers)

    @staticmethod
    def _next(answers: list):
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


def page(cursor: str, *texts: str, more: bool = False, stream: str = "master") -> dict:
    lines = [{"id": i, "stream": stream, "attempt": 1, "seq": i, "ts": 0.0, "text": t} for i, t in enumerate(texts)]
    return {"job": 42, "streams": [stream], "lines": lines, "next": cursor, "more": more}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def follower(client, **kwargs) -> tuple[Follower, io.StringIO, io.StringIO]:
    out, err, clock = io.StringIO(), io.StringIO(), Clock()
    return Follower(client, 42, out, err, sleep=clock.sleep, clock=lambda: clock.now, **kwargs), out, err


DOWN = Unreachable("cannot reach the console at http://c: [Errno 111] Connection refused")


def test_it_resumes_with_the_last_cursor_after_the_console_comes_back():
    client = ScriptedClient(
        logs=[page("c1", "step 1", "step 2"), DOWN, DOWN, ApiError(502, "bad gateway"), page("c2", "step 3"), page("c2")],
        jobs=[job(status="Running"), job(status="Completed")],
    )
    f, out, err = follower(client)

    ended = f.until_ended()

    assert ended["status"] == "Completed"
    assert out.getvalue() == "step 1\nstep 2\nstep 3\n"
    assert client.cursors[:5] == [None, "c1", "c1", "c1", "c1"]
    assert err.getvalue().splitlines() == [
        "simpleai: lost the console (cannot reach the console at http://c: [Errno 111] Connection refused); retrying for up to 300 s",
        "simpleai: the console answers again; following on from where it stopped",
    ]


def test_full_pages_are_read_at_once_and_the_end_is_drained():
    client = ScriptedClient(logs=[page("c1", "a", more=True), page("c2", "b"), page("c3", "closing line"), page("c3")],
                            jobs=[job(status="Failed")])
    f, out, _ = follower(client)
    assert f.until_ended()["status"] == "Failed"
    assert out.getvalue() == "a\nb\nclosing line\n"


def test_it_gives_up_after_its_patience():
    client = ScriptedClient(logs=[DOWN], jobs=[job()])
    f, _, _ = follower(client, patience=10)
    with pytest.raises(Unreachable, match="did not answer for 10 s"):
        f.until_ended()


@pytest.mark.parametrize("error", [NotFound("gone"), ApiError(400, "bad cursor")])
def test_a_refusal_is_not_retried(error):
    f, _, _ = follower(ScriptedClient(logs=[error], jobs=[job()]))
    with pytest.raises(type(error)):
        f.print_all()


def test_lines_of_several_nodes_carry_their_stream_and_json_is_one_object_a_line():
    f, out, _ = follower(ScriptedClient(logs=[page("c", "hi", stream="worker-1")], jobs=[job()]), prefix=True)
    f.print_all()
    assert out.getvalue() == "worker-1 | hi\n"
    f, out, _ = follower(ScriptedClient(logs=[page("c", "hi")], jobs=[job()]), as_json=True)
    f.print_all()
    assert '"text": "hi"' in out.getvalue() and out.getvalue().count("\n") == 1
