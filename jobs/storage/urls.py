from django.urls import path

from . import api, views

urlpatterns = [
    path("account/", views.account, name="account"),
    path("account/storage/rotate/", views.rotate, name="account-storage-rotate"),
    path("account/storage/upload/", views.upload, name="account-storage-upload"),
    path("api/v1/account/storage/", api.StorageSpaceView.as_view(), name="api-account-storage"),
    path("api/v1/account/storage/rotate/", api.RotateStorageKeysView.as_view(), name="api-account-storage-rotate"),
]
