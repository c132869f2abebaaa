"""The seed's `version_check.py`: which training environment runs this, and does it work?

Run as the seed writes it: `PYTHONPATH=$CHECKPOINT_VENDOR HF_DATASETS_OFFLINE="1" python version_check.py`
(one process per node; on several nodes the platform's RANK/WORLD_SIZE join them into one
world), or under `torchrun`. Prints the versions of the seed's compatibility set, exercises
datasets and safetensors, imports the concurrent checkpointing library, and all-reduces over
gloo so every rank proves it joined the same job.
"""

import importlib.metadata
import os
import sys
import tempfile

import torch
import torch.distributed as dist


def say(text):
    os.write(1, (text + "\n").encode())  # one write per line: ranks of a node share stdout


packages = ["torch", "transformers", "datasets", "safetensors", "accelerate", "numpy", "deepspeed"]
versions = []
for name in packages:
    try:
        versions.append(f"{name} {importlib.metadata.version(name)}")
    except importlib.metadata.PackageNotFoundError:
        versions.append(f"{name} absent")

import datasets  # noqa: E402 - after the version listing, which must not need them
import safetensors.torch  # noqa: E402
from datastates.llm import DecoratedCheckpointing  # noqa: E402,F401 - PYTHONPATH=$CHECKPOINT_VENDOR

table = datasets.Dataset.from_dict({"text": ["a b", "c d e"]}).map(lambda row: {"words": len(row["text"].split())})
with tempfile.TemporaryDirectory() as folder:
    path = os.path.join(folder, "t.safetensors")
    safetensors.torch.save_file({"w": torch.arange(4.0)}, path)
    restored = safetensors.torch.load_file(path)["w"].sum().item()

world = int(os.environ.get("WORLD_SIZE", "1"))
rank = int(os.environ.get("RANK", "0"))
total = rank
if world > 1:
    dist.init_process_group("gloo")
    value = torch.tensor([rank])
    dist.all_reduce(value)
    total = int(value.item())
    dist.destroy_process_group()
say(f"rank {rank} of {world} on node {os.environ.get('NODE_RANK')}: {', '.join(versions)}; "
    f"python {sys.executable}; datasets rows {sum(table['words'])}; safetensors {restored:g}; all_reduce {total}")
