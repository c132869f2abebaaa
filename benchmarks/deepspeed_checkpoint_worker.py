"""One run of benchmarks/frameworks.py's DeepSpeed checkpoint comparison (run under `deepspeed`).

A DeepSpeed engine (CPU, gloo) trains an MLP and checkpoints every `--every` steps, either with
DeepSpeed's own `save_checkpoint` (synchronous torch.save per rank) or through
`wrap_deepspeed_engine` (concurrent checkpointing). Rank 0 prints one JSON line: the stall of
each checkpoint call, the training time, and the time until every checkpoint is durable.
"""

import argparse
import json
import os
import time

import deepspeed
import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, default=-1)
parser.add_argument("--mode", choices=("deepspeed", "ours"), required=True)
parser.add_argument("--zero", type=int, default=3)
parser.add_argument("--width", type=int, default=2048)
parser.add_argument("--steps", type=int, default=24)
parser.add_argument("--every", type=int, default=4)
parser.add_argument("--out", required=True)
args = parser.parse_args()

deepspeed.init_distributed(dist_backend="gloo")
torch.manual_seed(0)
width = args.width
model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.GELU(), torch.nn.Linear(width, width),
                            torch.nn.GELU(), torch.nn.Linear(width, width))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
config = {"train_micro_batch_size_per_gpu": 8, "zero_optimization": {"stage": args.zero},
          "zero_allow_untested_optimizer": True, "steps_per_print": 10**9}
engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
wrapper = None
if args.mode == "ours":
    from concurrent_checkpoint import wrap_deepspeed_engine

    wrapper = wrap_deepspeed_engine(engine, host_cache_size=2, keep_last=2)
x, y = torch.randn(8, width), torch.randn(8, width)
stalls, steps = [], []
started = time.perf_counter()
for step in range(1, args.steps + 1):
    began = time.perf_counter()
    loss = ((engine(x) - y) ** 2).mean()
    engine.backward(loss)
    engine.step()
    if step % args.every == 0:
        before = time.perf_counter()
        engine.save_checkpoint(args.out)
        stalls.append(time.perf_counter() - before)
    else:
        steps.append(time.perf_counter() - began)
trained = time.perf_counter() - started
if wrapper is not None:
    wrapper.wait()
dist.barrier()
durable = time.perf_counter() - started
params = sum(p.ds_numel if hasattr(p, "ds_numel") else p.numel() for p in engine.module.parameters())
if dist.get_rank() == 0:
    print("RESULT " + json.dumps({
        "mode": args.mode, "zero": args.zero, "world": dist.get_world_size(), "params": params,
        "stalls": stalls, "step_times": steps, "train_s": trained, "durable_s": durable,
        "pid": os.getpid(),
    }), flush=True)
