"""Command line → one frozen dataclass; everything else in the agent reads only this."""

from __future__ import annotations

import argparse
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from . import protocol

RUNTIMES = ("process", "docker")


@dataclass(frozen=True)
class AgentConfig:
    console: str  # http(s)://host:port of the console
    token: str
    name: str
    gpus: str  # "auto" | "nvml" | "simulated:N"
    server_type: str
    work_dir: Path
    address: str
    runtime: str  # "process" | "docker"
    stop_grace: float  # seconds; used when a placement does not say
    metrics_interval: float = 10.0  # seconds between GPU/node metric samples; 0 turns them off
    env_cache: Path | None = None  # training environments (nodeagent.envcache); None: default_env_cache()

    @property
    def ws_url(self) -> str:
        return agent_ws_url(self.console)


def agent_ws_url(console: str) -> str:
    """`http://host:port[/base]` → `ws://host:port[/base]/ws/agent/` (https → wss)."""
    parts = urlsplit(console if "://" in console else f"http://{console}")
    scheme = {"http": "ws", "https": "wss", "ws": "ws", "wss": "wss"}.get(parts.scheme)
    if scheme is None or not parts.netloc:
        raise ValueError(f"--console must look like http://HOST:PORT, not {console!r}")
    path = parts.path.rstrip("/") + protocol.AGENT_PATH
    return urlunsplit((scheme, parts.netloc, path, "", ""))


def _gpus_spec(value: str) -> str:
    if value in ("auto", "nvml"):
        return value
    kind, _, count = value.partition(":")
    if kind == "simulated" and count.isdigit() and int(count) > 0:
        return value
    raise argparse.ArgumentTypeError(f"expected auto, nvml or simulated:N (N ≥ 1), not {value!r}")


def _positive_float(value: str) -> float:
    number = float(value)
    if number < 0:
        raise argparse.ArgumentTypeError("must be ≥ 0")
    return number


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m nodeagent",
        description="Simple AI Training node agent: connects this GPU node to the console and runs what it assigns.",
    )
    parser.add_argument("--console", required=True, help="console URL, e.g. http://console.example:8000")
    parser.add_argument("--token", default=None, help="node token (default: $NODEAGENT_TOKEN)")
    parser.add_argument("--name", default=None, help="node name, as minted with `manage.py nodetoken` (default: hostname)")
    parser.add_argument("--gpus", type=_gpus_spec, default="auto", help="auto (NVML), nvml, or simulated:N")
    parser.add_argument("--server-type", default="g2", help="server type of this node (g2, g3, ...)")
    parser.add_argument("--work-dir", type=Path, default=None, help="state and job directories (default: ~/.simpleai-agent/NAME)")
    parser.add_argument("--address", default="127.0.0.1", help="address other nodes reach this one at (MASTER_ADDR)")
    parser.add_argument("--runtime", choices=RUNTIMES, default="process", help="how the command runs (default: process)")
    parser.add_argument("--stop-grace", type=_positive_float, default=30.0, help="seconds between SIGTERM and SIGKILL")
    parser.add_argument("--metrics-interval", type=_positive_float, default=10.0,
                        help="seconds between GPU and node metric samples (default 10; 0 turns sampling off)")
    parser.add_argument("--env-cache", type=Path, default=None,
                        help="where training environments are built and cached (default: ~/.simpleai-agent/environments, "
                        "shared by the agents of this machine)")
    return parser


def default_env_cache() -> Path:
    return Path.home() / ".simpleai-agent" / "environments"


def parse_config(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> AgentConfig:
    """Parse the command line; exits with code 2 and a usage message on bad input (argparse)."""
    environ = os.environ if environ is None else environ
    parser = build_parser()
    args = parser.parse_args(argv)
    token = (args.token or environ.get("NODEAGENT_TOKEN", "")).strip()
    if not token:
        parser.error("no node token: pass --token or set NODEAGENT_TOKEN (mint one with `python manage.py nodetoken NAME`)")
    try:
        agent_ws_url(args.console)
    except ValueError as exc:
        parser.error(str(exc))
    name = args.name or socket.gethostname()
    work_dir = (args.work_dir or Path.home() / ".simpleai-agent" / name).expanduser().resolve()
    return AgentConfig(
        console=args.console, token=token, name=name, gpus=args.gpus, server_type=args.server_type,
        work_dir=work_dir, address=args.address, runtime=args.runtime, stop_grace=args.stop_grace,
        metrics_interval=args.metrics_interval,
        env_cache=(args.env_cache or default_env_cache()).expanduser().resolve(),
    )
