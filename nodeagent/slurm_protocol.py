"""How a Slurm job's step launcher (nodeagent.slurm_step) talks to the console.

Shared by both ends (no Django). Everything after the connection is the agent protocol of
nodeagent.protocol, spool and acknowledgements included; what differs is who connects and
with which credential:

1. Redeem (once per Slurm run, by the batch step on the first node):
   `POST /api/v1/slurm/runs/` with `Authorization: Bearer <launch key>` (the job-scoped secret the
   console put into the batch job's environment) and RedeemRequest. The console records the run
   (a new attempt when Slurm requeued the job) and answers RedeemAnswer: a token for this run
   only. 403 for a wrong key, 409 when the run is no longer wanted (deleted job, superseded run).
2. Connect (every node's task): `ws(s)://CONSOLE/ws/slurm-step/` with
   `Authorization: Bearer <run token>`. `hello.node.name` is the Slurm node name
   (SLURMD_NODENAME); the console answers `welcome` and a `desired` list holding this node's
   placement of the run (empty once the run is no longer current). `logs`, `attempt`,
   `metrics` and `checkpoint` messages are accepted only for that job, attempt and role.
"""

from __future__ import annotations

from typing import TypedDict

REDEEM_PATH = "/api/v1/slurm/runs/"
STEP_PATH = "/ws/slurm-step/"
TOKEN_ENV = "SIMPLEAI_ATTEMPT_TOKEN"
LAUNCH_KEY_ENV = "SIMPLEAI_LAUNCH_KEY"
CONSOLE_ENV = "SIMPLEAI_CONSOLE_URL"
JOB_ENV = "SIMPLEAI_JOB_ID"


class RedeemRequest(TypedDict):
    job_id: int  # the Training Job
    slurm_job_id: int  # SLURM_JOB_ID
    restart_count: int  # SLURM_RESTART_COUNT (0 for the first run)
    nodelist: str  # SLURM_JOB_NODELIST, e.g. n[1-2]


class RedeemAnswer(TypedDict):
    token: str
    attempt: int
