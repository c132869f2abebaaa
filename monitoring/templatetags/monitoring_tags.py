"""Template helpers of the monitoring pages (no view has to pass the catalogue along)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from django import template

from monitoring import catalog, metric_queries

register = template.Library()


@register.simple_tag
def metric_catalogue() -> list[dict[str, Any]]:
    """The metric catalogue for the charts' JavaScript (use with json_script)."""
    return catalog.as_json()


@register.filter
def metric_value(value: float | str | None, unit: str) -> str:
    """A current value as the dashboard shows it: '—' when there is none, units abbreviated."""
    if value is None or value == "":  # a template's missing variable is ""
        return "—"
    value = float(value)
    suffix = {"Percent": " %", "Gigabytes": " GiB", "Celsius": " °C", "Watts": " W", "Megahertz": " MHz",
              "Megabytes/Second": " MB/s"}.get(unit, "")
    return f"{value:,.{3 if abs(value) < 10 and unit == 'None' else 1}f}{suffix}"


NOW_WINDOW = 120  # seconds: an older reading is not "current" (the agent samples every 10 s)
NODE_GPU_METRICS = ("GPUUtilization", "GPUMemoryUsed", "GPUMemoryTotal", "GPUTemperature", "GPUPowerDraw",
                    "GPUSMClock", "GPUECCErrorsUncorrected")


@register.inclusion_tag("monitoring/_node_gpus.html")
def node_gpu_metrics(node: Any, gpus: Iterable[Any]) -> dict[str, Any]:
    """Staff node page: every GPU's health and newest readings, and the node's own readings."""
    since = time.time() - NOW_WINDOW
    latest = metric_queries.latest_by_gpu(node.name, NODE_GPU_METRICS, since)
    node_values: dict[str, float] = {}
    for series, _, value in metric_queries.recent_samples({"node": node.name, "gpu__isnull": True},
                                                         [m.name for m in catalog.NODE_METRICS], since):
        node_values[series["metric"]] = value
    return {
        # every name present (None when not reported) so the template can tell "no reading"
        "rows": [(gpu, {name: latest.get(gpu.index, {}).get(name) for name in NODE_GPU_METRICS}) for gpu in gpus],
        "node_now": [(m, node_values.get(m.name)) for m in catalog.NODE_METRICS],
    }


@register.inclusion_tag("monitoring/_fleet_utilisation.html")
def fleet_utilisation() -> dict[str, Any]:
    """Staff node list: per node, the newest average GPU utilisation and hottest GPU."""
    latest = metric_queries.latest_by_node(("GPUUtilization", "GPUTemperature"), time.time() - NOW_WINDOW)
    rows = []
    for node, values in sorted(latest.items()):
        util, temps = values.get("GPUUtilization", []), values.get("GPUTemperature", [])
        rows.append((node, len(util), sum(util) / len(util) if util else None, max(temps) if temps else None))
    return {"rows": rows}
