"""What the OpenAPI schema declares a new Training Job may be: the rules jobs.validation and
workspaces.admission enforce (the form's), written into the request body's schema.

The serializer keeps its fields loose on purpose (jobs.api.serializers: the rules' own messages
win over DRF's), so drf-spectacular alone would declare any string for a name and any integer
for keep-alive. This hook (SPECTACULAR_SETTINGS["POSTPROCESSING_HOOKS"]) adds the bounds to the
request components only: an existing job read back may hold a framework version that is no
longer offered.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import DatabaseError

from console.lib.validation import NAME_RE

from ..choices import FRAMEWORK_VERSIONS
from ..environments import offered
from ..validation import COMMAND_MAX, COMMAND_MIN, MAX_NODES, MAX_SCRIPT_URL

JOB_LIST = "/api/v1/training-jobs/"


def offered_versions() -> list[str]:
    """Every framework version a new job may name now (blank: the framework's newest)."""
    try:
        versions_of = offered.offered_versions()
    except DatabaseError:  # the schema generated offline (manage.py spectacular without a database)
        versions_of = FRAMEWORK_VERSIONS
    return sorted({version for versions in versions_of.values() for version in versions}) + [""]


def job_request_rules() -> dict[str, dict[str, Any]]:
    """field → the JSON Schema keywords of its rule."""
    return {
        "name": {"minLength": 3, "maxLength": 63, "pattern": NAME_RE.pattern,
                 "description": "3 to 63 lowercase letters, digits, '-' and '.'; starts and ends with a letter or digit"},
        "command": {"minLength": COMMAND_MIN, "maxLength": COMMAND_MAX,
                    "description": f"{COMMAND_MIN} to {COMMAND_MAX:,} characters (without surrounding spaces)"},
        "keep_alive_minutes": {"minimum": 0, "maximum": settings.WARM_POOL_MAX_KEEP_ALIVE_MINUTES,
                               "description": "how long the nodes stay warm after the job (minutes)"},
        "framework_version": {"enum": offered_versions(),
                              "description": "a version offered for the framework; blank: its newest"},
        "node_count": {"minimum": 1, "maximum": MAX_NODES},
        "gpus_per_node": {"minimum": 1},
        "shm_size_gb": {"minimum": 1},
        "script_url": {"maxLength": MAX_SCRIPT_URL},
    }


def declare_job_rules(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    schemas = result.get("components", {}).get("schemas", {})
    rules = job_request_rules()
    for component in ("TrainingJobRequest", "PatchedTrainingJobRequest"):
        properties = schemas.get(component, {}).get("properties", {})
        for field, keywords in rules.items():
            if field in properties:
                properties[field].update(keywords)
    # the list's text filters: given, they hold something (console.lib.api_strict refuses an empty one)
    for parameter in result.get("paths", {}).get(JOB_LIST, {}).get("get", {}).get("parameters", []):
        if parameter.get("in") == "query" and parameter.get("schema", {}).get("type") == "string" and "enum" not in parameter["schema"]:
            parameter["schema"]["minLength"] = 1
    return result
