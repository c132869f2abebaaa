"""Validation rules of the Training Job creation form, shared by the form and the API.

Plain functions over plain data: each returns a message, or None when the value is fine.
`validate_job` runs them all and returns {field: message}.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass

from .catalogue import Allocation
from .choices import FRAMEWORK_VERSIONS, Framework, LearningType

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9.-]*[a-z0-9]$")
NAME_CHARS_RE = re.compile(r"^[a-z0-9.-]*$")
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
INTEGER_MESSAGE = "Enter a whole number."
DUPLICATE_NAME_MESSAGE = "You already have a Training Job with this name."  # checked against the database

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


@dataclass(frozen=True)
class ServerTypeInfo:
    """What validation needs to know about a server type."""

    name: str
    allocations: tuple[Allocation, ...]


def name_error(name: str) -> str | None:
    if not 3 <= len(name) <= 63:
        return "Enter 3 to 63 characters."
    if not NAME_CHARS_RE.fullmatch(name):
        return "Use only lowercase letters, digits, '-' and '.'."
    if not NAME_RE.fullmatch(name):
        return "The name must start and end with a lowercase letter or digit."
    return None


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
    if not path:
        return None
    if not path.startswith("/"):
        return "Enter an absolute path, e.g. /mnt/data."
    if not path.strip("/"):
        return "The volume cannot be mounted at the root directory."
    # normpath keeps a leading '//' (POSIX allows it to mean something else), so refuse it here
    if (
        len(path) > 255 or "\x00" in path or path.startswith("//")
        or posixpath.normpath(path) != path.rstrip("/")
    ):
        return "Enter a normalised absolute path without '..', e.g. /mnt/data."
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


def tags_error(tags: list[Mapping[str, str]]) -> str | None:
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


def resource_errors(data: Mapping, info: ServerTypeInfo | None) -> dict[str, str]:
    errors: dict[str, str] = {}
    if info is None:
        errors["server_type"] = SERVER_TYPE_MESSAGE
        return errors
    allocation = allocation_for(info, data.get("gpus_per_node") or 0)
    if allocation is None:
        offered = ", ".join(str(a.gpus) for a in info.allocations)
        errors["gpus_per_node"] = f"Server type {info.name} offers {offered} GPUs per node."
        return errors
    if data.get("memory_gb") != allocation.memory_gb:
        errors["memory_gb"] = (
            f"{allocation.gpus} GPU(s) on {info.name} come with {allocation.memory_gb} GB of memory."
        )
    shm = data.get("shm_size_gb")
    if shm is None or not 1 <= shm <= allocation.memory_gb // 2:
        errors["shm_size_gb"] = f"Shared memory must be 1 to {allocation.memory_gb // 2} GB for this allocation."
    return errors


def validate_job(data: Mapping, server_types: Mapping[str, ServerTypeInfo], partial: bool = False,
                 framework_versions: Mapping[str, list[str]] | None = None) -> dict[str, str]:
    """All field and cross-field rules of a job. With partial=True only the given keys are checked.
    `framework_versions`: the versions offered now (the enabled training environments)."""
    errors: dict[str, str] = {}

    def check(field: str, message: str | None) -> None:
        if message and (not partial or field in data):
            errors.setdefault(field, message)

    check("learning_type", learning_type_error(data.get("learning_type")))
    check("name", name_error(data.get("name", "")))
    check("framework", framework_error(data.get("framework")))
    if data.get("learning_type") == LearningType.SPOT and data.get("failover_enabled"):
        check("failover_enabled", "Spot Training cannot be used with Job Failover")
    framework = data.get("framework")
    version = data.get("framework_version")
    offered_versions = FRAMEWORK_VERSIONS if framework_versions is None else framework_versions
    if framework in Framework.values and version not in offered_versions.get(framework, []):
        offered = ", ".join(offered_versions.get(framework, []))
        check("framework_version", f"Choose a version of the framework: {offered}." if offered
              else f"No version of {Framework(framework).label} is offered at the moment.")
    nodes = data.get("node_count")
    if nodes is None or not 1 <= nodes <= MAX_NODES:
        check("node_count", f"Enter 1 to {MAX_NODES} nodes (distributed training from 2).")
    if not partial or "server_type" in data:
        for field, message in resource_errors(data, server_types.get(data.get("server_type", ""))).items():
            errors.setdefault(field, message)
    check("image_url", image_error(data.get("image_url", "")))
    for field, message in registry_errors(data.get("registry_username", ""), data.get("registry_password", "")).items():
        check(field, message)
    check("volume_mount_path", mount_path_error(data.get("volume_mount_path", "")))
    check("script_url", script_url_error(data.get("script_url", "")))
    check("command", command_error(data.get("command", "")))
    check("tags", tags_error(data.get("tags", [])))
    return errors
