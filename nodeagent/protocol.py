"""The wire protocol between node agents and the console: one WebSocket, JSON text frames.

Shared by both ends (the console imports this module; it has no Django import).

Connection: the agent opens `ws(s)://CONSOLE/ws/agent/` with the header
`Authorization: Bearer <node token>`. A wrong or revoked token is answered with an `error`
message, then close code 4401; the agent prints the message and exits non-zero.

One connection per node, and the token alone does not take a live node's place: each welcome
carries a `resume` secret of that session, which the agent keeps in memory only and presents in
the hello of its next connection. A hello for a node whose connection is alive (connected, and
its heartbeats arrive within the lost grace) that does not present the current session's secret
is refused with an `error` and close 4423, and changes nothing: the live connection keeps the
node, its placements and its desired state. The refused agent retries with backoff; an agent
process that restarted is accepted as soon as the console sees its old connection gone (closed,
or silent past the grace). A hello with the right secret (a reconnect after a blip) opens a new
session and the older connection is closed with 4409.

Agent → console
  hello        first message: what this node is, and what it still runs
  heartbeat    every HEARTBEAT_INTERVAL seconds: liveness, and what runs
  goodbye      the agent is exiting cleanly (no msg_id): the console declares the node gone at
               once and moves its jobs on, rather than waiting out the heartbeat grace. A
               connection that closes without the console asking (the agent killed, its
               machine resetting it) is evidence too: the node is declared Lost a couple of
               seconds later unless it connected again meanwhile
  logs         a batch of lines of one stream of one attempt
  attempt      a state change of one placement (preparing / running / exited)
  metrics      a batch of metric samples (MetricBatch): GPU and node readings every
               --metrics-interval seconds, training metrics found in a job's output lines
  fault        hardware evidence as it happens (XID, ECC, row remap, NVLink, GPU lost, …)
  checkpoint   a checkpoint of a placement became durable in object storage (its commit)
Every agent message except hello/heartbeat carries `msg_id`, a number that grows by one per
message and survives agent restarts (it is kept in the spool). The console answers `ack` with
the highest msg_id it has stored, in order; the agent drops acknowledged messages from its
spool and re-sends the rest after a reconnect. The console stores each log line under the
unique key (job, stream, attempt, seq), so a re-sent line is stored once.

Console → agent
  welcome      after hello: the node's id, heartbeat interval, fencing deadline, batch limit,
               the session's resume secret
  desired      the full list of placements that should run on this node (level-triggered:
               start what is missing, stop what is not listed); sent after hello, on every
               change, and periodically
  ack          {upto: msg_id}
  inject_fault make a simulated GPU fail (tests, the admin's node page, the API)
  error        {message}; after a refused message also its msg_id (the message is acknowledged
               and kept for staff: it is not re-sent); before a close 4503 `retry: true`
               (the console is degraded: keep everything, reconnect later)

Frames: every message is a JSON object in a text frame of its own, except that a welcome with
`batch_limit` N > 1 lets the agent send up to N spooled messages (those with a msg_id) in one
frame, as a JSON array of them in msg_id order. The console handles each element exactly as if
it had come alone (checked alone; a refused one is answered alone, in its turn) and acknowledges
them as usual. A burst (a placement's `preparing`, `running` and first lines) is then one frame
instead of three: a thousand nodes starting at once cost the console a fraction of the frames.
An agent that was not told a limit (an older console) sends one message per frame.

Limits (sizes, ranges, types) and the check the console applies to every message are in
nodeagent.protocol_checks.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

PROTOCOL_VERSION = 1
AGENT_PATH = "/ws/agent/"
HEARTBEAT_INTERVAL = 3.0  # seconds
DEFAULT_FENCE_AFTER = 300.0  # seconds without the console before an agent stops its placements
# The agent channel's close codes, read by both ends (the browsers' are in console.lib.sockets)
CLOSE_BAD_TOKEN = 4401  # the token is unknown or revoked: the agent prints the error and exits
# a connection that presented this session's resume secret replaced this one: stop and exit
CLOSE_SUPERSEDED = 4409
# the node is connected and alive over another connection, and this hello did not present that
# session's resume secret: refused, nothing changed (a second agent, or an impostor with the
# token); the agent logs it and retries with backoff (an agent restarted after a silent network
# cut is accepted once the console notices that its old connection is gone)
CLOSE_NODE_IN_USE = 4423
# the console declared the node Lost (its heartbeats came later than the grace): say hello again
CLOSE_DECLARED_LOST = 4410
# the console is up but cannot serve now (its database or Redis is down). Not 1013: daphne (autobahn)
# refuses to send a close code below 3000 other than 1000, and the close would become a 1011
CLOSE_TRY_AGAIN = 4503
MAX_ENDED_REFS = 500  # at most this many ended placements in a hello (Hello.ended)

PlacementState = Literal["preparing", "running", "exited"]


class GpuInfo(TypedDict):
    index: int
    uuid: str
    model: str
    memory_gb: int


class NodeInfo(TypedDict):
    name: str
    server_type: str
    address: str  # where other nodes reach this one (MASTER_ADDR when it hosts rank 0)
    gpus: list[GpuInfo]
    cpus: int
    memory_gb: int
    runtime: str  # "process" | "docker"
    agent_version: str


class RunningRef(TypedDict):
    job_id: int
    attempt: int
    role: str


class Hello(TypedDict):
    type: Literal["hello"]
    protocol: int
    node: NodeInfo
    running: list[RunningRef]
    sent_at: NotRequired[float]  # the agent's clock (unix seconds): the console learns its offset
    # placements this agent process saw end (the most recent MAX_ENDED_REFS): their exit reports
    # may still be on their way in the spool, so the console does not take them for lost
    ended: NotRequired[list[RunningRef]]
    # the `resume` of the welcome this agent process got last (absent on its first connection):
    # proves it is the process whose connection it replaces
    resume: NotRequired[str]


class Heartbeat(TypedDict):
    type: Literal["heartbeat"]
    running: list[RunningRef]
    # when it was sent (agent's clock): a node whose messages wait in the console's queue longer
    # than the lost grace counts as cut off, whatever its last processed heartbeat says
    sent_at: NotRequired[float]


class Goodbye(TypedDict):
    type: Literal["goodbye"]
    reason: str  # shown to staff and in the attempt's cause


class LogBatch(TypedDict):
    type: Literal["logs"]
    msg_id: int
    job_id: int
    attempt: int
    stream: str  # the node role: master, worker-1, ...
    lines: list[list[Any]]  # [seq:int, ts:float (unix seconds), text:str]


class MetricBatch(TypedDict):
    """Samples, spooled and acknowledged like `logs`; the console stores each sample once.

    A sample is [metric: str, ts: float (unix seconds), value: float, dimensions: dict]:
    `metric` is a name of the console's catalogue (monitoring.catalog), e.g. GPUUtilization;
    dimensions are any of `gpu` (device index), `job` (job id, while a placement holds the
    GPU, and on training metrics) and `stream` (the node role, on training metrics). The
    node is the connection's. The unique key is (metric, node, dimensions, ts).
    """

    type: Literal["metrics"]
    msg_id: int
    samples: list[list[Any]]  # [metric, ts, value, {"gpu"?: int, "job"?: int, "stream"?: str}]


class AttemptUpdate(TypedDict):
    type: Literal["attempt"]
    msg_id: int
    job_id: int
    attempt: int
    role: str
    state: PlacementState
    exit_code: NotRequired[int | None]  # when exited: the process's code, None if killed
    signal: NotRequired[int | None]  # when exited by a signal
    output_url: NotRequired[str]  # s3://bucket/prefix where OUTPUT_DIR was uploaded
    message: NotRequired[str]  # human-readable detail (e.g. why preparation failed)
    image_error: NotRequired[bool]  # the image could not be pulled / the registry refused
    failure: NotRequired[str]  # when something around the command failed: one of PREPARATION_FAILURES


# What an `exited` report's `failure` names: the placement ended because the agent could not
# prepare it or deliver its output, not because of the command; `message` says why. The
# console puts the cause into the job's status reason (jobs.environments.preparation).
# workdir_download: the project (workdir) could not be downloaded, checked or unpacked;
# input_download: an input could not be synced; requirements: requirements.txt could not be installed
PREPARATION_FAILURES = ("script_download", "image_pull", "environment", "output_upload", "workdir_download",
                        "input_download", "requirements")


class Fault(TypedDict):
    """Hardware evidence; `kind` is one of FAULT_KINDS."""

    type: Literal["fault"]
    msg_id: int
    gpu_index: int | None
    kind: str
    xid: NotRequired[int | None]
    detail: NotRequired[str]
    ts: float


FAULT_KINDS = (
    "xid", "ecc_uncorrected", "row_remap_pending", "row_remap_failure", "nvlink", "gpu_lost",
    "gpu_missing", "recovery_action",
)


class CheckpointCommit(TypedDict):
    """Step `step` of a placement is complete in object storage (MANIFEST.json is there)."""

    type: Literal["checkpoint"]
    msg_id: int
    job_id: int
    attempt: int
    role: str
    step: int
    url: str  # s3://bucket/prefix/step-N


class InjectFault(TypedDict):
    type: Literal["inject_fault"]
    gpu_index: int | None
    kind: str
    xid: NotRequired[int | None]
    detail: NotRequired[str]


class Welcome(TypedDict):
    """No object-storage keys: a node holds nothing node-wide; each placement carries its
    attempt's own (`Placement.storage`). An agent ignores the `object_storage` an older
    console may still send."""

    type: Literal["welcome"]
    node_id: int
    heartbeat_interval: float
    # cut off from the console this long, the agent stops its own placements (fencing); the
    # console declares the node Lost only later, so work is never run twice
    fence_after_seconds: NotRequired[float]
    # spooled messages the agent may send in one frame (a JSON array); absent: one per frame
    batch_limit: NotRequired[int]
    # this session's resume secret: kept in the agent's memory only (never on disk, never in a
    # job's reach) and sent in the hello of its next connection (absent: an older console)
    resume: NotRequired[str]


class Registry(TypedDict):
    username: str
    password: str


class Placement(TypedDict):
    """One node's part of one attempt of a job: everything the agent needs to run it."""

    job_id: int
    job_name: str
    attempt: int
    role: str  # master (node rank 0), worker-1, worker-2, ...
    node_rank: int
    nnodes: int
    nproc_per_node: int
    master_addr: str
    master_port: int
    gpu_indices: list[int]
    command: str
    script_url: str  # s3://bucket/key or ""
    image: str
    registry: Registry | None
    shm_size_gb: int
    mount_path: str  # File Storage volume mount path, or ""
    output_prefix: str  # s3://bucket/prefix for OUTPUT_DIR
    resume_step: int | None  # CKPT_LAST_STEP when resuming
    stop_grace_seconds: float
    env: dict[str, str]
    warm_pool: NotRequired[WarmPool]  # absent: prepare from scratch and keep nothing (older consoles)
    environment: NotRequired[TrainingEnvironment]  # absent: the node's own Python (older consoles)
    # whose job it is: the placement's Unix group and File Storage share on the node (nodeagent.jobusers)
    tenant: NotRequired[Tenant]
    # the attempt's own object-storage access (absent: the console has no object storage)
    storage: NotRequired[PlacementStorage]
    # the user's project directory, unpacked as the command's working directory before the script
    workdir: NotRequired[Workdir]
    # data synced onto the node before the command starts: $SIMPLEAI_INPUT_<NAME>
    inputs: NotRequired[list[InputSpec]]
    # partial recovery: what this node prepared for the job's previous attempt (same role, exited)
    # may be reused instead of preparing again (nodeagent.reuse); absent: prepare as usual
    reuse_previous: NotRequired[bool]


class Workdir(TypedDict):
    url: str  # s3://<owner bucket>/workdirs/<sha256>.tar.gz
    sha256: str  # the project manifest's (or an older CLI's tarball digest): the node's cache key, checked as it unpacks


class InputSpec(TypedDict):
    name: str  # as the user wrote it; the variable is SIMPLEAI_INPUT_<NAME upper-cased>
    url: str  # s3://<owner bucket>/key (one object) or s3://<owner bucket>/prefix/ (a tree)


class Tenant(TypedDict):
    id: int  # the console user's id
    name: str  # the console user's name (log lines only)


class PlacementStorage(TypedDict):
    """Credentials of this attempt only, minted by the console for it and revoked when it ends:
    they read the owner's storage space (`bucket`) and write only the job's own prefix
    (`jobs/<job_id>/`: results and checkpoints). The agent downloads and uploads with them, and
    the command gets them too (S3_ENDPOINT_URL, S3_ACCESS_KEY, S3_SECRET_KEY)."""

    endpoint_url: str
    bucket: str
    access_key: str
    secret_key: str


class TrainingEnvironment(TypedDict):
    """The job's framework and version as a pinned requirement list (nodeagent.envcache). Under
    the process runtime the agent builds it into a Python environment once per node and reuses
    it; under the Docker runtime the job's image provides it (`image` names one that does)."""

    name: str  # e.g. deepspeed-0.18.9, shown in the job's log
    framework: str  # pytorch | deepspeed
    framework_label: str  # PyTorch | DeepSpeed
    version: str
    requirements: list[str]  # exact pins, torch among them
    image: str  # an image with the same set, or ""


class WarmPool(TypedDict):
    """Warm pool (nodeagent.warm): after a placement is prepared, the agent keeps its environment
    (the downloaded script and data; the image stays pulled) keyed by (owner, image,
    script_url) for `keep_alive_seconds` after the placement ends. With `reuse_from_job` set, the
    console placed this on a node warm for it: the agent copies the kept environment into the
    new working directory and skips preparation, logging "Warm start: environment reused from
    job …"; if nothing is kept (or the script changed in object storage) it prepares as usual."""

    owner: int
    keep_alive_seconds: int
    reuse_from_job: int | None


class Desired(TypedDict):
    type: Literal["desired"]
    placements: list[Placement]


class Ack(TypedDict):
    type: Literal["ack"]
    upto: int


class Error(TypedDict):
    type: Literal["error"]
    message: str
    msg_id: NotRequired[int]  # the refused message (acknowledged: the agent drops it)
    retry: NotRequired[bool]  # the console is degraded; a close 4503 follows


def placement_key(job_id: int, attempt: int, role: str) -> str:
    return f"{job_id}/{attempt}/{role}"


def stream_role(node_rank: int) -> str:
    """Log streams are keyed by role, not machine: rank 0 is `master`, then `worker-N`."""
    return "master" if node_rank == 0 else f"worker-{node_rank}"
