"""The command line: `simpleai COMMAND …` (argparse; usage errors exit with status 2)."""

from __future__ import annotations

import argparse

from simpleai import __version__

DESCRIPTION = """Run and watch Training Jobs on a Simple AI Training console from your shell.

Configure with `simpleai login URL` (stores the console and your API token, from the
console's /account/token/ page), or SIMPLEAI_URL and SIMPLEAI_TOKEN (they win over the file).
A JOB is a job's id or its name. Exit status: 0 success, 1 a job that did not complete or a
refusal from the console, 2 a wrong command line or job file."""

RUN_EPILOG = """Everything after `--` is the command, as written: one argument is run by the shell as it
is (-- 'make data && python train.py'); several are quoted so each stays one word
(-- python train.py --run-name "first try"). Flags override the job file's fields. Left out:
a new name, 1 GPU, the smallest server type with that many GPUs per node, 1 node, the default
framework and its newest version, no image (the environment's: nodes of the Docker runtime need --image).

  simpleai run --workdir . --input data=./data --follow -- python train.py

A project over SIMPLEAI_MAX_WORKDIR_MB (default 1024) is refused with its biggest files named."""


def _job(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", metavar="JOB", help="the job's id or name")


def _json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON (for scripts)")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not 1 or more")
    return value


def _add_run(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = commands.add_parser("run", help="create a Training Job (from a job file and flags)", epilog=RUN_EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter,
                              usage="simpleai run [JOB.yaml] [options] [--follow] [-- COMMAND ...]")
    run.add_argument("job_file", nargs="?", metavar="JOB.yaml", help="a job file: YAML with the API's field names")
    run.add_argument("--name", help="the job's name (3-63 lowercase letters, digits, '-' and '.')")
    run.add_argument("--server-type", metavar="TYPE", help="a server type of the catalogue (simpleai server-types)")
    run.add_argument("--gpus", type=int, metavar="N", help="GPUs per node")
    run.add_argument("--nodes", type=int, metavar="N", help="number of nodes (distributed training from 2)")
    run.add_argument("--framework", metavar="F[:VERSION]", help="pytorch or deepspeed, and a version it offers")
    run.add_argument("--image", metavar="URL", help="the AI Training Image URL")
    run.add_argument("--spot", action=argparse.BooleanOptionalAction, default=None,
                     help="Spot Training (cheaper; interrupted when the capacity is needed)")
    run.add_argument("--spot-fallback-after", type=int, metavar="MINUTES", dest="spot_fallback_after",
                     help="with --spot: interrupted and not resumed within MINUTES, resume on on-demand capacity "
                          "(billed at the on-demand price from then on)")
    run.add_argument("--time-limit", type=int, metavar="MINUTES", dest="time_limit",
                     help="a time limit (jobs on a Slurm cluster only: at most the cluster's maximum; default the cluster's)")
    run.add_argument("--failover", action=argparse.BooleanOptionalAction, default=None,
                     help="Job Failover: move to healthy nodes after a hardware fault")
    run.add_argument("--tag", action="append", default=[], metavar="K=V", help="a tag (repeat for more)")
    run.add_argument("--workdir", metavar="DIR",
                     help="your project: packed (minus .git/ and what .gitignore and .simpleaiignore leave out), "
                          "uploaded to your storage unless it is there already; the command runs in it")
    run.add_argument("--input", action="append", default=[], metavar="NAME=PATH|s3://…",
                     help="data at $SIMPLEAI_INPUT_<NAME> on each node: a local file or directory (uploaded "
                          "like the project) or s3://your-bucket/prefix (repeat for more)")
    run.add_argument("--from-checkpoint", metavar="JOB",
                     help="start from the last checkpoint of this job of yours (its id or name)")
    run.add_argument("--follow", "-f", action="store_true",
                     help="stream the logs until the job ends; exit 0 when it completed, 1 otherwise")
    run.add_argument("--dry-run", action="store_true",
                     help="check the job with the console and print it with its defaults, without creating it")


def _add_job_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    ls = commands.add_parser("ls", help="list your jobs, newest first")
    ls.add_argument("--status", help="only jobs in this status (Running, Completed, …)")
    ls.add_argument("--search", metavar="TEXT", help="only jobs whose name or a tag contains TEXT")
    ls.add_argument("--limit", type=_positive, default=50, metavar="N", help="at most N jobs (default 50)")
    _json(ls)
    status = commands.add_parser("status", help="a job's settings, status, cost and history")
    _job(status)
    _json(status)
    logs = commands.add_parser("logs", help="a job's log lines")
    _job(logs)
    logs.add_argument("-f", "--follow", action="store_true",
                      help="keep printing new lines until the job ends (exit 0 when it completed, 1 otherwise)")
    logs.add_argument("--role", metavar="ROLE", help="one node's lines: master, worker-1, …")
    _json(logs)
    for name, text in (("cancel", "stop a job that waits or runs"), ("rm", "delete a job (stopping it first)"),
                       ("export", "print a job file that creates this job again")):
        _job(commands.add_parser(name, help=text))
    tag = commands.add_parser("tag", help="set (K=V) or remove (--remove K) a job's tags")
    _job(tag)
    tag.add_argument("tags", nargs="*", metavar="K=V")
    tag.add_argument("--remove", action="append", default=[], metavar="KEY", help="remove this tag (repeat for more)")
    download = commands.add_parser("download", help="download a job's results (what it wrote to $OUTPUT_DIR)")
    _job(download)
    download.add_argument("--to", metavar="DIR", help="where to put them (default: ./JOB-NAME)")
    metrics = commands.add_parser("metrics", help="a summary of a job's metrics (loss, GPU use, …)")
    _job(metrics)
    _json(metrics)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="simpleai", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"simpleai {__version__}")
    commands = parser.add_subparsers(dest="cmd", metavar="COMMAND", required=True)
    login = commands.add_parser("login", help="store the console's URL and your API token")
    login.add_argument("url", metavar="URL", help="the console, e.g. https://console.example.com")
    login.add_argument("--token-stdin", action="store_true", help="read the token from standard input")
    _add_run(commands)
    _add_job_commands(commands)
    types = commands.add_parser("server-types", help="the server types a job can run on")
    _json(types)
    return parser
