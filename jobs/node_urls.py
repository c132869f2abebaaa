from django.urls import path

from . import node_views

app_name = "nodes"

urlpatterns = [
    path("", node_views.node_list, name="list"),
    path("<int:pk>/", node_views.node_detail, name="detail"),
    path("<int:pk>/cordon/", node_views.node_cordon, name="cordon"),
]
