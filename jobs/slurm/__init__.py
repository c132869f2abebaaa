"""Slurm as a second execution backend: Training Jobs of a server type that a Slurm cluster serves
are submitted there as batch jobs instead of being placed on our node agents.

Plain modules (no Django): hostlist, batch_script, adapters, client, jwt, jobcomp, states.
Django: models (clusters, the Slurm job of a Training Job, its runs), admin, sync (submit, poll,
apply), runs (attempts and tokens of runs), consumer (the step launchers' WebSocket), views (the
launch-key redemption), tasks (the Celery poll), backend (the scheduler's hook).
"""
