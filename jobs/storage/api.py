"""REST: the caller's own storage space (endpoint, bucket, keys), and the rotation of its keys.

Only ever the caller's: there is no id in the path. Provisioned on first need (a user's first
visit makes their bucket and identity).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from console.lib.api_schema import ErrorSerializer

from . import iam
from .models import StorageSpace
from .spaces import ensure_space, rotate_keys

NO_STORAGE = "This console has no object storage (S3_ENDPOINT_URL), so there is no storage space."
UNAVAILABLE = "Object storage did not answer; try again in a moment."


class StorageSpaceSerializer(serializers.Serializer):
    endpoint_url = serializers.CharField(help_text="the S3 endpoint (any S3 client: aws cli, boto3)")
    bucket = serializers.CharField(help_text="your bucket: your keys reach only it")
    access_key = serializers.CharField()
    secret_key = serializers.CharField()
    rotated_at = serializers.DateTimeField(allow_null=True, help_text="when the keys were last rotated")


def _body(space: StorageSpace) -> dict[str, Any]:
    return {"endpoint_url": settings.S3_ENDPOINT_URL, "bucket": space.bucket, "access_key": space.access_key,
            "secret_key": space.secret_key, "rotated_at": space.rotated_at}


_ERRORS = {
    404: OpenApiResponse(ErrorSerializer, description="this console has no object storage"),
    503: OpenApiResponse(ErrorSerializer, description="object storage did not answer"),
}


class StorageSpaceView(APIView):
    @extend_schema(responses={200: StorageSpaceSerializer, **_ERRORS}, operation_id="account_storage_retrieve")
    def get(self, request: Request) -> Response:
        """Your storage space: endpoint, bucket and keys (only yours)."""
        return _answer(lambda: ensure_space(request.user.pk))


class RotateStorageKeysView(APIView):
    @extend_schema(request=None, responses={200: StorageSpaceSerializer, **_ERRORS}, operation_id="account_storage_rotate")
    def post(self, request: Request) -> Response:
        """Replace your keys: the old ones stop working at once. Answers the new ones."""
        return _answer(lambda: rotate_keys(request.user))


def _answer(get_space: Callable[[], StorageSpace]) -> Response:
    if not settings.S3_ENDPOINT_URL:
        return Response({"detail": NO_STORAGE}, status=status.HTTP_404_NOT_FOUND)
    try:
        space = get_space()
    except iam.StorageUnavailable:
        return Response({"detail": UNAVAILABLE}, status=status.HTTP_503_SERVICE_UNAVAILABLE)
    return Response(StorageSpaceSerializer(_body(space)).data)
