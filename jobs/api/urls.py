from rest_framework.routers import DefaultRouter

from .views import ServerTypeViewSet, TrainingJobViewSet

router = DefaultRouter()
router.register("training-jobs", TrainingJobViewSet, basename="training-job")
router.register("server-types", ServerTypeViewSet, basename="server-type")

urlpatterns = router.urls
