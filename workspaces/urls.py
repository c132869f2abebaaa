from django.urls import path

from . import account_views, views

app_name = "workspaces"

urlpatterns = [
    path("workspaces/", views.workspace_list, name="list"),
    path("workspaces/create/", views.workspace_create, name="create"),
    path("workspaces/cancel/", views.workspace_bulk_cancel, name="bulk_cancel"),
    path("workspaces/<int:pk>/", views.workspace_detail, name="detail"),
    path("workspaces/<int:pk>/edit/", views.workspace_edit, name="edit"),
    path("workspaces/<int:pk>/cancel/", views.workspace_cancel, name="cancel"),
    path("usage/", account_views.usage, name="usage"),
    path("quotas/", account_views.quotas, name="quotas"),
]
