"""The agent channel: the node agents' WebSocket and what the console does with their messages.

- consumer: the agents' WebSocket consumer (web layer; console.asgi routes it);
- socket, db: frame checks, acknowledgements and the database threads behind the socket;
- inbox, gather, writes: reports stored in batches (one transaction for many nodes), and the
  checks of where an agent may write;
- heartbeats, clock_offset: the heartbeat book and each agent's clock offset;
- notify, node_sync: telling agents (and the scheduler) that desired state changed;
- placement_reports: plain rules over a placement's reported states (no Django).

May import jobs.models, jobs.lifecycle, jobs.nodes.registry, monitoring's ingest and
nodeagent.protocol; nothing outside the web layer imports `consumer`.
"""
