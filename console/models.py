"""Models of the console app: the audit log (console.lib.audit)."""

from .lib.audit import AuditEvent

__all__ = ["AuditEvent"]
