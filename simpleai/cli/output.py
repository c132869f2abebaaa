"""Jobs and server types as text for a terminal."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal

from simpleai.api_types import Job, ServerType, Tag


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = [list(header), *map(list, rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip() for line in lines)


def when(iso: str) -> str:
    """`2026-12-04T18:55:38.123Z` → `2026-12-04 18:55:38` (the console's time zone, as sent)."""
    return iso[:19].replace("T", " ") if iso else "-"


def tags_text(tags: Sequence[Tag]) -> str:
    return " ".join(f"{tag['key']}={tag['value']}" for tag in tags)


def shape(job: Job) -> str:
    gpus, nodes = job["gpus_per_node"], job["node_count"]
    return f"{job['server_type']}: {gpus} GPU{'s' if gpus != 1 else ''} × {nodes} node{'s' if nodes != 1 else ''}"


def jobs_table(jobs: Sequence[Job]) -> str:
    rows = [(str(j["id"]), j["name"], j["status"], shape(j), when(j["created_at"]), tags_text(j["tags"])) for j in jobs]
    return table(("ID", "NAME", "STATUS", "RESOURCES", "CREATED", "TAGS"), rows)


def job_text(job: Job) -> str:
    reason = f" — {job['status_reason']}" if job["status_reason"] else ""
    cost = job.get("cost") or {}
    spot = "Spot" if job["learning_type"] == "spot" else "On-Demand"
    lines = [
        f"Job {job['id']}  {job['name']}",
        f"  Status     {job['status']}{reason}",
        f"  Resources  {shape(job)} ({spot}{', failover' if job['failover_enabled'] else ''})",
        f"  Framework  {job['framework']} {job['framework_version']}",
        f"  Image      {job['image_url']}",
        f"  Command    {job['command']}",
    ]
    if job["script_url"]:
        lines.append(f"  Script     {job['script_url']}")
    if job.get("workdir_url"):
        lines.append(f"  Workdir    {job['workdir_url']}")
    lines += [f"  Input      {item['name']} = {item['url']}" for item in job.get("inputs") or []]
    if job.get("from_checkpoint"):
        lines.append(f"  From       the checkpoint of job {job['from_checkpoint']}")
    if job.get("result_url"):
        lines.append(f"  Results    {job['result_url']} (simpleai download {job['id']})")
    if job["tags"]:
        lines.append(f"  Tags       {tags_text(job['tags'])}")
    if cost:
        lines.append(f"  Cost       ${cost.get('amount', '0.00')} so far (${job['hourly_price']} an hour while it runs)")
    lines.append(f"  Created    {when(job['created_at'])}")
    lines.append("  History")
    lines += [f"    {when(h['created_at'])}  {h['new_status']}{': ' + h['reason'] if h['reason'] else ''}" for h in job["history"]]
    return "\n".join(lines)


def dollars(amount: str) -> str:
    return f"${Decimal(amount):.2f}"


def server_types_table(types: Sequence[ServerType]) -> str:
    rows = [
        (t["name"], t["gpu_model"], str(t["gpus_per_node"]), dollars(t["on_demand_price_per_gpu_hour"]),
         dollars(t["spot_price_per_gpu_hour"]), ", ".join(str(a["gpus"]) for a in t["allocations"]))
        for t in types
    ]
    return table(("NAME", "GPU", "GPUS/NODE", "ON-DEMAND/GPU-H", "SPOT/GPU-H", "GPUS PER JOB NODE"), rows)
