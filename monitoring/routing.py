from django.urls import path

from .consumers import JobLogsConsumer

websocket_urlpatterns = [
    path("ws/jobs/<int:job_id>/logs/", JobLogsConsumer.as_asgi()),
]
