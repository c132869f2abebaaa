"""Make a worker node's torchrun reach the exit barrier last, after the master has left.

Put this directory on PYTHONPATH: on every node but the master, torchrun arrives at the exit
barrier and then, before waiting on it, waits until the master's torchrun has closed its
rendezvous store (the c10d TCPStore at MASTER_ADDR:MASTER_PORT stops accepting connections).
That is the real teardown race a loaded machine hits by chance; here it happens every time,
through torch's own code, however slowly the master exits (a fixed pause lost the race on a
busy machine: the master was still up when the worker waited).
"""

import os
import socket
import time

STORE_GONE_TIMEOUT = 60.0  # seconds; the master leaves within a second of everyone arriving


def _store_is_up(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=1):
            return True
    except OSError:
        return False


def _wait_for_the_master_to_leave() -> None:
    address, port = os.environ.get("MASTER_ADDR", ""), int(os.environ.get("MASTER_PORT", "0") or 0)
    deadline = time.monotonic() + STORE_GONE_TIMEOUT
    while address and port and time.monotonic() < deadline and _store_is_up(address, port):
        time.sleep(0.1)


if os.environ.get("PET_NODE_RANK", "0") != "0":
    try:
        from torch.distributed.elastic.utils import store as _store_util
    except ImportError:  # not a torch process
        _store_util = None
    if _store_util is not None:
        _arrive = _store_util._barrier_nonblocking

        def _arrive_then_stall(*args, **kwargs):
            key = _arrive(*args, **kwargs)
            _wait_for_the_master_to_leave()
            return key

        _store_util._barrier_nonblocking = _arrive_then_stall
