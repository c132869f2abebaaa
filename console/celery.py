"""The Celery application: broker from the settings, tasks discovered in every app."""

import os

from celery import Celery
from celery.signals import worker_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

app = Celery("console")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_init.connect
def _short_collector_pauses(**kwargs: object) -> None:
    # a scheduler run's thousands of rows are the same kind of burst as an agents' wave
    from console.collector import prepare_for_serving

    prepare_for_serving()
