"""Limits of the agent protocol, and the check every agent message passes before the console
acts on it (no Django: both ends import it). The agent keeps its messages within the limits
(it splits long lines and caps a batch in bytes); the console refuses anything else with an
`error` that names the problem, acknowledges it so the agent drops it, and keeps a copy for
staff (jobs.models.RejectedAgentMessage) — a bad message is never re-sent forever.
"""

from __future__ import annotations

import math
from typing import Any

from .protocol import FAULT_KINDS, MAX_ENDED_REFS, PREPARATION_FAILURES

# The agent's side of the limits
MAX_LINE_CHARS = 16_384  # a longer output line is split into continuation lines
MAX_BATCH_LINES = 500
MAX_BATCH_BYTES = 1 * 2**20  # a logs/metrics message is flushed before it grows past this
MAX_SAMPLES = 2_000
# The console accepts frames and messages this large (daphne's --websocket-max-*-size): well
# above the agent's largest message, so a legitimate batch is never cut off by the server
MAX_MESSAGE_BYTES = 8 * 2**20
# A batched frame (a JSON array of spooled messages, nodeagent.protocol "Frames"): at most this
# many messages (the welcome's batch_limit may ask fewer) and this many characters (at most four
# UTF-8 bytes each: well within MAX_MESSAGE_BYTES); a longer message goes alone
MAX_FRAME_MESSAGES = 64
MAX_FRAME_CHARS = 1 * 2**20

# Ranges of what the console stores (PostgreSQL column types)
MAX_BIGINT = 2**63 - 1
MAX_INT = 2**31 - 1
MAX_SMALLINT = 2**15 - 1
MAX_ROLE_CHARS = 32
MAX_URL_CHARS = 1024
MAX_METRIC_CHARS = 64
MAX_RESUME_CHARS = 128  # a hello's resume secret (the console issues 43 characters)
# timestamps between 2000-01-01 and 2100-01-01 (unix seconds)
MIN_TS, MAX_TS = 946_684_800.0, 4_102_444_800.0

STATES = ("preparing", "running", "exited")

Message = dict[str, Any]  # a decoded JSON object, not yet checked: the checks below narrow it


class Invalid(ValueError):
    """What is wrong with a message, in words an operator can act on."""


def _int(message: Message, key: str, low: int, high: int, optional: bool = False) -> None:
    value = message.get(key)
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise Invalid(f"`{key}` must be an integer, not {type(value).__name__}")
    if not low <= value <= high:
        raise Invalid(f"`{key}` {value} is out of range ({low}..{high})")


def _str(message: Message, key: str, max_chars: int, optional: bool = False, choices: tuple[str, ...] = ()) -> None:
    value = message.get(key)
    if value is None and optional:
        return
    if not isinstance(value, str):
        raise Invalid(f"`{key}` must be a string, not {type(value).__name__}")
    if len(value) > max_chars:
        raise Invalid(f"`{key}` is {len(value)} characters long (at most {max_chars})")
    if choices and value not in choices:
        raise Invalid(f"`{key}` {value[:40]!r} is not one of {', '.join(choices)}")


def _ts(value: Any, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise Invalid(f"{what} must be a finite number of seconds")
    if not MIN_TS <= value <= MAX_TS:
        raise Invalid(f"{what} {value} is not a time between 2000 and 2100")


def _role(message: Message, key: str) -> None:
    _str(message, key, MAX_ROLE_CHARS)
    value = message[key]
    if value != "master" and not (value.startswith("worker-") and value[7:].isdigit()):
        raise Invalid(f"`{key}` {value[:40]!r} is not a node role (master, worker-N)")


def _job_ref(message: Message) -> None:
    _int(message, "job_id", 1, MAX_BIGINT)
    _int(message, "attempt", 1, MAX_INT)


def _logs(message: Message) -> None:
    _job_ref(message)
    _role(message, "stream")
    lines = message.get("lines")
    if not isinstance(lines, list) or not lines:
        raise Invalid("`lines` must be a non-empty list")
    if len(lines) > MAX_BATCH_LINES:
        raise Invalid(f"{len(lines)} lines in one batch (at most {MAX_BATCH_LINES})")
    for line in lines:
        if not isinstance(line, list) or len(line) != 3:
            raise Invalid("each line must be [seq, ts, text]")
        seq, ts, text = line
        if isinstance(seq, bool) or not isinstance(seq, int) or not 1 <= seq <= MAX_BIGINT:
            raise Invalid(f"line seq {seq!r} must be an integer from 1 to {MAX_BIGINT}")
        _ts(ts, f"the time of line {seq}")
        if not isinstance(text, str):
            raise Invalid(f"the text of line {seq} must be a string")
        if len(text) > MAX_LINE_CHARS:
            raise Invalid(f"line {seq} is {len(text)} characters long (at most {MAX_LINE_CHARS}; the agent splits longer ones)")


def _metrics(message: Message) -> None:
    samples = message.get("samples")
    if not isinstance(samples, list):
        raise Invalid("`samples` must be a list")
    if len(samples) > MAX_SAMPLES:
        raise Invalid(f"{len(samples)} samples in one message (at most {MAX_SAMPLES})")
    for sample in samples:
        if not isinstance(sample, list) or len(sample) != 4:
            raise Invalid("each sample must be [metric, ts, value, dimensions]")
        metric, ts, value, dims = sample
        if not isinstance(metric, str) or not 0 < len(metric) <= MAX_METRIC_CHARS:
            raise Invalid(f"metric name {str(metric)[:40]!r} must be a string of 1..{MAX_METRIC_CHARS} characters")
        _ts(ts, f"the time of a {metric} sample")
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise Invalid(f"a {metric} sample's value must be a finite number")
        if not isinstance(dims, dict) or set(dims) - {"gpu", "job", "stream"}:
            raise Invalid(f"a {metric} sample's dimensions may only be gpu, job and stream")
        if "gpu" in dims:
            _int(dims, "gpu", 0, MAX_SMALLINT)
        if "job" in dims:
            _int(dims, "job", 1, MAX_BIGINT)
        if "stream" in dims:
            _role(dims, "stream")


def _attempt(message: Message) -> None:
    _job_ref(message)
    _role(message, "role")
    _str(message, "state", 16, choices=STATES)
    _int(message, "exit_code", -MAX_INT - 1, MAX_INT, optional=True)
    _int(message, "signal", 0, 255, optional=True)
    _str(message, "output_url", MAX_URL_CHARS, optional=True)
    _str(message, "message", 100_000, optional=True)  # stored cut to the column's size
    _str(message, "failure", 32, optional=True, choices=PREPARATION_FAILURES)
    if "image_error" in message and not isinstance(message["image_error"], bool):
        raise Invalid("`image_error` must be true or false")


def _fault(message: Message) -> None:
    _str(message, "kind", 32, choices=FAULT_KINDS)
    _int(message, "gpu_index", 0, MAX_SMALLINT, optional=True)
    _int(message, "xid", 0, MAX_INT, optional=True)
    _str(message, "detail", 100_000, optional=True)
    if message.get("ts") is not None:
        _ts(message["ts"], "`ts`")


def _checkpoint(message: Message) -> None:
    _job_ref(message)
    _role(message, "role")
    _int(message, "step", 0, MAX_INT)
    _str(message, "url", MAX_URL_CHARS)


def _refs(message: Message, key: str, limit: int) -> None:
    refs = message.get(key, [])
    if not isinstance(refs, list) or len(refs) > limit:
        raise Invalid(f"`{key}` must be a list of at most {limit} placements")
    for ref in refs:
        if not isinstance(ref, dict):
            raise Invalid(f"each of `{key}` must be an object")
        _job_ref(ref)
        _role(ref, "role")


def _hello(message: Message) -> None:
    _str(message, "resume", MAX_RESUME_CHARS, optional=True)
    _refs(message, "running", 4096)
    _refs(message, "ended", MAX_ENDED_REFS)
    node = message.get("node")
    if not isinstance(node, dict):
        raise Invalid("`node` must be an object")
    _str(node, "name", 63)
    _str(node, "server_type", 16)
    _str(node, "address", 255)
    _str(node, "runtime", 16)
    _str(node, "agent_version", 32)
    _int(node, "cpus", 0, MAX_INT)
    _int(node, "memory_gb", 0, MAX_INT)
    gpus = node.get("gpus")
    if not isinstance(gpus, list) or len(gpus) > 64:
        raise Invalid("`node.gpus` must be a list of at most 64 GPUs")
    for gpu in gpus:
        if not isinstance(gpu, dict):
            raise Invalid("each GPU must be an object")
        _int(gpu, "index", 0, MAX_SMALLINT)
        _str(gpu, "uuid", 80)
        _str(gpu, "model", 64)
        _int(gpu, "memory_gb", 0, MAX_INT)


def _goodbye(message: Message) -> None:
    _str(message, "reason", 200)


# message type → what its body must satisfy; every type but hello/heartbeat/goodbye carries msg_id
UNNUMBERED = ("hello", "heartbeat", "goodbye")
CHECKS = {
    "hello": _hello, "heartbeat": lambda message: None, "goodbye": _goodbye, "logs": _logs, "metrics": _metrics,
    "attempt": _attempt, "fault": _fault, "checkpoint": _checkpoint,
}


def check(message: Any) -> None:
    """Raise Invalid, naming the problem, unless `message` is a well-formed agent message."""
    if not isinstance(message, dict):
        raise Invalid("a message must be a JSON object")
    kind = message.get("type")
    if kind not in CHECKS:
        raise Invalid(f"unknown message type {str(kind)[:40]!r}")
    if kind not in UNNUMBERED:
        _int(message, "msg_id", 1, MAX_BIGINT)
    if kind == "heartbeat":
        _refs(message, "running", 4096)
    if kind in ("hello", "heartbeat") and message.get("sent_at") is not None:
        _ts(message["sent_at"], "`sent_at`")
    CHECKS[kind](message)


def check_frame(frame: list[Any]) -> None:
    """Raise Invalid unless a batched frame (a JSON array) holds 1 to MAX_FRAME_MESSAGES messages,
    each a JSON object (each is then checked alone). Refused whole otherwise: one frame cannot
    make the console refuse, answer and keep thousands of things."""
    if not 1 <= len(frame) <= MAX_FRAME_MESSAGES:
        raise Invalid(f"a batched frame holds 1 to {MAX_FRAME_MESSAGES} messages, not {len(frame)}")
    for message in frame:
        if not isinstance(message, dict):
            raise Invalid(f"a batched frame holds messages (JSON objects), not {type(message).__name__}")


def acknowledgeable(message: Any) -> int | None:
    """The msg_id to acknowledge a refused message with, so the agent drops it (None: none usable);
    of a refused batched frame, the highest of its messages'."""
    if isinstance(message, list):
        return max((found for m in message if (found := acknowledgeable(m)) is not None), default=None)
    if isinstance(message, dict):
        msg_id = message.get("msg_id")
        if isinstance(msg_id, int) and not isinstance(msg_id, bool) and 1 <= msg_id <= MAX_BIGINT:
            return msg_id
    return None
