"""Partial recovery on the node: the job's next attempt on the same node reuses what the
interrupted one prepared (its working directory, the checkpoint it resumes from) instead of
preparing again; a different job, or an attempt still running, is never taken over."""

from __future__ import annotations

import asyncio

from nodeagent.tests.agent_support import (
    FakeConsole,
    make_config,
    make_placement,
    running_agent,
    running_console,
    until,
)

# attempt 1 "prepares" a file in its working directory and commits a checkpoint of step 5
FIRST = ("echo prepared > data.bin && mkdir -p $OUTPUT_DIR/concurrent_checkpoint/step-5 && "
         "echo '{}' > $OUTPUT_DIR/concurrent_checkpoint/step-5/MANIFEST.json && "
         "echo shard > $OUTPUT_DIR/concurrent_checkpoint/step-5/shard-0 && echo result > $OUTPUT_DIR/model.pt")
# attempt 2 says what it found
SECOND = ("cat data.bin; cat $OUTPUT_DIR/concurrent_checkpoint/step-5/shard-0; "
          "test -e $OUTPUT_DIR/model.pt && echo old-results || echo no-old-results")


def run_attempts(tmp_path, second: dict) -> FakeConsole:
    async def scenario():
        console = FakeConsole([make_placement(command=FIRST)])
        async with running_console(console) as port, running_agent(make_config(tmp_path, port)):
            await until(lambda: len([m for m in console.of_type("attempt") if m["state"] == "exited"]) == 1,
                        what="attempt 1 exited")
            await console.set_desired([make_placement(**{"attempt": 2, "command": SECOND, "resume_step": 5,
                                                              "reuse_previous": True, **second})])
            await until(lambda: len([m for m in console.of_type("attempt") if m["state"] == "exited"]) == 2,
                        what="attempt 2 exited")
        return console

    return asyncio.run(scenario())


def attempt_texts(console: FakeConsole, attempt: int) -> list[str]:
    by_seq = {line[0]: line[2] for batch in console.of_type("logs") if batch["attempt"] == attempt
              for line in batch["lines"]}  # a re-sent line once
    return [by_seq[seq] for seq in sorted(by_seq)]


def test_the_next_attempt_of_the_job_reuses_the_prepared_directory_and_checkpoint(tmp_path):
    console = run_attempts(tmp_path, {})
    texts = attempt_texts(console, 2)
    assert ("[INFO] Partial recovery: this node ran attempt 1 of the job; reusing its working directory (1 file) "
            "and its local copy of checkpoint step 5; nothing downloaded, the environment is warm") in texts
    assert not any(t.startswith("[INFO] Image ") for t in texts)  # no preparation from scratch
    # the prepared file and the checkpoint are there; attempt 1's results are not carried over
    assert [t for t in texts if not t.startswith("[")] == ["prepared", "shard", "no-old-results"]


def test_another_script_or_a_console_that_does_not_allow_it_prepares_from_scratch(tmp_path):
    for case, second in (("script", {"script_url": "s3://bucket/other.py"}), ("console", {"reuse_previous": False})):
        texts = attempt_texts(run_attempts(tmp_path / case, second), 2)
        assert not any("Partial recovery" in t for t in texts)
        assert any(t.startswith("[INFO] Image ") for t in texts)  # prepared as any first attempt is
