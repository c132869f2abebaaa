"""What `simpleai run --workdir` asks of S3 on every run, over the standard library: is this
object there (HEAD), what is under this prefix (ListObjectsV2), and a project's tarball sent
while it is being packed (`MultipartUpload`: parts of 8 MiB, two in flight, one PUT when it is
smaller), signed with AWS Signature Version 4. So a run never pays for importing boto3 (about
0.4 s of CPU) for its project; inputs of any size and downloads use boto3 (multipart, retries).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
UNSIGNED = "UNSIGNED-PAYLOAD"
REGION = "us-east-1"
NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"
PART = 8 * 1024 * 1024  # a multipart upload's part (S3's least is 5 MiB)


class S3Error(Exception):
    """An S3 error answer (`code`: AccessDenied, NoSuchBucket, …, or the HTTP status) or no answer."""

    def __init__(self, status: int | None, code: str, message: str = "") -> None:
        super().__init__(message or code)
        self.status, self.code = status, code


@dataclass(frozen=True)
class LightS3:
    endpoint_url: str
    access_key: str
    secret_key: str
    timeout: float = 30.0

    def head(self, bucket: str, key: str) -> bool:
        """Whether the object exists (404: no; any other refusal raises S3Error)."""
        try:
            self._request("HEAD", f"/{bucket}/{key}", {})
        except S3Error as error:
            if error.status == 404:
                return False
            raise
        return True

    def list(self, bucket: str, prefix: str, page: int = 1000) -> dict[str, int]:
        """Every key under `prefix` with its size (all pages, `page` keys each)."""
        found: dict[str, int] = {}
        token = ""
        while True:
            query = {"list-type": "2", "prefix": prefix, "max-keys": str(page),
                     **({"continuation-token": token} if token else {})}
            root = ElementTree.fromstring(self._request("GET", f"/{bucket}", query))
            for item in root.iter(f"{NS}Contents"):
                found[item.findtext(f"{NS}Key", "")] = int(item.findtext(f"{NS}Size", "0"))
            token = root.findtext(f"{NS}NextContinuationToken", "")
            if root.findtext(f"{NS}IsTruncated", "false") != "true" or not token:
                return found

    def put_bytes(self, bucket: str, key: str, data: bytes, query: dict[str, str] | None = None) -> str:
        """One PUT of `data` (an object, or a part with `query`); the answer's ETag."""
        return self._request("PUT", f"/{bucket}/{key}", query or {}, body=data, payload=UNSIGNED,
                             extra={"content-length": str(len(data))}, header="etag").decode()

    def _request(self, method: str, path: str, query: dict[str, str], body: object = None, payload: str = EMPTY_SHA256,
                 extra: dict[str, str] | None = None, header: str = "") -> bytes:
        base = urllib.parse.urlsplit(self.endpoint_url)
        uri = urllib.parse.quote(base.path.rstrip("/") + path, safe="/-_.~")
        canonical_query = "&".join(f"{_quote(k)}={_quote(v)}" for k, v in sorted(query.items()))
        now = datetime.now(tz=UTC)
        amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
        headers = {"host": base.netloc, "x-amz-content-sha256": payload, "x-amz-date": amz_date, **(extra or {})}
        signed = ";".join(sorted(headers))
        canonical = "\n".join([method, uri, canonical_query, *(f"{k}:{headers[k]}" for k in sorted(headers)), "",
                               signed, payload])
        scope = f"{day}/{REGION}/s3/aws4_request"
        to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
        key = f"AWS4{self.secret_key}".encode()
        for part in (day, REGION, "s3", "aws4_request"):
            key = hmac.new(key, part.encode(), hashlib.sha256).digest()
        signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
        headers["authorization"] = (f"AWS4-HMAC-SHA256 Credential={self.access_key}/{scope}, "
                                    f"SignedHeaders={signed}, Signature={signature}")
        url = f"{base.scheme}://{base.netloc}{uri}" + (f"?{canonical_query}" if canonical_query else "")
        request = urllib.request.Request(url, data=body, method=method, headers=headers)  # type: ignore[arg-type]
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                answer = bytes(response.read())
                return str(response.headers.get(header, "")).encode() if header else answer
        except urllib.error.HTTPError as error:
            raise S3Error(error.code, _error_code(error.read()) or str(error.code)) from None
        except (urllib.error.URLError, OSError) as error:
            raise S3Error(None, "", str(getattr(error, "reason", None) or error)) from None


class MultipartUpload:
    """A write-only file whose bytes become the object `key`: sent in parts while they are written
    (at most `in_flight` parts pending), completed by `close`, or dropped by `abort`. A body that
    stays under one part is sent by one PUT at `close`; nothing exists under `key` before then."""

    def __init__(self, s3: LightS3, bucket: str, key: str, part: int = PART, in_flight: int = 2,
                 on_sent: Callable[[int], None] | None = None) -> None:
        self.s3, self.bucket, self.key, self.part, self.on_sent = s3, bucket, key, part, on_sent
        self.buffer, self.upload_id, self.parts = bytearray(), "", list[tuple[int, Future[str]]]()
        self.pool = ThreadPoolExecutor(in_flight, thread_name_prefix="simpleai-upload")
        self.in_flight, self.closed = in_flight, False

    def write(self, data: bytes) -> int:
        self.buffer += data
        while len(self.buffer) >= self.part:
            self._send(bytes(self.buffer[:self.part]))
            del self.buffer[:self.part]
        return len(data)

    def _send(self, data: bytes) -> None:
        if not self.upload_id:
            root = ElementTree.fromstring(self.s3._request("POST", f"/{self.bucket}/{self.key}", {"uploads": ""}))
            self.upload_id = root.findtext(f"{NS}UploadId", "") or root.findtext("UploadId", "")
        number = len(self.parts) + 1
        self.parts.append((number, self.pool.submit(self._put_part, number, data)))
        pending = [future for _, future in self.parts if not future.done()]
        if len(pending) >= self.in_flight:
            pending[0].result()  # back-pressure: the packer waits for the network, not the reverse

    def _put_part(self, number: int, data: bytes) -> str:
        etag = self.s3.put_bytes(self.bucket, self.key, data, {"partNumber": str(number), "uploadId": self.upload_id})
        if self.on_sent:
            self.on_sent(len(data))
        return etag

    def close(self) -> None:
        """Send what is left and make the object (raises S3Error; then call `abort`)."""
        if self.closed:
            return
        self.closed = True
        if not self.upload_id:
            self.s3.put_bytes(self.bucket, self.key, bytes(self.buffer))
            if self.on_sent:
                self.on_sent(len(self.buffer))
        else:
            if self.buffer:
                self._send(bytes(self.buffer))
            done = "".join(f"<Part><PartNumber>{number}</PartNumber><ETag>{future.result()}</ETag></Part>"
                           for number, future in self.parts)
            body = f"<CompleteMultipartUpload>{done}</CompleteMultipartUpload>".encode()
            self.s3._request("POST", f"/{self.bucket}/{self.key}", {"uploadId": self.upload_id}, body=body,
                             payload=hashlib.sha256(body).hexdigest(), extra={"content-length": str(len(body))})
        self.buffer.clear()
        self.pool.shutdown()

    def abort(self) -> None:
        """Nothing of this upload stays in the bucket (best effort)."""
        self.closed = True
        self.pool.shutdown(cancel_futures=True)
        if self.upload_id:
            with contextlib.suppress(S3Error):
                self.s3._request("DELETE", f"/{self.bucket}/{self.key}", {"uploadId": self.upload_id})


def _quote(text: str) -> str:
    return urllib.parse.quote(text, safe="-_.~")


def _error_code(body: bytes) -> str:
    try:
        return ElementTree.fromstring(body).findtext("Code", "") if body else ""
    except ElementTree.ParseError:
        return ""
