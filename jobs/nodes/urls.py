from django.urls import path

from . import views

app_name = "nodes"

urlpatterns = [
    path("", views.node_list, name="list"),
    path("<int:pk>/", views.node_detail, name="detail"),
    path("<int:pk>/cordon/", views.node_cordon, name="cordon"),
    path("<int:pk>/inject-fault/", views.node_inject_fault, name="inject"),
    path("<int:pk>/reclaim/", views.node_reclaim, name="reclaim"),
]
