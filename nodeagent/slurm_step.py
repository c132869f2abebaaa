"""The node-side step launcher of a Training Job that runs under Slurm (no Django).

The batch script (jobs.slurm.batch_script) calls it twice, at the same time:

    python -m nodeagent.slurm_step token     # batch step: the launch key → this run's token, on stdout
    srun --input=all … python -m nodeagent.slurm_step run --work-dir DIR --grace S --gpus auto …

`run` loads its modules first and then reads the token, one line on its standard input (or
SIMPLEAI_ATTEMPT_TOKEN, as scripts of an earlier release pass it), so the redemption and the
launchers' start overlap.

`run` is one task on every allocated node. It is a node agent for exactly one placement: it
connects to the console with the run's token (nodeagent.slurm_protocol), receives its
placement (role, rank, MASTER_ADDR of the allocation's first host, CKPT_LAST_STEP, …) and runs it
with the agent's own Runner (script download, environment contract, command, OUTPUT_DIR upload),
shipping log lines, metrics and checkpoint commits through the same spool. SIGTERM from Slurm
(cancel, preemption, time limit) or from srun (another rank failed) stops the command with the
grace period; the launcher then drains its spool and exits: with the command's exit code, or 0
when it stopped because it was told to (the Slurm job's state says why).

This module is the entry point and imports only the standard library: `token` runs before the
job's command can start on every run, and the agent's modules (asyncio, websockets, the runner,
storage) take several times longer to import than the redemption itself. `run` lives in
nodeagent.slurm_run, imported when it is asked for. Both end with os._exit once their output is
flushed and the spool closed: a fresh process per run need not pay the interpreter's teardown
(boto3's and the agent's modules) before Slurm sees the step end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TextIO

from .slurm_protocol import CONSOLE_ENV, JOB_ENV, LAUNCH_KEY_ENV, REDEEM_PATH, TOKEN_ENV

PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)
# seconds between tries (about 5 minutes in all): the console may be restarting, or slow under
# load; the job's allocation waits rather than fails (a retry gets the same token)
REDEEM_DELAYS = (0.5, 1, 2, 4, 8, *(10,) * 5, *(15,) * 5, *(30,) * 5)
# one answer may take long: the redemption records the run's attempt, whose object-storage keys
# can cost the console tens of seconds when the storage is slow; a retry only queues behind it
REDEEM_TIMEOUT = 90
EXIT_FAILED = 1


class UsageError(Exception):
    pass


def _env(environ: Mapping[str, str], name: str) -> str:
    value = environ.get(name, "").strip()
    if not value:
        raise UsageError(f"{name} is not set: this command runs inside a Slurm job the console submitted")
    return value


# -- token: the batch step redeems the job's launch key ---------------------------------------
def redeem(environ: Mapping[str, str], delays: Sequence[float] = REDEEM_DELAYS) -> str:
    """POST the run's identity with the launch key; returns this run's token (retries transient errors)."""
    console = _env(environ, CONSOLE_ENV).rstrip("/")
    body = json.dumps({
        "job_id": int(_env(environ, JOB_ENV)), "slurm_job_id": int(_env(environ, "SLURM_JOB_ID")),
        "restart_count": int(environ.get("SLURM_RESTART_COUNT") or 0), "nodelist": _env(environ, "SLURM_JOB_NODELIST"),
    }).encode()
    key = _env(environ, LAUNCH_KEY_ENV)
    for attempt, delay in enumerate((*delays, None)):
        request = urllib.request.Request(console + REDEEM_PATH, data=body, method="POST", headers={
            "Authorization": f"Bearer {key}", "Content-Type": "application/json",
        })
        try:
            with urllib.request.urlopen(request, timeout=REDEEM_TIMEOUT) as response:
                return str(json.loads(response.read())["token"])
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", errors="replace")[:500]
            if exc.code < 500:  # refused: retrying cannot help
                raise UsageError(f"the console refused this run (HTTP {exc.code}): {detail}") from exc
            problem = f"HTTP {exc.code}: {detail}"
        except (OSError, ValueError, KeyError) as exc:
            problem = str(exc)
        if delay is None:
            raise UsageError(f"the console at {console} did not answer after {attempt + 1} tries: {problem}")
        print(f"slurm_step: the console is not answering ({problem}); retrying in {delay} s", file=sys.stderr, flush=True)
        time.sleep(delay)
    raise AssertionError("unreachable")


def read_token(stream: TextIO) -> str:
    """The run's token, one line from the batch step (srun --input=all); "" when it redeemed none."""
    try:
        return stream.readline().strip()
    except (OSError, ValueError):  # no standard input at all
        return ""


def _without_own_path(environ: dict[str, str]) -> dict[str, str]:
    """The launcher may be started with PYTHONPATH pointing at this package: the user's command should not inherit it."""
    parts = [p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p and os.path.abspath(p) != PACKAGE_ROOT]
    result = dict(environ)
    if parts:
        result["PYTHONPATH"] = os.pathsep.join(parts)
    else:
        result.pop("PYTHONPATH", None)
    return result


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m nodeagent.slurm_step", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("token", help="redeem the job's launch key for this run's token (prints it)")
    run = commands.add_parser("run", help="run this node's placement (one srun task per node)")
    run.add_argument("--work-dir", required=True, help="node-local directory for spools and working directories")
    run.add_argument("--grace", type=float, default=30.0, help="seconds from SIGTERM to SIGKILL for the command")
    run.add_argument("--gpus", choices=("auto", "simulated", "off"), default="auto", help="GPU metrics: NVML, simulated, none")
    run.add_argument("--server-type", default="g2", help="the server type (names the simulated GPUs' model)")
    run.add_argument("--metrics-interval", type=float, default=10.0, help="seconds between metric samples (0: none)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s slurm_step: %(message)s", stream=sys.stderr)
    try:
        if args.command == "token":
            print(redeem(os.environ))
            return 0
        environ = _without_own_path(dict(os.environ))
        token = environ.pop(TOKEN_ENV, "")
        os.environ.clear()
        os.environ.update(environ)  # the Runner's process runtime inherits os.environ
        import asyncio

        from .slurm_run import serve  # loads while the batch step redeems the key

        token = token or read_token(sys.stdin)
        if not token:
            raise UsageError("no token for this run on standard input: the batch step could not redeem the job's "
                             "launch key (its reason is in the batch job's output)")
        return asyncio.run(serve(args, os.environ, token))
    except UsageError as exc:
        print(f"slurm_step: {exc}", file=sys.stderr, flush=True)
        return EXIT_FAILED


def exit_now(code: int) -> None:
    """Flush and leave without the interpreter's teardown (the spool is closed, the lines are out)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    code = EXIT_FAILED
    with contextlib.suppress(KeyboardInterrupt):
        code = main()
    exit_now(code)
