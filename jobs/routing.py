from django.urls import path

from .consumers import JobConsumer, JobListConsumer

websocket_urlpatterns = [
    path("ws/jobs/", JobListConsumer.as_asgi()),
    path("ws/jobs/<int:job_id>/", JobConsumer.as_asgi()),
]
