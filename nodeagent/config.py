"""Command line → one frozen dataclass; everything else in the agent reads only this."""

from __future__ import annotations

import argparse
import os
import re
import socket
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from . import protocol
from .jobusers import DEFAULT_TENANT_GID_BASE, IdentityPool, parse_uid_range

RUNTIMES = ("process", "docker")
_PASS_ENV = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\*?")


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
    # the operator's File Storage: one subdirectory per tenant, mounted at the job's mount path
    file_storage_root: Path | None = None
    identities: IdentityPool = IdentityPool()  # the Unix users placements run as (nodeagent.jobusers)
    # names of the agent's environment the command may see besides the allow-list (nodeagent.environment)
    pass_env: tuple[str, ...] = ()
    # commands run as the agent's own user, without a sandbox (a single-user workstation only)
    no_isolation: bool = False
    cache_max_gb: float | None = None  # projects, inputs and requirements overlays on this node (nodeagent.cachecap)

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
    # no --token: a command line is readable by every user of the machine (/proc/PID/cmdline)
    parser.add_argument("--token", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--token-file", type=Path, default=None,
                        help="a file holding the node token, readable only by the agent's user (default: $NODEAGENT_TOKEN)")
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
    parser.add_argument("--file-storage-root", type=Path, default=None,
                        help="the File Storage share on this node: one subdirectory per tenant, mounted at a job's "
                        "File Storage mount path (default: none; jobs that name a mount path are refused here)")
    parser.add_argument("--job-uids", type=_uid_range, default=None,
                        help="START-END: the Unix users placements run as, one per placement (default 1900000000-1900065535)")
    parser.add_argument("--tenant-gid-base", type=int, default=DEFAULT_TENANT_GID_BASE,
                        help=f"a tenant's group is this plus its console user id (default {DEFAULT_TENANT_GID_BASE})")
    parser.add_argument("--pass-env", action="append", default=[], metavar="NAME",
                        help="also give commands this variable of the agent's environment (repeatable; NAME or PREFIX*); "
                        "by default they get only PATH, LANG, LC_*, TZ and TERM of it")
    parser.add_argument("--cache-max-gb", type=_positive_float, default=None,
                        help="the most the node's caches of projects, inputs and requirements overlays may hold, in GB "
                        "(10^9 bytes); least recently used first, never what a job uses (default: unbounded)")
    parser.add_argument("--no-isolation", action="store_true",
                        help="run commands as the agent's own user, with no sandbox (process runtime; for a single-user "
                        "workstation only: every job can then read the agent's files and every other job's)")
    return parser


def _uid_range(value: str) -> range:
    try:
        return parse_uid_range(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def default_env_cache() -> Path:
    return Path.home() / ".simpleai-agent" / "environments"


def parse_config(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> AgentConfig:
    """Parse the command line; exits with code 2 and a usage message on bad input (argparse)."""
    environ = os.environ if environ is None else environ
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.token is not None:
        parser.error("--token is not accepted: a command line is readable by every user of this machine "
                     "(/proc/PID/cmdline). Put the token in NODEAGENT_TOKEN or in a file only the agent's user can read "
                     "(--token-file PATH)")
    if args.token_file is not None:
        try:
            token = read_token_file(args.token_file)
        except TokenFileError as exc:
            parser.error(str(exc))
    else:
        token = environ.get("NODEAGENT_TOKEN", "").strip()
    if not token:
        parser.error("no node token: set NODEAGENT_TOKEN or pass --token-file PATH "
                     "(mint one with `python manage.py nodetoken NAME`)")
    bad_names = [name for name in args.pass_env if not _PASS_ENV.fullmatch(name)]
    if bad_names:
        parser.error(f"--pass-env takes a variable name or a prefix ending in *, not {', '.join(map(repr, bad_names))}")
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
        file_storage_root=args.file_storage_root.expanduser().resolve() if args.file_storage_root else None,
        identities=IdentityPool(uids=args.job_uids or IdentityPool().uids, tenant_gid_base=args.tenant_gid_base),
        pass_env=tuple(dict.fromkeys(args.pass_env)), no_isolation=args.no_isolation, cache_max_gb=args.cache_max_gb,
    )


class TokenFileError(Exception):
    """The token file cannot be used; the message says why and what to do."""


def read_token_file(path: Path) -> str:
    """The token in `path`; refused when the file is readable by its group or by others (then
    every job of the node could read it) or belongs to another user than the agent's."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise TokenFileError(f"cannot read the token file {path}: {exc.strerror}") from exc
    with os.fdopen(descriptor) as handle:
        found = os.fstat(handle.fileno())
        if found.st_mode & 0o077:
            raise TokenFileError(
                f"the token file {path} may be read by others (mode {stat.filemode(found.st_mode)}): "
                f"make it readable only by the agent's user (chmod 600 {path})")
        if found.st_uid != os.geteuid():
            raise TokenFileError(f"the token file {path} belongs to another user (uid {found.st_uid}) than the agent's")
        return handle.read().strip()
