"""A real DDP training on CPU (gloo), launched by a bare `torchrun train_ddp.py`.

Every rank prints one line per step; rank 0 saves the model into $OUTPUT_DIR.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--sleep", type=float, default=0.0)
parser.add_argument("--fail-at", type=int, default=0, help="raise at this step on the last rank")
args = parser.parse_args()

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
print(f"Starting dataset initialization (rank {rank} of {world}, node rank {os.environ.get('NODE_RANK')})", flush=True)
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
generator = torch.Generator().manual_seed(rank)
for step in range(1, args.steps + 1):
    x = torch.randn(64, 16, generator=generator)
    loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"rank {rank} step {step} loss {loss.item():.5f}", flush=True)
    if args.fail_at and step == args.fail_at and rank == world - 1:
        raise RuntimeError(f"deliberate failure at step {step}")
    time.sleep(args.sleep)
if rank == 0:
    out = os.environ["OUTPUT_DIR"]
    os.makedirs(out, exist_ok=True)
    torch.save(model.module.state_dict(), os.path.join(out, "model.pt"))
    print(f"saved {out}/model.pt", flush=True)
dist.destroy_process_group()
