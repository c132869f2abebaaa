"""The node registry: the GPU servers the scheduler places on, their agents' tokens and liveness.

`registry` holds the actions (agent authentication, registration, heartbeats, cordon, faults,
desired state); `models`, `views`, `urls`, `api` and `admin` are its layers. Nothing is imported
here: jobs.models loads `models` while `registry` needs jobs.models, so eager imports would loop.
"""
