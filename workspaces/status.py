"""Status changes of a Training Workspace: each with a history row (reasons alone without one)."""

from __future__ import annotations

from .models import Workspace, WorkspaceStatusChange
from .states import check_transition


def move(workspace: Workspace, new_status: str, reason: str = "") -> None:
    """Change status with a history row; the same status only refreshes the reason."""
    if workspace.status == new_status:
        set_reason(workspace, reason)
        return
    check_transition(workspace.status, new_status)
    old = workspace.status
    workspace.status, workspace.status_reason = new_status, reason[:500]
    workspace.save(update_fields=["status", "status_reason", "updated_at"])
    WorkspaceStatusChange.objects.create(workspace=workspace, old_status=old, new_status=new_status, reason=reason[:500])


def set_reason(workspace: Workspace, reason: str) -> None:
    """The reason changes without a status change (no history row)."""
    if workspace.status_reason != reason[:500]:
        workspace.status_reason = reason[:500]
        workspace.save(update_fields=["status_reason", "updated_at"])


def remove(workspace: Workspace) -> None:
    """Delete the row (history and released reservations go with it; jobs stay, unlinked)."""
    workspace.delete()
