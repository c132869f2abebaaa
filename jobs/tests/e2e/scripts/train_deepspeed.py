"""A DeepSpeed engine on CPU over gloo, checkpointing through the concurrent checkpointing library.

Run as the seed writes it: `PYTHONPATH=$CHECKPOINT_VENDOR deepspeed --num_gpus=N train_deepspeed.py
--zero 3`. Every rank prints its steps; every `--every` steps `save_checkpoint` goes through
`wrap_deepspeed_engine` (each rank saves its own ZeRO partition into OUTPUT_DIR, mirrored to
CHECKPOINT_S3_URL when the platform sets it). With CKPT_LAST_STEP set it resumes from there.
(On CPU DeepSpeed falls back to gloo itself when oneCCL is not installed; ZeRO stages 1 and 2
fail in the all-gather on CPU with torch 2.13, so the stages here are 0 and 3.)
"""

import argparse
import hashlib
import os
import time

import deepspeed
import torch
import torch.distributed as dist
from concurrent_checkpoint import wrap_deepspeed_engine

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, default=-1)  # passed by DeepSpeed's launcher
parser.add_argument("--zero", type=int, default=3)
parser.add_argument("--steps", type=int, default=12)
parser.add_argument("--every", type=int, default=4, help="checkpoint every N steps (0: never)")
parser.add_argument("--output_dir", default=os.environ.get("OUTPUT_DIR", "out"),
                    help="checkpoints; on several nodes a directory every node shares (File Storage)")
parser.add_argument("--sleep", type=float, default=0.0)
args = parser.parse_args()


def say(text):
    """One write per line: the ranks of a node share the launcher's unbuffered stdout."""
    os.write(1, (text + "\n").encode())


deepspeed.init_distributed(dist_backend="gloo")
rank, world = dist.get_rank(), dist.get_world_size()
say(f"Starting dataset initialization (rank {rank} of {world}, node {os.environ.get('NODE_RANK')}, "
      f"deepspeed {deepspeed.__version__}, torch {torch.__version__}, attempt {os.environ.get('JOB_ATTEMPT')})")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
config = {
    "train_micro_batch_size_per_gpu": 8,
    "gradient_accumulation_steps": 1,
    "zero_optimization": {"stage": args.zero},
    "zero_allow_untested_optimizer": True,
    "steps_per_print": 10**9,
}
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
checkpoints = wrap_deepspeed_engine(engine, host_cache_size=0.05, keep_last=3)
output_dir = args.output_dir
start = 0
if os.environ.get("CKPT_LAST_STEP") is not None:
    path, client_state = engine.load_checkpoint(output_dir, tag=f"global_step{os.environ['CKPT_LAST_STEP']}")
    start = engine.global_steps
    say(f"rank {rank} resumed from checkpoint step {start} ({path})")

for step in range(start + 1, args.steps + 1):
    generator = torch.Generator().manual_seed(1000 * step + rank)  # the same batches after a resume
    x = torch.randn(8, 16, generator=generator)
    loss = ((engine(x) - x.sum(1, keepdim=True)) ** 2).mean()
    engine.backward(loss)
    engine.step()
    say(f"rank {rank} step {step} loss {loss.item():.6f}")
    if args.every and step % args.every == 0:
        engine.save_checkpoint(output_dir)
    time.sleep(args.sleep)
checkpoints.wait()
with deepspeed.zero.GatheredParameters(list(engine.module.parameters()), enabled=args.zero == 3):
    digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in engine.module.parameters())).hexdigest()[:16]
say(f"rank {rank} training finished at step {engine.global_steps}; parameters {digest}")
# Without this, gloo's worker threads are still alive when the interpreter exits, and a rank can end
# with "terminate called without an active exception" (SIGABRT) after its last step: a failed job.
dist.destroy_process_group()
