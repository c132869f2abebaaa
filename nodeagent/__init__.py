"""The node agent (no Django import) and the concurrent checkpointing library it vendors."""
