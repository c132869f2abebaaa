from django.urls import path

from . import views

urlpatterns = [
    path("runs/", views.redeem_run, name="slurm-redeem-run"),
]
