"""A request served over ASGI closes its database connections when it ends.

Django runs each ASGI request's synchronous code on a thread of the request's own
(asgiref's ThreadSensitiveContext), so a request's connection can never serve another request:
kept open for CONN_MAX_AGE, it stayed behind in the storage of a thread that was gone, and only
the garbage collector closed it. With the collector's young passes less frequent, a burst of
API requests (the fleet benchmark's backlog) left PostgreSQL "sorry, too many clients already".
Closed here, a finished request holds no connection whatever the collector does. Threads that
live on (the agents' store, the heartbeat book, Celery's) keep theirs for CONN_MAX_AGE.
"""

from __future__ import annotations

from typing import Any

from django.core.handlers.asgi import ASGIHandler
from django.db import connections


def close_after_asgi_request(sender: Any, **kwargs: Any) -> None:
    """`request_finished` receiver: runs on the request's own thread (Django sends it from
    `response.close()` there), so these are that request's connections."""
    if isinstance(sender, type) and issubclass(sender, ASGIHandler):
        connections.close_all()
