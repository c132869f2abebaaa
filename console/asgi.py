"""ASGI entry point: HTTP through Django, WebSockets through Channels (served by daphne)."""

import os

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

from jobs.routing import websocket_urlpatterns as job_routes  # noqa: E402

application = ProtocolTypeRouter({
    "http": django_asgi_app,
    "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(job_routes))),
})
