"""The node registry: the GPU servers the scheduler places on, their agents' tokens and liveness.

`registry` holds the actions (agent authentication, registration, sessions, heartbeats and the
Lost watchdog), `desired` what each node should run, `hardware` its faults and spot reclaims;
`placement_message` builds the placement message both backends send (node agents and Slurm step
launchers); `models`, `views`, `urls`, `api` and `admin` are its layers. Nothing is imported
here: jobs.models loads `models` while `registry` needs jobs.models, so eager imports would loop.
"""
