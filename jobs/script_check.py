"""Can the job's training script be read? Asked of object storage when a job is created.

One function, called by the creation form and by the API serializer alike, so both refuse a
script URL that names nothing (or nothing the console's credentials can read) with the same
message, instead of accepting the job and letting it fail on the node.
"""

from __future__ import annotations

from django.conf import settings

from nodeagent.storage import parse_s3_url

# a form post must not hang on a storage endpoint that does not answer
CONNECT_TIMEOUT = 3
READ_TIMEOUT = 5

NOT_CONFIGURED_MESSAGE = (
    "No object storage is configured on this console (S3_ENDPOINT_URL), so the training script "
    "cannot be read: configure it, or leave the script URL empty."
)


def _client():
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3", endpoint_url=settings.S3_ENDPOINT_URL, aws_access_key_id=settings.S3_ACCESS_KEY,
        aws_secret_access_key=settings.S3_SECRET_KEY, region_name="us-east-1",
        config=Config(connect_timeout=CONNECT_TIMEOUT, read_timeout=READ_TIMEOUT, retries={"max_attempts": 1}),
    )


def _code(exc: Exception) -> str:
    response = getattr(exc, "response", None)
    return str(response.get("Error", {}).get("Code", "")) if isinstance(response, dict) else ""


def script_object_error(url: str) -> str | None:
    """None when `url` (already a well-formed s3:// URL) names an object the console can read.

    HEAD needs the same permission as a download (s3:GetObject), so an object the console's
    credentials may not read is refused here too; the agents get the same credentials.
    """
    if not settings.S3_ENDPOINT_URL:
        return NOT_CONFIGURED_MESSAGE
    bucket, key = parse_s3_url(url)
    client = _client()
    try:
        client.head_object(Bucket=bucket, Key=key)
        return None
    except Exception as exc:  # botocore ClientError, EndpointConnectionError, timeouts
        code = _code(exc)
        if code in ("403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
            return f"The console's object storage credentials cannot read {url} (access denied)."
        if code in ("404", "NoSuchKey", "NoSuchBucket"):
            return _missing(client, bucket, url)
        return (
            f"Object storage at {settings.S3_ENDPOINT_URL} did not answer, so {url} could not be "
            "checked; try again in a moment."
        )


def _missing(client, bucket: str, url: str) -> str:
    """HEAD answers a bare 404 for a missing key and for a missing bucket alike: ask which."""
    try:
        client.head_bucket(Bucket=bucket)
    except Exception as exc:
        if _code(exc) in ("404", "NoSuchBucket"):
            return f"There is no bucket {bucket} in object storage: create it and upload the script, or correct the URL."
    return f"There is no object at {url}: upload the training script first (e.g. aws s3 cp train.py {url}), or correct the URL."
