"""Training Workspaces (reserved capacity), warm pool, quotas and pricing."""
