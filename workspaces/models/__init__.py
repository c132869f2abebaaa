"""Models of the workspaces app: Training Workspaces and their node reservations, quotas,
contract terms and the billing ledger, and the warm-start record of placements."""

from .billing import ContractTerm, JobBilling, UsageArchive
from .quotas import Quota
from .warm import WarmStart
from .workspaces import Workspace, WorkspaceNode, WorkspaceStatusChange

__all__ = [
    "ContractTerm", "JobBilling", "Quota", "UsageArchive", "WarmStart", "Workspace", "WorkspaceNode",
    "WorkspaceStatusChange",
]
