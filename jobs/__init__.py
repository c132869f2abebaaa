"""Training Jobs: models, state machine, pages, REST API, scheduling."""
