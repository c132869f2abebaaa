"""A rendezvous without torch: every rank meets rank 0 at MASTER_ADDR:MASTER_PORT over TCP.

What torch.distributed's TCP store does first, in plain Python (the test image has no torch):
rank 0 listens on the port, each other rank connects (retrying until rank 0 is up), says
hello, and waits for rank 0's answer once every rank has arrived.
"""

import os
import socket
import time
from pathlib import Path

rank, nnodes = int(os.environ["NODE_RANK"]), int(os.environ["NNODES"])
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
deadline = time.monotonic() + 60

if rank == 0:
    server = socket.create_server(("", port), reuse_port=True)
    server.settimeout(60)
    print(f"rank 0 listening on {addr}:{port} for {nnodes - 1} peer(s)", flush=True)
    peers = []
    for _ in range(nnodes - 1):
        conn, _ = server.accept()
        hello = conn.makefile().readline().strip()
        print(f"rank 0 got: {hello}", flush=True)
        peers.append(conn)
    for conn in peers:
        conn.sendall(f"welcome, all {nnodes} ranks are here\n".encode())
        conn.close()
    print(f"rank 0: rendezvous complete with {nnodes} ranks", flush=True)
else:
    while True:
        try:
            conn = socket.create_connection((addr, port), timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    conn.sendall(f"hello from rank {rank}\n".encode())
    reply = conn.makefile().readline().strip()
    print(f"rank {rank} got: {reply}", flush=True)

Path(os.environ["OUTPUT_DIR"], f"rank-{rank}.txt").write_text("met\n")
