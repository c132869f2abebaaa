"""The local SeaweedFS answers other processes only on its S3 port (console.services.seaweed_security).

Against the suite's real store: what a job on the machine would try — the filer's, master's and
volume server's HTTP APIs and every gRPC port, without the store's certificate — is refused, and
an object put through the S3 gateway is still there, whole, afterwards.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import stat
import subprocess
import urllib.error
import urllib.request

import pytest

BUCKET = "isolation-probe"
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # + an empty SETTINGS frame


@pytest.fixture(scope="module")
def stored(object_store) -> tuple[str, bytes]:
    """An object put through the S3 gateway, as a tenant's would be."""
    client = object_store.client()
    with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
        client.create_bucket(Bucket=BUCKET)
    client.put_object(Bucket=BUCKET, Key="secret.txt", Body=b"a tenant's data")
    return "secret.txt", b"a tenant's data"


def plain_http(port: int, method: str, path: str, body: bytes | None = None) -> str:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method=method)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return f"{response.status} {response.read()[:80]!r}"
    except urllib.error.HTTPError as error:
        return f"{error.code} {error.read()[:80]!r}"
    except OSError as error:
        return f"refused ({error})"


def tls_without_certificate(port: int, payload: bytes) -> str:
    """A TLS client that trusts the store's CA but has no certificate of its own sends `payload`."""
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, context.wrap_socket(raw) as sock:
            sock.sendall(payload)
            return f"answered {sock.recv(100)[:60]!r}"
    except OSError as error:  # ssl.SSLError too
        return f"refused ({error})"


def assert_refused(answer: str) -> None:
    assert answer.startswith(("400 b'Client sent an HTTP request to an HTTPS server", "refused")), answer


def assert_still_there(object_store, stored) -> None:
    key, body = stored
    assert object_store.client().get_object(Bucket=BUCKET, Key=key)["Body"].read() == body


@pytest.mark.parametrize(("method", "path", "body"), [
    ("GET", f"/buckets/{BUCKET}/secret.txt", None),
    ("GET", f"/buckets/{BUCKET}/", None),
    ("PUT", f"/buckets/{BUCKET}/planted.txt", b"planted"),
    ("DELETE", f"/buckets/{BUCKET}/secret.txt", None),
], ids=["read", "list", "write", "delete"])
def test_the_filer_takes_no_request_without_the_stores_certificate(object_store, stored, method, path, body):
    port = object_store.ports["filer"]
    assert_refused(plain_http(port, method, path, body))
    assert_refused(tls_without_certificate(port, f"{method} {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode()))
    assert_still_there(object_store, stored)
    assert [o["Key"] for o in object_store.client().list_objects_v2(Bucket=BUCKET)["Contents"]] == ["secret.txt"]


@pytest.mark.parametrize("path", [
    f"/col/delete?collection={BUCKET}", "/dir/assign", "/vol/grow?count=1", "/dir/status",
], ids=["delete-a-buckets-volumes", "assign", "grow", "status"])
def test_the_master_takes_no_request_without_the_stores_certificate(object_store, stored, path):
    port = object_store.ports["master"]
    assert_refused(plain_http(port, "GET", path))
    assert_refused(tls_without_certificate(port, f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode()))
    assert_still_there(object_store, stored)


def test_the_volume_server_takes_no_request_without_the_stores_certificate(object_store, stored):
    port = object_store.ports["volume"]
    for method, path in (("GET", "/status"), ("GET", "/1,01637037d6"), ("POST", "/1,01637037d6")):
        assert_refused(plain_http(port, method, path, b"x" if method == "POST" else None))
        assert_refused(tls_without_certificate(port, f"{method} {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode()))


@pytest.mark.parametrize("part", ["master_grpc", "volume_grpc", "filer_grpc", "s3_grpc"])
def test_no_grpc_port_takes_a_connection_without_the_stores_certificate(object_store, part):
    port = object_store.ports[part]
    answer = tls_without_certificate(port, H2_PREFACE)
    assert answer.startswith("refused") and "CERTIFICATE_REQUIRED" in answer, answer
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:  # gRPC in the clear
        sock.sendall(H2_PREFACE)
        assert sock.recv(100) == b""  # closed without a frame


def test_the_certificate_alone_does_not_open_the_filer_its_signed_tokens_are_needed_too(object_store, stored):
    security = object_store.security
    context = ssl.create_default_context(cafile=str(security.ca))
    context.load_cert_chain(str(security.cert), str(security.key))
    request = urllib.request.Request(f"https://127.0.0.1:{object_store.ports['filer']}/buckets/{BUCKET}/secret.txt")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=5, context=context)
    assert refused.value.code == 401


def test_the_s3_gateway_and_an_admin_tool_with_the_stores_configuration_still_work(object_store, stored):
    client = object_store.client()
    client.put_object(Bucket=BUCKET, Key="through-s3.txt", Body=b"fine")
    assert client.get_object(Bucket=BUCKET, Key="through-s3.txt")["Body"].read() == b"fine"
    client.delete_object(Bucket=BUCKET, Key="through-s3.txt")
    ports = object_store.ports
    shell = subprocess.run(
        object_store.weed_command("shell", f"-master=127.0.0.1:{ports['master']}.{ports['master_grpc']}",
                                  f"-filer=127.0.0.1:{ports['filer']}.{ports['filer_grpc']}"),
        input=f"fs.ls /buckets/{BUCKET}\nexit\n", capture_output=True, text=True, timeout=60,
    )
    assert shell.returncode == 0 and "secret.txt" in shell.stdout, shell.stderr


def test_the_stores_keys_files_and_data_are_its_users_only(object_store):
    security = object_store.security
    assert stat.S_IMODE(security.config_dir.stat().st_mode) == 0o700
    for path in (security.key, security.config_dir / "security.toml", object_store.data_dir / "s3.json"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert stat.S_IMODE(object_store.data_dir.stat().st_mode) == 0o700  # the volumes hold every object's bytes
