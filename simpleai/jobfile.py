"""The job file: YAML whose keys are the REST API's field names; flags override it.

    name: bert-finetune
    server_type: g2
    gpus_per_node: 8
    node_count: 2
    image_url: registry.example.com/team/trainer:1.0
    command: torchrun train.py --epochs 3
    tags: {team: nlp}            # or the API's form: [{key: team, value: nlp}]
    workdir: .                   # the project to pack and upload (the command runs in it)
    inputs: {data: ./data, tokenizer: s3://simpleai-u7/tok/}   # or [{name: data, url: s3://…}]
    from_checkpoint: bert-pretrain   # a job of yours (id or name) to start from its last checkpoint

Values go to the console as they are: it validates them (the form's rules and words), so this
module checks only what makes a file unreadable: not YAML, not a mapping, an unknown key. The
paths of `workdir` and `inputs` are relative to the file's directory.
"""

from __future__ import annotations

import secrets
import shlex
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from .api_types import Job, JobFields, Tag
from .errors import UsageError

# The writable fields of POST /api/v1/training-jobs/, in the API's order (jobs/tests/
# test_cli_contract.py fails when the serializer's differ).
FIELDS = (
    "name", "learning_type", "framework", "framework_version", "failover_enabled",
    "server_type", "gpus_per_node", "memory_gb", "node_count", "shm_size_gb",
    "image_url", "registry_username", "registry_password", "volume_mount_path", "script_url",
    "command", "tags", "workspace", "keep_alive_minutes", "spot_fallback_after_minutes", "time_limit_minutes",
)
# the API's fields of a project, its data and a checkpoint to start from (issue 33, phase 2;
# jobs/tests/test_cli_contract.py checks they are writable fields of the API too)
PROJECT_FIELDS = ("workdir_url", "inputs", "from_checkpoint")
# a directory of the laptop, packed and uploaded to become workdir_url
LOCAL_KEYS = ("workdir",)
# what an export leaves out: a new name comes with each run; the API never shows the password
NOT_EXPORTED = {"name", "registry_password"}


def keys() -> tuple[str, ...]:
    """What a job file may say: the API's writable fields, the project's fields, and `workdir`."""
    return (*FIELDS, *(key for key in PROJECT_FIELDS if key not in FIELDS), *LOCAL_KEYS)


def load(path: Path) -> JobFields:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise UsageError(f"cannot read the job file {path}: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise UsageError(f"{path} is not valid YAML: {error}") from None
    return check(data or {}, str(path), path.resolve().parent)


def check(data: object, where: str, base: Path | None = None) -> JobFields:
    """The file's fields; `workdir` and local `inputs` as absolute paths (relative to `base`)."""
    if not isinstance(data, dict):
        raise UsageError(f"{where} must be a mapping of the API's field names (name: …, command: …)")
    unknown = [str(key) for key in data if key not in keys()]
    if unknown:
        raise UsageError(f"{where}: unknown key(s) {', '.join(unknown)}; the keys are the API's fields: {', '.join(keys())}")
    fields: JobFields = dict(data)
    if "tags" in fields:
        fields["tags"] = tags_of(fields["tags"], where)
    if isinstance(fields.get("command"), list):
        fields["command"] = command_from_argv([str(part) for part in fields["command"]])
    if fields.get("workdir") is not None:
        if fields.get("workdir_url"):
            raise UsageError(f"{where}: give workdir (a directory to upload) or workdir_url (one uploaded), not both")
        fields["workdir"] = local_path(str(fields["workdir"]), base)
    else:
        fields.pop("workdir", None)
    if "inputs" in fields:
        fields["inputs"] = {name: value if is_s3(value) else local_path(value, base)
                            for name, value in inputs_of(fields["inputs"], where).items()}
    return fields


def is_s3(value: str) -> bool:
    return value.startswith("s3://")


def local_path(value: str, base: Path | None) -> str:
    """A path of the laptop as an absolute path: relative ones from `base` (the job file's
    directory; the current directory for flags)."""
    path = Path(value).expanduser()
    return str(path if path.is_absolute() else (base or Path.cwd()) / path)


def inputs_of(value: object, where: str) -> dict[str, str]:
    """Inputs as a mapping ({data: ./data}) or as the API's list of {name, url}, by name in order."""
    if value is None:
        return {}
    if isinstance(value, Mapping) and all(isinstance(item, str) and item for item in value.values()):
        return {str(name): str(item) for name, item in value.items()}
    if isinstance(value, list) and all(isinstance(item, Mapping) and item.get("name") and item.get("url") for item in value):
        return {str(item["name"]): str(item["url"]) for item in value}
    raise UsageError(f"{where}: inputs must be a mapping (data: ./data or data: s3://bucket/prefix/) "
                     "or a list of {name: …, url: …}")


def parse_inputs(items: Iterable[str]) -> dict[str, str]:
    """`--input NAME=PATH|s3://…` arguments (paths relative to the current directory)."""
    inputs: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise UsageError(f"an input is NAME=PATH or NAME=s3://bucket/prefix, not {item!r}")
        inputs[name] = value if is_s3(value) else local_path(value, None)
    return inputs


def tags_of(value: object, where: str) -> list[Tag]:
    """Tags as a mapping ({team: nlp}) or as the API's list of {key, value}."""
    if value is None:
        return []
    if isinstance(value, Mapping):
        return [{"key": str(key), "value": "" if item is None else str(item)} for key, item in value.items()]
    if isinstance(value, list) and all(isinstance(item, Mapping) and "key" in item for item in value):
        return [{"key": str(item["key"]), "value": str(item.get("value") or "")} for item in value]
    raise UsageError(f"{where}: tags must be a mapping (team: nlp) or a list of {{key: …, value: …}}")


def parse_tags(items: Iterable[str]) -> list[Tag]:
    """`--tag K=V` arguments (`K=` sets an empty value)."""
    tags: list[Tag] = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"a tag is KEY=VALUE, not {item!r}")
        tags.append({"key": key, "value": value})
    return tags


def merge_tags(base: Sequence[Tag], changes: Sequence[Tag]) -> list[Tag]:
    """`base` with each key of `changes` set (added, or its value replaced), in their order."""
    merged = {tag["key"]: tag["value"] for tag in base}
    merged.update((tag["key"], tag["value"]) for tag in changes)
    return [{"key": key, "value": value} for key, value in merged.items()]


def merge(file: JobFields, flags: JobFields) -> JobFields:
    """The file's fields with the flags' over them; tags merge by key, inputs by name; a
    --workdir replaces the file's workdir_url as well as its workdir (and the other way round)."""
    fields = {**file, **{name: value for name, value in flags.items() if name not in {"tags", "inputs"}}}
    if flags.get("tags"):
        fields["tags"] = merge_tags(file.get("tags", []), flags["tags"])
    if flags.get("inputs"):
        fields["inputs"] = {**file.get("inputs", {}), **flags["inputs"]}
    if "workdir" in flags:
        fields.pop("workdir_url", None)
    return fields


def command_from_argv(argv: Sequence[str]) -> str:
    """What follows `--`: one argument is a shell command as it is (`-- 'make && ./train'`);
    several are quoted so each stays one word (`-- python train.py --name "my run"`)."""
    return argv[0] if len(argv) == 1 else shlex.join(argv)


def new_name(now: datetime) -> str:
    """A name for a job given none: unique enough for two runs in one second."""
    return f"job-{now:%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def exported(job: Job) -> JobFields:
    """The job file that creates this job again (a fresh name each run)."""
    data: dict[str, Any] = dict(job)
    fields = {name: data[name] for name in FIELDS if name in data and name not in NOT_EXPORTED}
    for optional in ("registry_username", "volume_mount_path", "script_url", "workspace"):
        if fields.get(optional) == "":
            del fields[optional]
    if not fields.get("tags"):
        fields.pop("tags", None)
    # the project as uploaded (content-addressed: the same files), the data by URL, the checkpoint's job
    for name in PROJECT_FIELDS:
        if data.get(name) in (None, "", []):
            fields.pop(name, None)
        else:
            fields[name] = data[name]
    if fields.get("inputs"):
        fields["inputs"] = {item["name"]: item["url"] for item in fields["inputs"]}
    return fields


def export_text(job: Job) -> str:
    header = [f"# Training Job {job['id']} ({job['name']}), exported by `simpleai export`.",
              "# `simpleai run FILE` creates it again under a new name (or --name NAME)."]
    if job.get("has_registry_password"):
        header.append("# The job pulls its image with a registry password the API never shows: add registry_password.")
    body = str(yaml.safe_dump(exported(job), sort_keys=False, allow_unicode=True, default_flow_style=False))
    return "\n".join(header) + "\n" + body
