"""What `simpleai run` fills in when neither the file nor a flag says: a name, 1 GPU, the
smallest server type that offers that many GPUs per node, and no image (the training
environment's own, which the process runtime does not need). The API fills in the rest (1 node,
the default framework and its newest version, the allocation's memory)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from decimal import Decimal

from .api_types import JobFields, ServerType
from .errors import SimpleAIError
from .jobfile import new_name


def smallest_fitting(server_types: Sequence[ServerType], gpus: int, spot: bool = False) -> str:
    """The cheapest type per GPU-hour with an allocation of `gpus` GPUs (then the smaller node, then by name)."""
    fitting = [t for t in server_types if any(a["gpus"] == gpus for a in t["allocations"])]
    if not fitting:
        offered = sorted({a["gpus"] for t in server_types for a in t["allocations"]})
        raise SimpleAIError(f"no server type offers {gpus} GPUs per node: choose --gpus from {', '.join(map(str, offered))}")

    def price(server_type: ServerType) -> Decimal:
        return Decimal(server_type["spot_price_per_gpu_hour" if spot else "on_demand_price_per_gpu_hour"])

    return min(fitting, key=lambda t: (price(t), t["gpus_per_node"], t["name"]))["name"]


def fill_defaults(fields: JobFields, now: datetime, server_types: Callable[[], list[ServerType]]) -> JobFields:
    """`fields` with the CLI's defaults where they are missing; `server_types` is asked only when needed."""
    filled = dict(fields)
    filled.setdefault("name", new_name(now))
    filled.setdefault("image_url", "")  # the API takes blank as "the environment's image", not a missing key
    if filled.get("gpus_per_node") is None:
        filled["gpus_per_node"] = 1
    if not filled.get("server_type") and isinstance(filled["gpus_per_node"], int):
        filled["server_type"] = smallest_fitting(server_types(), filled["gpus_per_node"], filled.get("learning_type") == "spot")
    return filled
