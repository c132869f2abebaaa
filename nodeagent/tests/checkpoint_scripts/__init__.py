"""Helpers and training scripts for the concurrent checkpointing tests."""
