"""DDP training on CPU that checkpoints through the concurrent checkpointing library.

Run as `PYTHONPATH=$CHECKPOINT_VENDOR torchrun train_ckpt.py --steps 60 --every 5`. Rank 0
saves every `--every` steps (mirrored to CHECKPOINT_S3_URL when the platform sets it); with
CKPT_LAST_STEP set, every rank resumes from that step. On SIGTERM (spot interruption) the
ranks agree to stop, rank 0 saves the current step and waits until it is durable.
"""

import argparse
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
from concurrent_checkpoint import CheckpointEngine

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--every", type=int, default=5)
parser.add_argument("--sleep", type=float, default=0.2)
args = parser.parse_args()

stop_requested = False


def on_sigterm(*_):
    global stop_requested
    stop_requested = True


signal.signal(signal.SIGTERM, on_sigterm)
dist.init_process_group("gloo")
rank = dist.get_rank()
print(f"Starting dataset initialization (rank {rank}, attempt {os.environ.get('JOB_ATTEMPT')})", flush=True)
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(32, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
# DDP keeps replicas identical: rank 0's copy is the checkpoint (one shard, world size 1)
print("model ready", flush=True)  # the benchmarks' timeline: rendezvous → model → checkpoint engine → first step
engine = CheckpointEngine(os.environ["OUTPUT_DIR"], rank=0, world_size=1, host_cache_size=0.01, keep_last=3)
print("checkpoint engine ready", flush=True)
start = 0
if os.environ.get("CKPT_LAST_STEP") is not None:
    checkpoint = engine.load(int(os.environ["CKPT_LAST_STEP"]))
    model.module.load_state_dict(checkpoint.state["model"])
    optimizer.load_state_dict(checkpoint.state["optimizer"])
    start = checkpoint.state["step"]
    print(f"resumed from checkpoint step {start} ({checkpoint.source})", flush=True)


def state(step):
    return {"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "step": step}


generator = torch.Generator().manual_seed(rank)
for step in range(start + 1, args.steps + 1):
    x = torch.randn(64, 32, generator=generator)
    loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"step {step} loss {loss.item():.5f}", flush=True)
    if rank == 0 and step % args.every == 0:
        engine.save(step, state(step))
    flag = torch.tensor([1 if stop_requested else 0])
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)  # every rank stops at the same step
    if flag.item():
        if rank == 0:
            if step % args.every:
                engine.save(step, state(step))
            engine.wait()
            print(f"checkpoint step {step} is durable; stopping on SIGTERM", flush=True)
        dist.destroy_process_group()
        sys.exit(0)
    time.sleep(args.sleep)
engine.wait()
print("training finished", flush=True)
dist.destroy_process_group()
