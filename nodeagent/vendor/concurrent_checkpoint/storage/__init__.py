"""Where checkpoints are kept besides the local disk (the local layout is in `layout`)."""
