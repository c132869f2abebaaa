"""Only jobs.actions writes a job's status, reason, attempt, checkpoint, results, failover count
and warm-start note, and a node's cordon: every such change gets its history row and live event.

The rule is checked on the source (AST), so a new direct write anywhere in the apps fails here
before it can skip the history or the browsers.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
APPS = ("jobs", "workspaces", "monitoring", "console")

JOB_FIELDS = frozenset({
    "status", "status_reason", "current_attempt", "result_url", "failover_count",
    "checkpoint_step", "checkpoint_url", "checkpoint_at", "started_warm", "warm_note",
})
NODE_FIELDS = frozenset({"cordoned", "cordon_reason"})
GUARDED = JOB_FIELDS | NODE_FIELDS

# module → fields it may write, and why
ALLOWED: dict[str, frozenset[str]] = {
    "jobs/actions.py": GUARDED,
    # a Training Workspace's own status and reason (workspaces' action layer), not a job's
    "workspaces/status.py": frozenset({"status", "status_reason"}),
    "workspaces/actions.py": frozenset({"status", "status_reason"}),
    # Refused.status is the HTTP status of a refused launcher request
    "jobs/slurm/steps.py": frozenset({"status"}),
}

# calls that write the keyword arguments (or, for update_fields/defaults, the names) they get
WRITE_METHODS = frozenset({"update", "create", "get_or_create", "update_or_create", "bulk_update"})
MODEL_CLASSES = frozenset({"TrainingJob", "Node"})
BULK_WRITES = frozenset({"update_each", "update_each_returning", "bulk_update"})
NAME_LISTS = frozenset({"update_fields", "defaults", "create_defaults"})
SQL_UPDATE = re.compile(r"\bUPDATE\b.*\bSET\b", re.I | re.S)


def _strings(node: ast.AST) -> set[str]:
    return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def _call_name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _targets(node: ast.AST) -> list[ast.AST]:
    if isinstance(node, ast.Assign):
        found: list[ast.AST] = []
        for target in node.targets:
            found += [t for t in ast.walk(target) if isinstance(t, ast.Attribute)]
        return found
    if isinstance(node, ast.AugAssign | ast.AnnAssign):
        return [node.target]
    return []


def writes(source: str) -> list[tuple[int, str]]:
    """(line, field) of each write of a guarded field in `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        for target in _targets(node):
            if isinstance(target, ast.Attribute) and target.attr in GUARDED:
                found.append((target.lineno, target.attr))
        if isinstance(node, ast.Call):
            name = _call_name(node)
            if name == "setattr" and len(node.args) > 1:
                found += [(node.lineno, s) for s in _strings(node.args[1]) if s in GUARDED]
            if name in WRITE_METHODS or name in MODEL_CLASSES:
                found += [(node.lineno, k.arg) for k in node.keywords if k.arg in GUARDED]
                found += [(node.lineno, s) for k in node.keywords if k.arg is None for s in _strings(k.value) if s in GUARDED]
            named = [k.value for k in node.keywords if k.arg in NAME_LISTS]
            if name in BULK_WRITES:  # columns by name: update_each's mappings, bulk_update's fields
                named += [*node.args, *(k.value for k in node.keywords if k.arg in ("same", "fields"))]
            found += [(node.lineno, s) for value in named for s in _strings(value) if s in GUARDED]
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and SQL_UPDATE.search(node.value):
            found += [(node.lineno, f) for f in GUARDED if re.search(rf"\b{f}\s*=", node.value)]
    return found


def _modules() -> list[Path]:
    return sorted(
        path for app in APPS for path in (ROOT / app).rglob("*.py")
        if "tests" not in path.parts and "migrations" not in path.parts
    )


def test_no_module_but_the_actions_writes_the_guarded_fields():
    offences = []
    for path in _modules():
        module = path.relative_to(ROOT).as_posix()
        allowed = ALLOWED.get(module, frozenset())
        offences += [f"{module}:{line} writes {field}" for line, field in writes(path.read_text()) if field not in allowed]
    assert offences == [], "write these through jobs.actions:\n" + "\n".join(offences)


def test_each_exemption_is_still_needed():
    """An exemption no module uses any more goes, so it cannot hide a write later."""
    unused = [
        f"{module}: {field}" for module, fields in ALLOWED.items() if module != "jobs/actions.py"
        for field in fields - {found for _, found in writes((ROOT / module).read_text())}
    ]
    assert unused == []


def test_the_scan_covers_the_apps():
    modules = {path.relative_to(ROOT).as_posix() for path in _modules()}
    assert {"jobs/recovery/failover.py", "jobs/lifecycle.py", "jobs/slurm/sync.py", "workspaces/reservations.py"} <= modules


@pytest.mark.parametrize(("source", "field"), [
    ("job.status_reason = reason", "status_reason"),
    ("job.status, job.status_reason = new, why", "status_reason"),
    ("job.failover_count += 1", "failover_count"),
    ("Node.objects.filter(pk=1).update(cordoned=True, cordon_reason='x')", "cordon_reason"),
    ("TrainingJob.objects.filter(pk=1).update(**{'result_url': url})", "result_url"),
    ("job.save(update_fields=['checkpoint_step', 'updated_at'])", "checkpoint_step"),
    ("setattr(job, 'current_attempt', 2)", "current_attempt"),
    ("bulk.update_each(TrainingJob, ids, {'warm_note': ('text', notes)})", "warm_note"),
    ("Node.objects.update_or_create(name=n, defaults={'cordoned': False})", "cordoned"),
    ("TrainingJob(owner=o, status='Running')", "status"),
    ("SQL = 'UPDATE jobs_trainingjob SET started_warm = %s WHERE id = %s'", "started_warm"),
])
def test_the_scan_finds_each_kind_of_write(source, field):
    assert field in {found for _, found in writes(source)}


def test_reads_and_other_fields_are_not_writes():
    source = (
        "if job.status == 'Running': print(job.status_reason)\n"
        "TrainingJob.objects.filter(status='Pending', current_attempt=2).values_list('failover_count')\n"
        "Placement.objects.filter(pk=1).update(state='exited')\n"
        "job.refresh_from_db(fields=['status'])\n"
    )
    assert writes(source) == []
