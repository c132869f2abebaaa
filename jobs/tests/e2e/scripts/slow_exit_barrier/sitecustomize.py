"""Make a worker node's torchrun reach the exit barrier last and slowly, as on a busy machine.

Put this directory on PYTHONPATH: on every node but the master, torchrun pauses between
arriving at the exit barrier and waiting on it, so the master leaves first and closes its
rendezvous store (the c10d TCPStore) meanwhile. That is the real teardown race a loaded
machine hits by chance; here it happens every time, through torch's own code.
"""

import os
import time

if os.environ.get("PET_NODE_RANK", "0") != "0":
    try:
        from torch.distributed.elastic.utils import store as _store_util
    except ImportError:  # not a torch process
        _store_util = None
    if _store_util is not None:
        _arrive = _store_util._barrier_nonblocking

        def _arrive_then_stall(*args, **kwargs):
            key = _arrive(*args, **kwargs)
            time.sleep(2)
            return key

        _store_util._barrier_nonblocking = _arrive_then_stall
