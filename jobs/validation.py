"""Validation rules of the Training Job creation form, shared by the form and the API.

Plain functions over plain data: each returns a message, or None when the value is fine.
`validate_job` runs them all and returns {field: message}.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from console.lib import validation as shared
from nodeagent.fileshare import PLATFORM_ROOT, check_mount_path

from .choices import FRAMEWORK_VERSIONS, Framework, LearningType
from .recovery.spot_fallback import fallback_error
from .scheduling.catalogue import Allocation

NAME_MIN = 3  # a job's and a node's name: 3 to 63 characters (console.lib.validation)
MAX_NODES = 64
MAX_TAGS = 50
MAX_TAG_KEY = 128
MAX_TAG_VALUE = 256
COMMAND_MIN, COMMAND_MAX = 3, 1024
# the model's column sizes: longer values must be refused here, not by the database
MAX_REGISTRY_USERNAME = 128
MAX_REGISTRY_PASSWORD = 256
MAX_SCRIPT_URL = 1024

# Messages the form's and the serializer's own field types use, so both answer alike.
LEARNING_TYPE_MESSAGE = "Choose On-Demand Training or Spot Training."
FRAMEWORK_MESSAGE = "Choose PyTorch or DeepSpeed."
SERVER_TYPE_MESSAGE = "Select a server type from the catalogue."
DUPLICATE_NAME_MESSAGE = "You already have a Training Job with this name."  # checked against the database
NODES_MESSAGE = f"Enter 1 to {MAX_NODES} nodes (distributed training from 2)."

# Docker's image reference grammar (distribution/reference), in one expression.
_DOMAIN_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?"
_PATH_PART = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_NAME = rf"(?:{_DOMAIN}/)?{_PATH_PART}(?:/{_PATH_PART})*"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
# ASCII: Docker's \w is [A-Za-z0-9_]; fullmatch everywhere, as `$` would accept a trailing newline
IMAGE_RE = re.compile(rf"{_NAME}(?::{_TAG})?(?:@{_DIGEST})?", re.ASCII)
BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
# what the CLI uploads a packed project as: content-addressed by the tarball's SHA-256
WORKDIR_KEY_RE = re.compile(r"workdirs/([0-9a-f]{64})\.tar\.gz", re.ASCII)
INPUT_NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,31}", re.ASCII)
MAX_INPUTS = 16


@dataclass(frozen=True)
class ServerTypeInfo:
    """What validation needs to know about a server type."""

    name: str
    allocations: tuple[Allocation, ...]


def name_error(name: str) -> str | None:
    return shared.name_error(name, NAME_MIN)


def learning_type_error(value: str | None) -> str | None:
    return None if value in LearningType.values else LEARNING_TYPE_MESSAGE


def framework_error(value: str | None) -> str | None:
    return None if value in Framework.values else FRAMEWORK_MESSAGE


def image_error(url: str) -> str | None:
    if not url:
        return "Enter the AI Training Image URL."
    if len(url) > 255 or not IMAGE_RE.fullmatch(url):
        return "Enter a valid image reference, e.g. registry.example.com:5000/team/trainer:1.0."
    return None


def mount_path_error(path: str) -> str | None:
    """The agents' own rule (nodeagent.fileshare), so a path no node would mount is refused on the
    field, not on the node: the path is inside the job, never a host path, never a system
    directory of the job's file system nor the platform's own mounts (/simpleai)."""
    if not path:
        return None
    try:
        check_mount_path(path, reserved=[PLATFORM_ROOT])
    except ValueError as exc:
        return str(exc)
    return None


def script_url_error(url: str) -> str | None:
    if not url:
        return None
    if not url.startswith("s3://"):
        return "Enter an object storage URL of the form s3://bucket/path/to/script.py."
    if len(url) > MAX_SCRIPT_URL:
        return f"Enter a URL of at most {MAX_SCRIPT_URL:,} characters."
    bucket, _, key = url[len("s3://"):].partition("/")
    if not BUCKET_RE.fullmatch(bucket):
        return "The bucket name must be 3 to 63 lowercase letters, digits, '-' or '.'."
    if not key or key.endswith("/"):
        return "The URL must name an object (a file), not a bucket or folder."
    return None


def not_in_space_message(url: str, bucket: str) -> str:
    return f"{url} is not in your storage space (s3://{bucket}/)."


def _split_s3(url: str) -> tuple[str, str] | None:
    if not url.startswith("s3://"):
        return None
    bucket, _, key = url[len("s3://"):].partition("/")
    return bucket, key


def workdir_url_error(url: str, bucket: str) -> str | None:
    """A workdir is a project the CLI packed into the owner's own space: s3://<bucket>/workdirs/<sha256>.tar.gz."""
    if not url:
        return None
    if len(url) > MAX_SCRIPT_URL:
        return f"Enter a URL of at most {MAX_SCRIPT_URL:,} characters."
    parts = _split_s3(url)
    if parts is None:
        return f"Enter the workdir as s3://{bucket}/workdirs/<sha256>.tar.gz (simpleai run --workdir uploads it there)."
    if parts[0] != bucket:
        return not_in_space_message(url, bucket)
    if not WORKDIR_KEY_RE.fullmatch(parts[1]):
        return (f"A workdir is s3://{bucket}/workdirs/<sha256 of the tarball, 64 lowercase hex digits>.tar.gz; "
                f"{url} is not.")
    return None


def workdir_sha256(url: str) -> str:
    """The content hash a (valid) workdir URL names: the nodes' cache key."""
    match = WORKDIR_KEY_RE.search(url)
    return match.group(1) if match else ""


def inputs_error(inputs: object, bucket: str) -> str | None:
    """At most MAX_INPUTS of {"name", "url"}: names make $SIMPLEAI_INPUT_<NAME>, so they are
    identifiers, unique whatever their case; URLs are in the owner's space (an object, or a
    prefix ending in /)."""
    if not isinstance(inputs, list):
        return 'Enter the inputs as a list of {"name": NAME, "url": "s3://…"}.'
    if len(inputs) > MAX_INPUTS:
        return f"Add at most {MAX_INPUTS} inputs."
    seen: set[str] = set()
    for item in inputs:
        if not isinstance(item, Mapping) or set(item) != {"name", "url"} or not all(isinstance(v, str) for v in item.values()):
            return 'Each input is {"name": NAME, "url": "s3://…"}.'
        name = item["name"]
        if not INPUT_NAME_RE.fullmatch(name):
            return (f"Input name {name!r}: start with a letter, then letters, digits or '_', at most 32 "
                    "(it becomes $SIMPLEAI_INPUT_<NAME>).")
        if name.upper() in seen:
            return f"Input names must be unique (whatever their case): {name!r} appears twice."
        seen.add(name.upper())
    for item in inputs:
        name, url = item["name"], item["url"]
        if len(url) > MAX_SCRIPT_URL:
            return f"Input {name}: enter a URL of at most {MAX_SCRIPT_URL:,} characters."
        parts = _split_s3(url)
        if parts is None:
            return f"Input {name}: enter an object storage URL, s3://{bucket}/path or s3://{bucket}/prefix/."
        if parts[0] != bucket:
            return f"Input {name}: {not_in_space_message(url, bucket)}"
        if not parts[1] or parts[1].startswith("/") or any(p in ("..", ".") for p in parts[1].split("/")):
            return f"Input {name}: name an object or a folder (prefix/) inside your bucket, not the bucket itself."
    return None


def parse_inputs_text(text: str) -> tuple[list[dict[str, str]], str | None]:
    """The form's "Inputs" box: one NAME=s3://… per line (blank lines and # comments skipped)."""
    inputs: list[dict[str, str]] = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, url = line.partition("=")
        if not sep:
            return [], f"Line {number}: write NAME=s3://bucket/path."
        inputs.append({"name": name.strip(), "url": url.strip()})
    return inputs, None


def inputs_text(inputs: list[Mapping[str, str]]) -> str:
    return "\n".join(f"{item['name']}={item['url']}" for item in inputs)


def from_checkpoint_error(value: object) -> str | None:
    """Only the shape here (a job id); whose job it is and whether it has a checkpoint need the database."""
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return "Enter the id of one of your Training Jobs."
    return None


def command_error(command: str) -> str | None:
    if not COMMAND_MIN <= len(command.strip()) <= COMMAND_MAX:
        return f"Enter a command of {COMMAND_MIN} to {COMMAND_MAX:,} characters."
    return None


def registry_errors(username: str, password: str) -> dict[str, str]:
    """The user ID is optional; a password goes with it, and each fits its column."""
    errors: dict[str, str] = {}
    if len(username) > MAX_REGISTRY_USERNAME:
        errors["registry_username"] = f"Enter a user ID of at most {MAX_REGISTRY_USERNAME} characters."
    elif password and not username:
        errors["registry_username"] = "Enter the registry user ID that goes with this password."
    if len(password) > MAX_REGISTRY_PASSWORD:
        errors["registry_password"] = f"Enter a password of at most {MAX_REGISTRY_PASSWORD} characters."
    elif username and not password:
        errors["registry_password"] = "Enter the registry password for this user ID."
    return errors


def tags_error(tags: Sequence[Mapping[str, str]]) -> str | None:
    if len(tags) > MAX_TAGS:
        return f"Add at most {MAX_TAGS} tags."
    seen: set[str] = set()
    for tag in tags:
        key, value = tag.get("key", ""), tag.get("value", "")
        if not 1 <= len(key) <= MAX_TAG_KEY:
            return f"A tag key must be 1 to {MAX_TAG_KEY} characters."
        if len(value) > MAX_TAG_VALUE:
            return f"A tag value must be at most {MAX_TAG_VALUE} characters (tag {key!r})."
        if key in seen:
            return f"Tag keys must be unique: {key!r} appears twice."
        seen.add(key)
    return None


def allocation_for(info: ServerTypeInfo, gpus: int) -> Allocation | None:
    return next((a for a in info.allocations if a.gpus == gpus), None)


def node_count_error(nodes: int | None) -> str | None:
    """A job's or a workspace's number of nodes."""
    return None if nodes is not None and 1 <= nodes <= MAX_NODES else NODES_MESSAGE


def allocation_errors(data: Mapping[str, Any], info: ServerTypeInfo | None,
                      memory_required: bool = True) -> tuple[dict[str, str], Allocation | None]:
    """The server type, GPUs per node and memory of a job or a workspace: {field: message}, and
    the allocation the GPUs name (None where there is none). A workspace may leave the memory out
    (`memory_required=False`: it follows from the allocation)."""
    if info is None:
        return {"server_type": SERVER_TYPE_MESSAGE}, None
    allocation = allocation_for(info, data.get("gpus_per_node") or 0)
    if allocation is None:
        offered = ", ".join(str(a.gpus) for a in info.allocations)
        return {"gpus_per_node": f"Server type {info.name} offers {offered} GPUs per node."}, None
    memory = data.get("memory_gb")
    if (memory_required or memory is not None) and memory != allocation.memory_gb:
        return {"memory_gb": f"{allocation.gpus} GPU(s) on {info.name} come with {allocation.memory_gb} GB of memory."}, allocation
    return {}, allocation


def resource_errors(data: Mapping[str, Any], info: ServerTypeInfo | None) -> dict[str, str]:
    errors, allocation = allocation_errors(data, info)
    if allocation is None:
        return errors
    shm = data.get("shm_size_gb")
    if shm is None or not 1 <= shm <= allocation.memory_gb // 2:
        errors["shm_size_gb"] = f"Shared memory must be 1 to {allocation.memory_gb // 2} GB for this allocation."
    return errors


def validate_job(data: Mapping[str, Any], server_types: Mapping[str, ServerTypeInfo], partial: bool = False,
                 framework_versions: Mapping[str, list[str]] | None = None, bucket: str = "") -> dict[str, str]:
    """All field and cross-field rules of a job. With partial=True only the given keys are checked.
    `framework_versions`: the versions offered now (the enabled training environments);
    `bucket`: the owner's (workdir and input URLs must be in it)."""
    errors: dict[str, str] = {}

    def check(field: str, message: str | None) -> None:
        if message and (not partial or field in data):
            errors.setdefault(field, message)

    check("learning_type", learning_type_error(data.get("learning_type")))
    check("name", name_error(data.get("name", "")))
    check("framework", framework_error(data.get("framework")))
    if data.get("learning_type") == LearningType.SPOT and data.get("failover_enabled"):
        check("failover_enabled", "Spot Training cannot be used with Job Failover")
    check("spot_fallback_after_minutes", fallback_error(data.get("learning_type"), data.get("spot_fallback_after_minutes")))
    framework = data.get("framework") or ""  # None and "" are no framework alike
    version = data.get("framework_version")
    offered_versions = FRAMEWORK_VERSIONS if framework_versions is None else framework_versions
    if framework in Framework.values and version not in offered_versions.get(framework, []):
        offered = ", ".join(offered_versions.get(framework, []))
        check("framework_version", f"Choose a version of the framework: {offered}." if offered
              else f"No version of {Framework(framework).label} is offered at the moment.")
    check("node_count", node_count_error(data.get("node_count")))
    if not partial or "server_type" in data:
        for field, message in resource_errors(data, server_types.get(data.get("server_type", ""))).items():
            errors.setdefault(field, message)
    # blank: the training environment's image is filled in (jobs.submission); a node whose runtime needs an image and gets none says so
    if data.get("image_url"):
        check("image_url", image_error(data["image_url"]))
    for field, message in registry_errors(data.get("registry_username", ""), data.get("registry_password", "")).items():
        check(field, message)
    check("volume_mount_path", mount_path_error(data.get("volume_mount_path", "")))
    check("script_url", script_url_error(data.get("script_url", "")))
    check("workdir_url", workdir_url_error(data.get("workdir_url", ""), bucket))
    check("inputs", inputs_error(data.get("inputs", []), bucket))
    check("from_checkpoint", from_checkpoint_error(data.get("from_checkpoint")))
    check("command", command_error(data.get("command", "")))
    check("tags", tags_error(data.get("tags", [])))
    return errors
