"""The exit report names what failed around the command (`failure`), so the console can tell
the user the real cause: an environment that could not start the command, an output that
could not be uploaded (real SeaweedFS)."""

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


def _run(tmp_path, placement, monkeypatch, env: dict[str, str] | None = None) -> FakeConsole:
    for name, value in (env or {}).items():
        monkeypatch.setenv(name, value)

    async def scenario():
        console = FakeConsole([placement])
        async with running_console(console) as port, running_agent(make_config(tmp_path, port)):
            await until(console.exited, timeout=20, what="the exited report")
        return console

    return asyncio.run(scenario())


def test_a_command_that_cannot_be_started_is_an_environment_failure(tmp_path, monkeypatch):
    # the job's own PATH hides bash: the runtime cannot start the command at all
    placement = make_placement(command="echo never", env={"PATH": str(tmp_path / "empty")})

    console = _run(tmp_path, placement, monkeypatch)

    exited = console.exited()
    assert exited["failure"] == "environment"
    assert exited["message"].startswith("the command could not be started: ")
    assert console.states() == ["preparing", "exited"]
    assert any(t.startswith("[ERROR] The command could not be started: ") for t in console.texts())


def test_an_output_that_cannot_be_uploaded_is_an_output_upload_failure(tmp_path, monkeypatch, object_store):
    # the placement's own credentials, refused by the store (SeaweedFS creates a missing bucket on
    # upload, so that is no test)
    placement = make_placement(
        command='echo weights > "$OUTPUT_DIR/model.pt"; echo trained',
        output_prefix="s3://simpleai-results/jobs/7/attempt-1",
        storage={"endpoint_url": object_store.endpoint, "bucket": "simpleai-results",
                 "access_key": object_store.access_key, "secret_key": "not-the-secret"},
    )
    console = _run(tmp_path, placement, monkeypatch)

    exited = console.exited()
    assert exited["exit_code"] == 0 and exited["failure"] == "output_upload"
    assert exited["message"].startswith("output not uploaded to s3://simpleai-results/jobs/7/attempt-1/master: ")
    assert "SignatureDoesNotMatch" in exited["message"]
    assert "output_url" not in exited


def test_a_clean_run_names_no_failure(tmp_path, monkeypatch):
    console = _run(tmp_path, make_placement(command="echo fine"), monkeypatch)
    assert "failure" not in console.exited()
