"""Training environments on the console side: the framework versions a job may choose, their
pinned requirement lists, the environments a placement carries, and the failures of preparing
them on a node.

- offered: what the form and the API offer, and what a placement carries (database reads);
- seeds: the requirement lists migration 0010 seeded (plain data);
- requirements, preparation: plain rules (no Django).

May import jobs.models, jobs.choices, jobs.recovery.faults and nodeagent.protocol.
"""
