"""Training environments on the console side: what the form offers, what a placement carries.

Each (framework, version) a job can choose is a TrainingEnvironment row (staff edit them in the
admin). The node agent builds it (process runtime) or finds it in the job's image (Docker
runtime); see nodeagent/envcache.py.
"""

from __future__ import annotations

from collections.abc import Iterable

from nodeagent import protocol

from .choices import FRAMEWORK_VERSIONS, Framework
from .models import TrainingEnvironment, TrainingJob


def offered_versions() -> dict[str, list[str]]:
    """framework → versions the form and the API accept, newest first (enabled environments)."""
    offered: dict[str, list[str]] = {framework: [] for framework in Framework.values}
    for environment in TrainingEnvironment.objects.filter(enabled=True):
        offered[environment.framework].append(environment.version)
    for versions in offered.values():
        versions.sort(key=_version_key, reverse=True)
    return offered


def default_version(framework: str, offered: dict[str, list[str]] | None = None) -> str | None:
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


def add_environments(placements: list[protocol.Placement]) -> list[protocol.Placement]:
    """Each placement gets its job's training environment (absent when none matches any more)."""
    jobs = dict(TrainingJob.objects.filter(pk__in={p["job_id"] for p in placements})
                .values_list("pk", "framework").order_by())
    versions = dict(TrainingJob.objects.filter(pk__in=jobs).values_list("pk", "framework_version").order_by())
    environments = {
        (e.framework, e.version): e
        for e in TrainingEnvironment.objects.filter(framework__in=set(jobs.values()), version__in=set(versions.values()))
    }
    for placement in placements:
        environment = environments.get((jobs.get(placement["job_id"]), versions.get(placement["job_id"])))
        if environment is not None:
            placement["environment"] = spec_for(environment)
    return placements


def _version_key(version: str) -> tuple:
    return tuple(int(part) if part.isdigit() else 0 for part in version.replace("-", ".").split("."))


def describe(environments: Iterable[TrainingEnvironment]) -> list[dict[str, str]]:
    """For the creation page: what each offered environment holds, and its image."""
    return [
        {"framework": e.get_framework_display(), "version": e.version, "name": e.name, "holds": e.holds(), "image": e.image}
        for e in environments
    ]
