from django.urls import path

from . import node_views

app_name = "nodes"

urlpatterns = [
    path("", node_views.node_list, name="list"),
    path("<int:pk>/", node_views.node_detail, name="detail"),
    path("<int:pk>/cordon/", node_views.node_cordon, name="cordon"),
    path("<int:pk>/inject-fault/", node_views.node_inject_fault, name="inject"),
    path("<int:pk>/reclaim/", node_views.node_reclaim, name="reclaim"),
]
