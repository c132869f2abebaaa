from rest_framework.routers import DefaultRouter

from ..nodes.api import NodeViewSet
from .views import ServerTypeViewSet, TrainingJobViewSet

router = DefaultRouter()
router.register("training-jobs", TrainingJobViewSet, basename="training-job")
router.register("server-types", ServerTypeViewSet, basename="server-type")
router.register("nodes", NodeViewSet, basename="node")

urlpatterns = router.urls
