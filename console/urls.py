from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from monitoring.api import JobLogsView
from monitoring.metrics_api import JobMetricsView
from monitoring.views import download_logs

from . import token_views, views

urlpatterns = [
    path("", views.home, name="home"),
    path("favicon.ico", views.favicon, name="favicon"),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("account/token/", token_views.api_token, name="account-token"),
    path("", include("jobs.storage.urls")),  # /account/ and /api/v1/account/storage/
    path("jobs/", include("jobs.urls")),
    path("jobs/<int:pk>/logs/download/", download_logs, name="logs-download"),
    path("nodes/", include("jobs.nodes.urls")),
    path("dashboard/", include("monitoring.urls")),
    path("api/v1/training-jobs/<int:pk>/logs/", JobLogsView.as_view(), name="api-job-logs"),
    path("api/v1/training-jobs/<int:pk>/metrics/", JobMetricsView.as_view(), name="api-job-metrics"),
    path("api/v1/slurm/", include("jobs.slurm.urls")),  # the launch-key redemption (nodeagent.slurm_protocol)
    path("api/v1/", include("jobs.api.urls")),
    path("api/v1/", include("workspaces.api.urls")),
    path("", include("workspaces.urls")),  # /workspaces/, /usage/, /quotas/
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("admin/", admin.site.urls),
]

handler404 = "console.errors.page_not_found"
