"""SQL for many rows at once: one UPDATE or INSERT for many values (bulk) and the `__any`
lookup (lookups, registered by jobs.apps). May import Django's database layer only.
"""
