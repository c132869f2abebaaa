"""What happens when an attempt fails: the fault verdict, failover and spot fallback, and what
the interruptions cost (goodput).

- faults, spot_fallback, goodput: plain rules and arithmetic (no Django);
- failover: assessments and decisions applied to jobs (through jobs.actions);
- goodput_load: a job's attempts read for jobs.recovery.goodput.

May import jobs.models, jobs.actions, jobs.console_log, jobs.channel.notify and
jobs.environments.preparation; the scheduler and the agent channel call it.
"""
