"""Training environments on the console side: what the form offers, what a placement carries.

Each (framework, version) a job can choose is a TrainingEnvironment row (staff edit them in the
admin). The node agent builds it (process runtime) or finds it in the job's image (Docker
runtime); see nodeagent/envcache.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from nodeagent import protocol

from ..choices import FRAMEWORK_VERSIONS, Framework
from ..models import TrainingEnvironment


def offered_versions() -> dict[str, list[str]]:
    """framework → versions the form and the API accept, newest first (enabled environments)."""
    offered: dict[str, list[str]] = {framework: [] for framework in Framework.values}
    for environment in TrainingEnvironment.objects.filter(enabled=True):
        offered[environment.framework].append(environment.version)
    for versions in offered.values():
        versions.sort(key=_version_key, reverse=True)
    return offered


def default_version(framework: str, offered: Mapping[str, list[str]] | None = None) -> str | None:
    versions = (offered if offered is not None else offered_versions()).get(framework) or FRAMEWORK_VERSIONS.get(framework, [])
    return versions[0] if versions else None


def version_choices() -> list[tuple[str, str]]:
    """(version, "DeepSpeed 0.18.9 — torch 2.13.0, …") for the form's select: what each holds."""
    return [
        (environment.version, f"{environment.get_framework_display()} {environment.version} — {environment.holds()}")
        for environment in TrainingEnvironment.objects.filter(enabled=True).order_by("framework", "-version")
    ]


def spec_for(environment: TrainingEnvironment) -> protocol.TrainingEnvironment:
    return protocol.TrainingEnvironment(
        name=environment.name, framework=environment.framework, framework_label=environment.get_framework_display(),
        version=environment.version, requirements=environment.pins(), image=environment.image,
    )


def add_environments(placements: list[protocol.Placement], chosen: dict[int, tuple[str, str]]) -> list[protocol.Placement]:
    """Each placement gets its job's training environment (absent when none matches any more);
    `chosen`: job id → (framework, version), as the caller read the jobs.

    Read for every desired state a node is sent: one query for the matching rows' ids and
    change times; their parsed specs are kept while a row is unchanged."""
    pairs = set(chosen.values())
    rows = TrainingEnvironment.objects.filter(
        framework__in={framework for framework, _ in pairs}, version__in={version for _, version in pairs},
    ).values_list("pk", "framework", "version", "updated_at")
    current = {(framework, version): (pk, updated_at) for pk, framework, version, updated_at in rows}
    stale = [pk for pk, updated_at in current.values() if _specs.get(pk, (None,))[0] != updated_at]
    if stale:
        for environment in TrainingEnvironment.objects.filter(pk__in=stale):
            _specs[environment.pk] = (environment.updated_at, spec_for(environment))
    for placement in placements:
        found = current.get(chosen.get(placement["job_id"], ("", "")))
        if found is not None and found[0] in _specs:
            placement["environment"] = _specs[found[0]][1]
    return placements


_specs: dict[int, tuple[object, protocol.TrainingEnvironment]] = {}  # environment id → (updated_at, spec)


def _version_key(version: str) -> tuple[Any, ...]:
    return tuple(int(part) if part.isdigit() else 0 for part in version.replace("-", ".").split("."))


def describe(environments: Iterable[TrainingEnvironment]) -> list[dict[str, str]]:
    """For the creation page: what each offered environment holds, and its image."""
    return [
        {"framework": e.get_framework_display(), "version": e.version, "name": e.name, "holds": e.holds(), "image": e.image}
        for e in environments
    ]
