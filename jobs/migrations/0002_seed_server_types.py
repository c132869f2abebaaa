"""Seed the server-type catalogue with the seed's g2 (H100) and g3 (B300) types."""

from decimal import Decimal

from django.db import migrations

SERVER_TYPES = [
    {
        "name": "g2",
        "description": "GPU bare metal with 8 NVIDIA H100 SXM (Hopper) for large-scale AI computation",
        "gpu_model": "NVIDIA H100 SXM", "gpu_architecture": "Hopper", "gpu_letter": "h",
        "gpus_per_node": 8, "gpu_memory_gb": 80, "vcpus": 96, "memory_gb": 2048,
        "infiniband_gbps": 1600, "service_network_gbps": 100, "nvswitch_gbs": 900,
        "fp4_tflops": None, "fp8_tflops": 1979, "fp16_tflops": 989,
        "on_demand_price_per_gpu_hour": Decimal("3.1000"), "spot_price_per_gpu_hour": Decimal("1.2400"),
    },
    {
        "name": "g3",
        "description": "GPU bare metal with 8 NVIDIA B300 SXM (Blackwell Ultra) for AI training, LLM inference and generative AI",
        "gpu_model": "NVIDIA B300 SXM", "gpu_architecture": "Blackwell Ultra", "gpu_letter": "b",
        "gpus_per_node": 8, "gpu_memory_gb": 288, "vcpus": 128, "memory_gb": 4096,
        "infiniband_gbps": 6400, "service_network_gbps": 100, "nvswitch_gbs": 1800,
        "fp4_tflops": 13500, "fp8_tflops": 4500, "fp16_tflops": None,
        "on_demand_price_per_gpu_hour": Decimal("6.4000"), "spot_price_per_gpu_hour": Decimal("2.5600"),
    },
]


def seed(apps, schema_editor):
    ServerType = apps.get_model("jobs", "ServerType")
    for fields in SERVER_TYPES:
        ServerType.objects.update_or_create(name=fields["name"], defaults=fields)


def unseed(apps, schema_editor):
    apps.get_model("jobs", "ServerType").objects.filter(name__in=[t["name"] for t in SERVER_TYPES]).delete()


class Migration(migrations.Migration):
    dependencies = [("jobs", "0001_initial")]
    operations = [migrations.RunPython(seed, unseed)]
