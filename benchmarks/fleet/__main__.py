"""`python -m benchmarks.fleet`: the options (the package's docstring says what it measures)."""

from __future__ import annotations

import argparse
import asyncio

from benchmarks import fleet

from .run import run


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fleet", description=(fleet.__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=1000, help="jobs created while capacity is free")
    parser.add_argument("--backlog", type=int, default=5000, help="jobs queued on a cordoned fleet, then drained")
    parser.add_argument("--max-drain-seconds", type=float, default=900)
    parser.add_argument("--job-seconds", type=float, default=10)
    parser.add_argument("--connect-rate", type=float, default=50, help="agents connecting per second")
    parser.add_argument("--idle-seconds", type=float, default=60)
    parser.add_argument("--kill", type=int, default=10, help="agents killed during the drain")
    parser.add_argument("--daphnes", type=int, default=1, help="daphne processes (agents are spread over them)")
    parser.add_argument("--fleet-processes", type=int, default=4,
                        help="processes the simulated agents are spread over, each with its own event loop")
    parser.add_argument("--clients", type=int, default=4, help="threads creating jobs through the API")
    parser.add_argument("--console-tree", default="", help="run the console from this checkout instead")
    parser.add_argument("--logs", default="", help="a directory: the console's logs (daphne, worker, beat) are copied there at the end")
    parser.add_argument("--profile", default="", help="a directory: py-spy samples daphne and the worker from the backlog's release on")
    parser.add_argument("--profile-seconds", type=float, default=60)
    parser.add_argument("--profile-rate", type=int, default=50, help="py-spy samples per second")
    parser.add_argument("--diagnose", action="store_true", help="every 10 s: the longest transactions and listening")
    parser.add_argument("--quick", action="store_true",
                        help="a shorter run on the same 1,000 nodes: 200 jobs, a backlog of 1,000, 30 s idle")
    args = parser.parse_args()
    if args.quick:
        args.jobs, args.backlog, args.idle_seconds, args.max_drain_seconds = 200, 1000, 30, 300
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
