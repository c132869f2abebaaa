"""The training environments seeded by migration 0007 (jobs_trainingenvironment rows).

A plain module so that the tests and the benchmark build exactly these lists on their nodes.
"""

# The seed's compatibility set (its "Run Job" list) with torch 2.13.0, the torch these nodes have
# on local disk (the seed's 2.12.1 would be a multi-gigabyte download). boto3 is the checkpoint
# library's S3 mirror. Both lists were built on a node with `nodeagent.envcache` and checked.
SEED_SET = """torch==2.13.0
transformers==5.10.2
datasets==4.8.4
safetensors==0.8.0
accelerate==1.13.0
numpy==2.4.6
boto3==1.44.8
"""
ENVIRONMENTS = [
    ("pytorch-2.13.0", "pytorch", "2.13.0", SEED_SET,
     "PyTorch with the seed's Hugging Face set (torchrun, accelerate launch, python)"),
    ("deepspeed-0.18.9", "deepspeed", "0.18.9", SEED_SET + "deepspeed==0.18.9\n",
     "DeepSpeed on PyTorch 2.13.0 with the seed's Hugging Face set (deepspeed, accelerate launch, torchrun)"),
]
