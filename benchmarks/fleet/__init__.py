"""A fleet of simulated nodes against one console. Prints figures; asserts nothing.

Run: `.venv/bin/python -m benchmarks.fleet [--nodes 1000] [--jobs 1000] [--backlog 5000] [--job-seconds 10]`
(`--quick`: the same fleet, 200 jobs, a backlog of 1,000, 30 s idle).
A real console (daphne, one Celery worker, beat) on a throw-away PostgreSQL database and Redis
db 9 (apart from the test workers' 14, 13, …), and `--nodes` simulated agents spread over
`--fleet-processes` processes (4), each with its own event loop: each agent speaks the real protocol over its
own WebSocket with its own node token (nodeagent.connection.Connection, nodeagent.spool.Spool,
unchanged; the spool skips fsync, as a thousand agents share this one disk). An agent "runs" a
placement by reporting it preparing and running, printing two lines, and exiting 0 after the
seconds its command sleeps. Three phases:

1. connect: agents connect at `--connect-rate` per second; hello → welcome times;
2. idle: `--idle-seconds` of heartbeats only: the console's CPU and memory;
3. jobs while capacity is free: `--jobs` jobs (1–2 nodes × 1–8 GPUs, `sleep --job-seconds`)
   created through the REST API by `--clients` users as fast as the API takes them: created →
   Running and agent message → ack while nothing has to wait;
4. a backlog: `--backlog` more jobs created while staff have every node cordoned, then every node
   uncordoned at once, as when a sweep is submitted faster than any API can place it one by one
   (on 2 cores the API takes ~15 jobs/s, far fewer than a thousand nodes finish): how busy the
   fleet's GPUs stay while jobs wait — held by placements as the console sees them, and running
   a command as the agents see it (a GPU whose exit the console has not yet processed is held
   but idle) — completions per minute against the ideal; `--kill` agents
   are killed during the drain (sockets dropped, no more heartbeats): how long until each is
   declared Lost under that load.

Throughout: connected and Lost nodes every 5 s, the heartbeat processing lag (when the console
stored a node's newest heartbeat minus when the agent sent it), created → Running, agent
message → ack, completions per minute against the ideal, how busy the fleet's GPUs are, the CPU
of the console, this fleet, PostgreSQL and Redis, and the scheduler's and the watchdog's runs
(from the worker's log). `--console-tree PATH` runs the console from another
checkout (e.g. an older commit) with this process's Python, for a before/after side by side.

The package: `server` starts the console under test and reads its logs, `agents` is the simulated
fleet (its processes and what they measure), `probe` what is measured from outside (the database,
the machine's CPU), `run` the phases, `__main__` the options.
"""
