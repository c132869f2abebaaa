from django.apps import AppConfig
from django.core.signals import request_finished


class ConsoleConfig(AppConfig):
    name = "console"
    verbose_name = "Console"

    def ready(self) -> None:
        from .request_connections import close_after_asgi_request

        request_finished.connect(close_after_asgi_request, dispatch_uid="console.close_after_asgi_request")
