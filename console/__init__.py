"""The Django project of the Simple AI Training console."""

from .celery import app as celery_app

__all__ = ["celery_app"]
