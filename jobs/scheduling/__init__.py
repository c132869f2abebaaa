"""Scheduling and capacity: which waiting job runs on which GPUs.

- capacity, decision, placement, catalogue: the capacity ledger, a run's requests and decision,
  gang placement, and a server type's allocations (plain data, no Django);
- policy: the seam through which workspaces install their policies (workspaces imports jobs,
  not the reverse);
- regang: partial recovery's placement (a resumed gang keeps its healthy nodes at their ranks);
- capacity_load, scheduler_run, locks: the ledger read from the database, one scheduler run
  applied through jobs.actions and jobs.lifecycle, and the scheduler's lock.

May import jobs.models, jobs.actions, jobs.lifecycle, jobs.recovery and jobs.storage; never the
web layer.
"""
