"""The `simpleai` command: argparse over simpleai.client; every failure is one line on stderr.

Exit status: 0 success; 1 a job that did not complete, or the console refused (the API's own
message) or could not be reached; 2 a wrong command line or job file.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from simpleai.errors import SimpleAIError, UsageError

from . import commands
from .context import Context
from .parser import build_parser
from .run import run

Handler = Callable[[argparse.Namespace, Context], int]
HANDLERS: dict[str, Handler] = {
    "login": commands.login, "ls": commands.ls, "status": commands.status, "logs": commands.logs,
    "cancel": commands.cancel, "rm": commands.rm, "tag": commands.tag, "metrics": commands.metrics,
    "export": commands.export, "server-types": commands.server_types, "download": commands.download,
}


def split_command(argv: Sequence[str]) -> tuple[list[str], list[str] | None]:
    """The arguments before the first `--`, and the command after it (None without `--`)."""
    if "--" not in argv:
        return list(argv), None
    at = list(argv).index("--")
    return list(argv[:at]), list(argv[at + 1:])


def main(argv: Sequence[str] | None = None, ctx: Context | None = None) -> int:
    """Run one command; its exit status. `ctx` replaces the process's streams and environment (tests)."""
    ctx = ctx or Context(env=os.environ)
    options, command = split_command(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(options)  # a usage error exits with status 2 here
    try:
        return dispatch(args, ctx, command)
    except UsageError as error:
        ctx.note(f"error: {error}")
        return 2
    except SimpleAIError as error:
        ctx.note(str(error))
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # the reader went away (`simpleai logs 42 | head`): no "Exception ignored" at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as error:
        if ctx.env.get("SIMPLEAI_DEBUG"):
            raise
        ctx.note(f"internal error: {type(error).__name__}: {error} (SIMPLEAI_DEBUG=1 shows where)")
        return 1


def dispatch(args: argparse.Namespace, ctx: Context, command: list[str] | None) -> int:
    if args.cmd == "run":
        return run(args, ctx, command)
    if command is not None:
        raise UsageError(f"only `simpleai run` takes a command after `--`, not `simpleai {args.cmd}`")
    return HANDLERS[args.cmd](args, ctx)
