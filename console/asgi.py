"""ASGI entry point: HTTP through Django, WebSockets through Channels (served by daphne)."""

import asyncio
import os
from typing import Any

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
# Django must be set up before the consumers (and their models) are imported.
django_asgi_app = get_asgi_application()

from django.conf import settings  # noqa: E402

if settings.SERVE_STATIC:
    # a self-hosted console serves its own few static files; no separate web server needed
    from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

    django_asgi_app = ASGIStaticFilesHandler(django_asgi_app)

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.urls import path  # noqa: E402

from console.lib import live  # noqa: E402
from jobs.channel.consumer import AgentConsumer  # noqa: E402
from jobs.routing import websocket_urlpatterns as job_routes  # noqa: E402
from jobs.slurm.consumer import SlurmStepConsumer  # noqa: E402
from monitoring.routing import websocket_urlpatterns as log_routes  # noqa: E402
from nodeagent.protocol import AGENT_PATH  # noqa: E402
from nodeagent.slurm_protocol import STEP_PATH  # noqa: E402

# Browsers authenticate with their session (and must come from an allowed origin);
# agents send no Origin and authenticate with their bearer token inside AgentConsumer.
browsers = AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(job_routes + log_routes)))
agents = URLRouter([path(AGENT_PATH.strip("/") + "/", AgentConsumer.as_asgi())])
# Slurm step launchers: like agents, no Origin; a run's bearer token checked in the consumer
slurm_steps = URLRouter([path(STEP_PATH.strip("/") + "/", SlurmStepConsumer.as_asgi())])


async def websocket_router(scope: dict[str, Any], receive: Any, send: Any) -> Any:
    live.attach(asyncio.get_running_loop())  # worker threads publish live events through this loop
    if scope["path"] == AGENT_PATH:
        return await agents(scope, receive, send)
    if scope["path"] == STEP_PATH:
        return await slurm_steps(scope, receive, send)
    return await browsers(scope, receive, send)


application = ProtocolTypeRouter({
    "http": django_asgi_app,
    "websocket": websocket_router,
})
