from django.urls import path

from . import views

app_name = "jobs"

urlpatterns = [
    path("", views.job_list, name="list"),
    path("rows/", views.job_list_rows, name="list_rows"),
    path("create/", views.job_create, name="create"),
    path("delete/", views.job_bulk_delete, name="bulk_delete"),
    path("<int:pk>/", views.job_detail, name="detail"),
    path("<int:pk>/tags/", views.job_tags, name="tags"),
    path("<int:pk>/delete/", views.job_delete, name="delete"),
]
