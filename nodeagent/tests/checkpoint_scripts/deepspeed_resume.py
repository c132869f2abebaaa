"""Bit-for-bit restore of a real DeepSpeedEngine through `wrap_deepspeed_engine` (run under `deepspeed`).

Phase 1 trains 12 steps and checkpoints every 4 (concurrently); phase 2 builds a fresh engine
from a different seed, loads step 8 and trains steps 9..12 again. Rank 0 prints one JSON line
with every rank's losses of steps 9..12 in both runs and every rank's state digest (its master
weights and optimizer state) at step 8 and after the load, and after step 12 in both runs, so
the test compares them bit for bit. The same batches feed both phases (seeded by step and rank).

The digests read each rank's own training state, not `deepspeed.zero.GatheredParameters`: on
CPU that gather now and then returns other values for the same partitions (seen about once in
twenty runs under load, in a run that never checkpointed, while the partitions were equal).
"""

import argparse
import hashlib
import json
import os

import deepspeed
import torch
import torch.distributed as dist
from concurrent_checkpoint import wrap_deepspeed_engine

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, default=-1)
parser.add_argument("--zero", type=int, required=True)
parser.add_argument("--out", required=True)
args = parser.parse_args()
deepspeed.init_distributed(dist_backend="gloo")
rank = dist.get_rank()
CONFIG = {"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": args.zero},
          "zero_allow_untested_optimizer": True, "steps_per_print": 10**9}
if args.zero == 3:  # every parameter partitioned, none kept whole for being small
    CONFIG["zero_optimization"]["stage3_param_persistence_threshold"] = 0


def engine_from(seed):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    engine, _, _, scheduler = deepspeed.initialize(model=model, optimizer=optimizer, config=CONFIG,
                                                   lr_scheduler=lambda opt: torch.optim.lr_scheduler.StepLR(opt, 3, 0.5))
    return engine


def train(engine, first, last, save_every=0):
    losses = {}
    for step in range(first, last + 1):
        generator = torch.Generator().manual_seed(100 * step + rank)
        x = torch.randn(4, 16, generator=generator)
        loss = ((engine(x) - x[:, :4]) ** 2).mean()
        engine.backward(loss)
        engine.step()
        losses[step] = loss.item()
        if save_every and step % save_every == 0:
            engine.save_checkpoint(args.out, client_state={"data_step": step})
    return losses


def tensors_in(value):
    if torch.is_tensor(value):
        yield value
    elif isinstance(value, dict):
        for key in sorted(value, key=str):
            yield from tensors_in(value[key])
    elif isinstance(value, list | tuple):
        for item in value:
            yield from tensors_in(item)


def state_digests(engine):
    """Every rank's digest of what it trains: its master weights (under ZeRO-3 its fp32
    partitions, else the module's parameters) and its optimizer's state. A collective."""
    optimizer = engine.optimizer
    if args.zero == 3:
        weights, inner = list(optimizer.fp32_partitioned_groups_flat), optimizer.optimizer.state
    else:
        weights, inner = list(engine.module.parameters()), getattr(optimizer, "optimizer", optimizer).state
    digest = hashlib.sha256()
    for tensor in [*weights, *tensors_in([inner[key] for key in inner])]:
        digest.update(tensor.detach().contiguous().numpy().tobytes())
    every_rank = [None] * dist.get_world_size()
    dist.all_gather_object(every_rank, digest.hexdigest())
    return every_rank


def every_rank(losses):
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, [losses[s] for s in range(9, 13)])
    return gathered


first = engine_from(seed=0)
checkpoints = wrap_deepspeed_engine(first, host_cache_size=0.05)
original = train(first, 1, 8, save_every=4)
at_step_8 = state_digests(first)
original.update(train(first, 9, 12, save_every=4))
checkpoints.wait()
original_digests = state_digests(first)

second = engine_from(seed=123)  # different weights: only the checkpoint can make them equal
wrap_deepspeed_engine(second, host_cache_size=0.05)
path, client_state = second.load_checkpoint(args.out, tag="global_step8")
restored = state_digests(second)
resumed = train(second, 9, 12)
resumed_digests = state_digests(second)
original_losses, resumed_losses = every_rank(original), every_rank(resumed)
if rank == 0:
    print("RESULT " + json.dumps({
        "path": path, "client_state": client_state, "global_steps": second.global_steps,
        "original": original_losses, "resumed": resumed_losses,
        "at_step_8": at_step_8, "restored": restored,
        "original_digests": original_digests, "resumed_digests": resumed_digests,
        "world": dist.get_world_size(), "shards": sorted(os.listdir(path)),
    }), flush=True)
