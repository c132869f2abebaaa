"""Invalid inputs shared by the form and API tests: both must answer with the same message."""

from __future__ import annotations

from typing import NamedTuple

import pytest

from console.lib.validation import INTEGER_MESSAGE
from jobs.tests.factories import OMIT
from jobs.validation import FRAMEWORK_MESSAGE, LEARNING_TYPE_MESSAGE, SERVER_TYPE_MESSAGE

STORAGE = {"use_storage": "on"}


def tag_rows(n: int) -> list[dict[str, str]]:
    return [{"key": f"key-{i}", "value": f"value-{i}"} for i in range(n)]


def tag_post(rows: list[dict[str, str]]) -> dict[str, list[str]]:
    """Tag rows as the creation page posts them."""
    return {"tag_key": [r["key"] for r in rows], "tag_value": [r["value"] for r in rows]}


class Case(NamedTuple):
    field: str
    form: dict  # overrides of factories.form_post
    api: dict  # overrides of factories.api_payload
    message: str


CASES = {
    "name-blank": Case("name", {"name": ""}, {"name": ""}, "Enter 3 to 63 characters."),
    "name-short": Case("name", {"name": "ab"}, {"name": "ab"}, "Enter 3 to 63 characters."),
    "name-long": Case("name", {"name": "a" * 64}, {"name": "a" * 64}, "Enter 3 to 63 characters."),
    "name-chars": Case("name", {"name": "Llama_2"}, {"name": "Llama_2"}, "Use only lowercase letters, digits, '-' and '.'."),
    "name-edges": Case("name", {"name": "-llama"}, {"name": "-llama"}, "The name must start and end with a lowercase letter or digit."),
    "learning-type-blank": Case("learning_type", {"learning_type": ""}, {"learning_type": ""}, LEARNING_TYPE_MESSAGE),
    "learning-type-unknown": Case("learning_type", {"learning_type": "reserved"}, {"learning_type": "reserved"}, LEARNING_TYPE_MESSAGE),
    "framework-unknown": Case("framework", {"framework": "tensorflow"}, {"framework": "tensorflow"}, FRAMEWORK_MESSAGE),
    "framework-version": Case(
        "framework_version", {"framework_version": "0.18.9"}, {"framework_version": "0.18.9"},
        "Choose a version of the framework: 2.13.0.",
    ),
    "spot-with-failover": Case(
        "failover_enabled", {"learning_type": "spot", "failover_enabled": "on"},
        {"learning_type": "spot", "failover_enabled": True}, "Spot Training cannot be used with Job Failover",
    ),
    "server-type-unknown": Case("server_type", {"server_type": "g9"}, {"server_type": "g9"}, SERVER_TYPE_MESSAGE),
    "server-type-blank": Case("server_type", {"server_type": ""}, {"server_type": ""}, SERVER_TYPE_MESSAGE),
    "gpus-not-offered": Case(
        "gpus_per_node", {"gpus_per_node": "3"}, {"gpus_per_node": 3, "memory_gb": OMIT},
        "Server type g2 offers 1, 2, 4, 8 GPUs per node.",
    ),
    "gpus-not-a-number": Case("gpus_per_node", {"gpus_per_node": "many"}, {"gpus_per_node": "many"}, INTEGER_MESSAGE),
    "nodes-zero": Case("node_count", {"node_count": "0"}, {"node_count": 0}, "Enter 1 to 64 nodes (distributed training from 2)."),
    "nodes-too-many": Case("node_count", {"node_count": "65"}, {"node_count": 65}, "Enter 1 to 64 nodes (distributed training from 2)."),
    "nodes-blank": Case("node_count", {"node_count": ""}, {"node_count": None}, "Enter 1 to 64 nodes (distributed training from 2)."),
    "nodes-not-a-number": Case("node_count", {"node_count": "two"}, {"node_count": "two"}, INTEGER_MESSAGE),
    "shm-zero": Case("shm_size_gb", {"shm_size_gb": "0"}, {"shm_size_gb": 0}, "Shared memory must be 1 to 128 GB for this allocation."),
    "shm-too-big": Case("shm_size_gb", {"shm_size_gb": "129"}, {"shm_size_gb": 129}, "Shared memory must be 1 to 128 GB for this allocation."),
    "input-name": Case(
        "inputs", {"inputs": "1data=s3://any-bucket/data/"}, {"inputs": [{"name": "1data", "url": "s3://any-bucket/data/"}]},
        "Input name '1data': start with a letter, then letters, digits or '_', at most 32 (it becomes $SIMPLEAI_INPUT_<NAME>).",
    ),
    "input-twice": Case(
        "inputs", {"inputs": "data=s3://b/x\nDATA=s3://b/y"},
        {"inputs": [{"name": "data", "url": "s3://b/x"}, {"name": "DATA", "url": "s3://b/y"}]},
        "Input names must be unique (whatever their case): 'DATA' appears twice.",
    ),
    "from-checkpoint-not-a-number": Case("from_checkpoint", {"from_checkpoint": "last"}, {"from_checkpoint": "last"}, INTEGER_MESSAGE),
    "from-checkpoint-unknown": Case(
        "from_checkpoint", {"from_checkpoint": "987654321"}, {"from_checkpoint": 987654321}, "Job 987654321 is not one of your jobs.",
    ),
    "image-malformed": Case(
        "image_url", {"image_url": "https://registry.example.com/trainer"}, {"image_url": "https://registry.example.com/trainer"},
        "Enter a valid image reference, e.g. registry.example.com:5000/team/trainer:1.0.",
    ),
    "registry-password-missing": Case(
        "registry_password", {"registry_username": "robot"}, {"registry_username": "robot"},
        "Enter the registry password for this user ID.",
    ),
    "registry-user-missing": Case(
        "registry_username", {"registry_password": "s3cret"}, {"registry_password": "s3cret"},
        "Enter the registry user ID that goes with this password.",
    ),
    "registry-user-long": Case(
        "registry_username", {"registry_username": "u" * 129, "registry_password": "p"},
        {"registry_username": "u" * 129, "registry_password": "p"}, "Enter a user ID of at most 128 characters.",
    ),
    "mount-relative": Case(
        "volume_mount_path", {**STORAGE, "volume_mount_path": "mnt/data"}, {"volume_mount_path": "mnt/data"},
        "Enter an absolute path for the File Storage mount path, e.g. /mnt/data (not 'mnt/data').",
    ),
    "mount-root": Case(
        "volume_mount_path", {**STORAGE, "volume_mount_path": "/"}, {"volume_mount_path": "/"},
        "File Storage cannot be mounted at the root directory; use a path such as /mnt/data.",
    ),
    "mount-system": Case(
        "volume_mount_path", {**STORAGE, "volume_mount_path": "/run/docker.sock"}, {"volume_mount_path": "/run/docker.sock"},
        "/run/docker.sock is a system directory of the job's own file system (/run); mount File Storage elsewhere, e.g. /mnt/data.",
    ),
    "script-not-s3": Case(
        "script_url", {**STORAGE, "volume_mount_path": "/mnt/data", "script_url": "https://bucket/train.py"},
        {"script_url": "https://bucket/train.py"}, "Enter an object storage URL of the form s3://bucket/path/to/script.py.",
    ),
    "script-long": Case(
        "script_url", {**STORAGE, "volume_mount_path": "/mnt/data", "script_url": "s3://bucket/" + "k" * 1013},
        {"script_url": "s3://bucket/" + "k" * 1013}, "Enter a URL of at most 1,024 characters.",
    ),
    "command-short": Case("command", {"command": "ls"}, {"command": "ls"}, "Enter a command of 3 to 1,024 characters."),
    "command-blank": Case("command", {"command": ""}, {"command": ""}, "Enter a command of 3 to 1,024 characters."),
    "command-long": Case("command", {"command": "x" * 2001}, {"command": "x" * 2001}, "Enter a command of 3 to 1,024 characters."),
    "tags-too-many": Case("tags", tag_post(tag_rows(51)), {"tags": tag_rows(51)}, "Add at most 50 tags."),
    "tags-duplicate": Case(
        "tags", tag_post([{"key": "team", "value": "a"}, {"key": "team", "value": "b"}]),
        {"tags": [{"key": "team", "value": "a"}, {"key": "team", "value": "b"}]},
        "Tag keys must be unique: 'team' appears twice.",
    ),
    "tag-key-long": Case(
        "tags", tag_post([{"key": "k" * 129, "value": "v"}]), {"tags": [{"key": "k" * 129, "value": "v"}]},
        "A tag key must be 1 to 128 characters.",
    ),
    "tag-key-missing": Case(
        "tags", tag_post([{"key": "", "value": "orphan"}]), {"tags": [{"key": "", "value": "orphan"}]},
        "A tag key must be 1 to 128 characters.",
    ),
    "tag-value-long": Case(
        "tags", tag_post([{"key": "team", "value": "v" * 257}]), {"tags": [{"key": "team", "value": "v" * 257}]},
        "A tag value must be at most 256 characters (tag 'team').",
    ),
}

CASE_PARAMS = [pytest.param(case, id=name) for name, case in CASES.items()]
