"""What a Training Job asks Slurm for: plain functions over plain data (no Django, no network).

`resources()` turns the job's allocation (nodes, GPUs, vCPUs and memory per node, from its server
type) and the operator's rules for the cluster (partitions, GPU GRES type, constraints, QoS,
account, time limits, fixed sbatch options) into version-neutral job properties; an API adapter
(jobs.slurm.adapters) writes them in its version's JSON. `sbatch_line()` says the same request as
the sbatch command line an operator knows, for the admin to show before it is sent.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MB_PER_GB = 1024


@dataclass(frozen=True)
class Ask:
    """The job's side: its allocation on its server type."""

    node_count: int
    gpus_per_node: int
    vcpus_per_node: int  # the allocation's share of the server type's vCPUs
    memory_gb_per_node: int  # the allocation's memory
    node_gpus: int  # GPUs of a whole node of the server type
    spot: bool
    failover: bool
    time_limit_minutes: int | None = None  # None: the cluster's default
    account: str = ""  # the Slurm account of the job's owner (jobs.slurm.accounts); "" for the cluster's


@dataclass(frozen=True)
class Rules:
    """The operator's side: how this cluster runs a server type's jobs."""

    on_demand_partition: str
    spot_partition: str
    gpu_type: str = ""  # GRES type the cluster declares (gres.conf Type=), e.g. "h100"; "" for untyped
    constraint: str = ""  # node features, e.g. "ib&nvlink"
    qos: str = ""
    spot_qos: str = ""  # "" for the same as qos
    account: str = ""  # the cluster's default account
    default_time_minutes: int = 24 * 60
    max_time_minutes: int = 7 * 24 * 60
    extra_options: str = ""  # fixed sbatch options, e.g. "--reservation=train --mail-type=END"


# The sbatch options an operator may fix per cluster, as slurmrestd 22.05 names them; each was
# checked against a real slurmrestd (a name it does not know refuses the whole submission).
OPTIONS: dict[str, str] = {
    "--account": "account", "-A": "account",
    "--qos": "qos", "-q": "qos",
    "--constraint": "constraints", "-C": "constraints",
    "--reservation": "reservation",
    "--licenses": "licenses", "-L": "licenses",
    "--nice": "nice",
    "--wckey": "wckey",
    "--mail-type": "mail_type",
    "--mail-user": "mail_user",
    "--distribution": "distribution", "-m": "distribution",
    "--gres-flags": "gres_flags",
    "--time-min": "time_minimum",
}
FLAGS: dict[str, tuple[str, Any]] = {"--exclusive": ("exclusive", True)}
INTEGER_OPTIONS = frozenset({"nice", "time_minimum"})
# what the console sets itself: an operator's option must not change the job's shape or identity
OWN = ("--nodes", "-N", "--gres", "--gpus", "--mem", "--cpus-per-task", "-c", "--partition", "-p", "--time", "-t",
       "--requeue", "--no-requeue", "--job-name", "-J", "--output", "-o", "--chdir", "-D", "--export", "--ntasks")


def parse_options(text: str) -> dict[str, Any]:
    """Fixed sbatch options as job properties. Raises ValueError naming what it cannot take."""
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise ValueError(f"not a command line: {exc}") from exc
    properties: dict[str, Any] = {}
    index = 0
    while index < len(words):
        word = words[index]
        name, has_value, value = word.partition("=")
        if name in FLAGS and not has_value:
            key, flag = FLAGS[name]
            properties[key] = flag
            index += 1
            continue
        if name in OWN:
            raise ValueError(f"{name} is set by the console from the job itself")
        if name not in OPTIONS:
            known = ", ".join(sorted({o for o in [*OPTIONS, *FLAGS] if o.startswith("--")}))
            raise ValueError(f"{name!r} is not an option the console can pass to Slurm (it can: {known})")
        if not has_value:
            if index + 1 >= len(words):
                raise ValueError(f"{name} needs a value")
            index += 1
            value = words[index]
        key = OPTIONS[name]
        if key in INTEGER_OPTIONS:
            if not value.lstrip("-").isdigit():
                raise ValueError(f"{name} takes a whole number, not {value!r}")
            properties[key] = int(value)
        else:
            properties[key] = value
        index += 1
    return properties


def time_limit(requested: int | None, rules: Rules) -> int:
    """Minutes: the job's own limit, or the cluster's default; over the maximum is an error."""
    minutes = rules.default_time_minutes if requested is None else requested
    if minutes < 1:
        raise ValueError("A time limit is at least 1 minute.")
    if minutes > rules.max_time_minutes:
        raise ValueError(f"The time limit of {duration(minutes)} is longer than this cluster allows "
                         f"({duration(rules.max_time_minutes)}).")
    return minutes


def duration(minutes: int) -> str:
    days, rest = divmod(minutes, 24 * 60)
    hours, mins = divmod(rest, 60)
    parts = [f"{days} d" if days else "", f"{hours} h" if hours else "", f"{mins} min" if mins else ""]
    return " ".join(p for p in parts if p) or "0 min"


def resources(ask: Ask, rules: Rules) -> dict[str, Any]:
    """The job's resource request. A whole node is asked for `--exclusive` with all its memory
    (`--mem=0`: what the node really has, which is a little under the catalogue's figure); a share
    of a node asks for the share's memory and vCPUs, so jobs sharing a node stay within theirs."""
    whole_node = ask.gpus_per_node >= ask.node_gpus
    gres = f"gpu:{rules.gpu_type}:{ask.gpus_per_node}" if rules.gpu_type else f"gpu:{ask.gpus_per_node}"
    properties: dict[str, Any] = {
        "nodes": ask.node_count,
        "tasks_per_node": 1,
        "cpus_per_task": ask.vcpus_per_node,  # the one task per node is the node's step launcher
        "memory_per_node": 0 if whole_node else ask.memory_gb_per_node * MB_PER_GB,
        "gres": gres,
        "partition": rules.spot_partition if ask.spot else rules.on_demand_partition,
        "time_limit": time_limit(ask.time_limit_minutes, rules),
        # Slurm may run it again only where the console follows that: spot preemption, failover
        "requeue": ask.spot or ask.failover,
    }
    if whole_node:
        properties["exclusive"] = True
    if rules.constraint:
        properties["constraints"] = rules.constraint
    qos = (rules.spot_qos or rules.qos) if ask.spot else rules.qos
    if qos:
        properties["qos"] = qos
    if ask.account or rules.account:
        properties["account"] = ask.account or rules.account
    # the job's own values and the cluster's mapping win over a fixed option that says otherwise
    return {**parse_options(rules.extra_options), **properties}


_SBATCH: dict[str, str] = {
    "nodes": "--nodes", "tasks_per_node": "--ntasks-per-node", "cpus_per_task": "--cpus-per-task",
    "gres": "--gres", "partition": "--partition", "constraints": "--constraint", "qos": "--qos",
    "account": "--account", "reservation": "--reservation", "licenses": "--licenses", "nice": "--nice",
    "wckey": "--wckey", "mail_type": "--mail-type", "mail_user": "--mail-user", "distribution": "--distribution",
    "gres_flags": "--gres-flags", "time_minimum": "--time-min", "name": "--job-name", "comment": "--comment",
    "current_working_directory": "--chdir", "standard_output": "--output",
}


def sbatch_line(properties: Mapping[str, Any]) -> str:
    """The request as the sbatch command line that asks for the same (environment left out)."""
    words = ["sbatch"]
    for key, value in properties.items():
        if key == "memory_per_node":
            words.append(f"--mem={value}M" if value else "--mem=0")
        elif key == "time_limit":
            words.append(f"--time={value}")
        elif key == "requeue":
            words.append("--requeue" if value else "--no-requeue")
        elif key == "exclusive":
            words.append("--exclusive") if value else None
        elif key in _SBATCH:
            words.append(f"{_SBATCH[key]}={value}")
    return shlex.join(words)
