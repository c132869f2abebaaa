"""An agent ships GPU, node and training metrics as `metrics` messages, spooled like log lines."""

from __future__ import annotations

import asyncio
import json

from nodeagent.tests.agent_support import (
    FakeConsole,
    make_config,
    make_placement,
    running_agent,
    running_console,
    until,
)

PRINT_LOSS = (
    "python -c 'import time\n"
    "for step in range(1, 200):\n"
    "    print(\"SIMPLEAI_METRIC {\\\"step\\\": %d, \\\"loss\\\": %.3f}\" % (step, 2 / step), flush=True); time.sleep(0.05)'"
)


def samples(console: FakeConsole) -> list[list]:
    return [s for m in console.of_type("metrics") for s in m["samples"]]


def test_a_running_job_gets_busy_gpu_samples_and_its_training_metrics(tmp_path):
    async def scenario():
        console = FakeConsole([make_placement(command=PRINT_LOSS, gpu_indices=[1])])
        async with running_console(console) as port, running_agent(make_config(tmp_path, port, metrics_interval=0.2)):
            # its command runs on GPU 1: the memory is in use (utilisation follows how hard the
            # command works, and this one mostly sleeps: nodeagent.metrics.command_loads)
            await until(lambda: any(s[0] == "GPUMemoryUsed" and s[3].get("job") == 7 and s[2] > 50 for s in samples(console)),
                        what="a busy sample of the job's GPU")
            await until(lambda: any(s[0] == "TrainingLoss" for s in samples(console)), what="a loss sample")
        return console

    console = asyncio.run(scenario())
    got = samples(console)
    gpu1 = [s for s in got if s[0] == "GPUUtilization" and s[3].get("gpu") == 1]
    held = gpu1[next(i for i, s in enumerate(gpu1) if s[3].get("job") == 7):]
    assert all(s[3].get("job") == 7 for s in held)  # the job's while its placement holds GPU 1
    assert all(s[3] == {"gpu": 0} and s[2] == 0 for s in got if s[0] == "GPUUtilization" and s[3].get("gpu") == 0)
    assert any(s[0] == "NodeMemoryUtilization" and s[3] == {} for s in got)
    loss = [s for s in got if s[0] == "TrainingLoss"]
    assert loss[0][2] == 2.0 and loss[0][3] == {"job": 7, "stream": "master"}


def test_samples_taken_while_the_console_is_away_arrive_after_it_comes_back(tmp_path):
    async def scenario():
        console = FakeConsole([make_placement(command="sleep 30")])
        console.ack = False

        async def crash_on_first_metrics(ws, message):
            if message.get("type") == "metrics":
                console.crash(ws)

        console.on_message = crash_on_first_metrics
        async with running_console(console) as port, running_agent(make_config(tmp_path, port, metrics_interval=0.1)) as agent:
            await until(lambda: console.of_type("metrics"), what="the first metrics batch")

            def spooled_metrics():
                return {m["msg_id"]: m for m in (json.loads(text) for _, text in agent.spool.unsent(0)) if m["type"] == "metrics"}

            # the console is down: sampling goes on into the spool
            await until(lambda: len(spooled_metrics()) >= 5, what="five batches spooled during the outage")
            during_outage = spooled_metrics()
            console.ack, console.on_message = True, None
            async with running_console(console, port):
                await until(lambda: set(during_outage) <= {m["msg_id"] for m in console.of_type("metrics")},
                            what="the spooled batches re-sent")
        return console, during_outage

    console, during_outage = asyncio.run(scenario())
    received = {m["msg_id"]: m for m in console.of_type("metrics")}
    for msg_id, message in during_outage.items():
        assert received[msg_id]["samples"] == message["samples"]  # the same samples: the console stores them once
