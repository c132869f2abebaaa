"""A hostile tenant on a shared node, on both runtimes: every way out it tries is refused.

Two users of a console that runs as `make run` runs it (`secured_stack`: PostgreSQL and Redis
that require passwords no job holds, SeaweedFS behind its gateway) share one node. Alice's job
holds a secret (in its working directory, OUTPUT_DIR, her File Storage share and its command
line) and sleeps. Bob's job runs scripts/hostile_probe.py, which tries every escape of issue 32
and prints REFUSED or ESCAPED per check; the test adds what only Bob himself, off the node, can
try (another tenant's script URL and a system mount path through the API, his job's keys after
its attempt ended) and what the probe cannot judge (the console's secrets and Alice's anywhere
in what it printed). Zero escapes; the suite prints "escapes tried N / refused N".

Known limits, accepted and documented (docs/notes-hostile.md): the network is the node's (host
networking for NCCL), so a job reaches every port on the node and decides nothing by address.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import boto3
import psutil
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from django.conf import settings

from jobs.tests.storage import forget_identities
from nodeagent.fileshare import tenant_share
from nodeagent.jobusers import IdentityPool

from ..machine import unavailable
from .stack import ROOT, wait_until

pytestmark = [pytest.mark.slow]

SCRIPTS = Path(__file__).parent / "scripts"


def probe_script() -> str:
    """The probe as the one script its job runs: its two halves, in order (scripts/hostile_probe.py)."""
    return "\n\n".join((SCRIPTS / name).read_text() for name in ("hostile_probe.py", "hostile_probe_network.py"))


PROCESS_IMAGE = "127.0.0.1:5055/team/trainer:1"  # the process runtime ignores it

# The victim: its secret on its command line, in its working directory, OUTPUT_DIR and share.
VICTIM = """
import os, sys, time
secret = sys.argv[1]
for path in ("secret.txt", os.path.join(os.environ["OUTPUT_DIR"], "secret.txt"), "/mnt/alice/secret.txt"):
    with open(path, "w") as handle:
        handle.write(secret)
print("VICTIM-READY", flush=True)
time.sleep(240)
"""

# Run once in a `manage.py shell` on the secured console: two users, their spaces (the scripts
# uploaded with each one's own keys), Bob's API token and Alice's victim job.
SETUP = """
import json, os
import boto3
from django.contrib.auth import get_user_model
from rest_framework.authtoken.models import Token
from jobs import actions
from jobs.storage.spaces import ensure_space
from jobs.tests.factories import job_fields

p = json.loads(os.environ["HOSTILE"])
users = get_user_model().objects
alice, bob = users.create_user(p["prefix"] + "alice"), users.create_user(p["prefix"] + "bob")

def upload(user, key, body):
    space = ensure_space(user.pk)
    boto3.client("s3", endpoint_url=os.environ["S3_ENDPOINT_URL"], aws_access_key_id=space.access_key,
                 aws_secret_access_key=space.secret_key, region_name="us-east-1").put_object(Bucket=space.bucket, Key=key, Body=body)
    return space.bucket

alice_bucket = upload(alice, "uploads/victim.py", p["victim"].encode())
bob_bucket = upload(bob, "uploads/hostile_probe.py", p["probe"].encode())
image = p["image"]
password = image.pop("registry_password", "")
victim = actions.create_job(alice, job_fields(
    name="victim", command="python victim.py " + p["secret"], script_url=f"s3://{alice_bucket}/uploads/victim.py",
    volume_mount_path="/mnt/alice", shm_size_gb=8, **image), [], password)
print("HOSTILE " + json.dumps({"alice": alice.pk, "bob": bob.pk, "alice_bucket": alice_bucket, "bob_bucket": bob_bucket,
                               "victim": victim.pk, "bob_token": Token.objects.create(user=bob).key,
                               "alice_storage_secret": ensure_space(alice.pk).secret_key}))
"""


class Tally:
    """Every check, the probe's and the test's own: name → (escaped, detail)."""

    def __init__(self) -> None:
        self.checks: dict[str, tuple[bool, str]] = {}

    def add(self, name: str, escaped: bool, detail: str) -> None:
        self.checks[name] = (escaped, detail)

    def escapes(self) -> dict[str, str]:
        return {name: detail for name, (escaped, detail) in self.checks.items() if escaped}

    def summary(self) -> str:
        tried = len(self.checks)
        return f"escapes tried {tried} / refused {tried - len(self.escapes())}"


def _api(url: str, token: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Authorization": f"Token {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def _job_body(name: str, command: str, script_url: str, image: dict, **extra) -> dict:
    return {"name": name, "learning_type": "on_demand", "framework": "pytorch", "server_type": "g2",
            "gpus_per_node": 1, "memory_gb": 256, "node_count": 1, "shm_size_gb": 8, "script_url": script_url,
            "command": command, **image, **extra}


def _refused_on_field(tally: Tally, name: str, answer: tuple[int, dict], field: str) -> None:
    status, body = answer
    tally.add(name, not (status == 400 and field in body), f"{status} {json.dumps(body)[:200]}")


def _lines(services, job_id: int) -> list[str]:
    return [text for (text,) in services.sql(
        "SELECT text FROM monitoring_logline WHERE job_id = %s ORDER BY attempt, seq", (job_id,))]


def _status(services, job_id: int) -> str:
    return services.sql("SELECT status FROM jobs_trainingjob WHERE id = %s", (job_id,))[0][0]


def _processes_with(*words: str) -> list[int]:
    """The node's processes whose command line holds every one of `words`."""
    return [proc.pid for proc in psutil.process_iter(["cmdline"])
            if all(word in " ".join(proc.info["cmdline"] or []) for word in words)]


def _victim_pid(marker: str) -> int:
    return next(iter(_processes_with(marker, "victim.py")), 0)


def _sentinel(directory: str) -> Path:
    handle, name = tempfile.mkstemp(prefix="simpleai-hostile-", dir=directory)
    os.write(handle, b"the node's own file\n")
    os.close(handle)
    os.chmod(name, 0o644)
    return Path(name)


def _objects(object_store, bucket: str, prefix: str) -> dict[str, bytes]:
    """Every object under `prefix` (read with the console's own keys)."""
    client = object_store.client()
    keys = [item["Key"] for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
            for item in page.get("Contents", [])]
    return {key: client.get_object(Bucket=bucket, Key=key)["Body"].read() for key in keys}


def _keys_refused(endpoint: str, keys: dict, bucket: str) -> bool:
    client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=keys["access_key"],
                          aws_secret_access_key=keys["secret_key"], region_name="us-east-1",
                          config=Config(retries={"max_attempts": 1}))
    try:
        client.list_objects_v2(Bucket=bucket)
    except ClientError as error:
        return error.response["Error"]["Code"] in ("InvalidAccessKeyId", "AccessDenied")
    return False


@dataclass
class HostileNode:
    """One node's places as a real node has them: its state under /var/lib (0755, as /var/lib
    is: the modes the agent gives its own paths are what keep a job out), its token in a
    root-only file; and the node's own files a job must not find (in /tmp, /dev/shm, and a
    directory a job names as its mount path)."""

    root: Path
    host_dir: Path
    sentinels: list[Path]

    @property
    def work_dir(self) -> Path:
        return self.root / "work"

    @property
    def file_storage(self) -> Path:
        return self.root / "file-storage"

    @property
    def token_file(self) -> Path:
        return self.root / "token"

    def workdir_of(self, job_id: int) -> Path:
        return self.work_dir / "jobs" / str(job_id) / "attempt-1" / "master"

    def agent_args(self, runtime) -> tuple[str, ...]:
        return ("--token-file", str(self.token_file), "--work-dir", str(self.work_dir), "--file-storage-root",
                str(self.file_storage), *(("--runtime", "docker") if runtime.host else ()))


@pytest.fixture
def hostile_node() -> HostileNode:
    if os.geteuid() != 0:
        unavailable("the hostile-tenant suite needs root: its agents sandbox jobs as other users (run it as CI does)")
    root = Path(tempfile.mkdtemp(prefix="simpleai-hostile-", dir="/var/lib"))
    root.chmod(0o755)
    host_dir = Path("/srv") / f"simpleai-hostile-{secrets.token_hex(4)}"
    host_dir.mkdir(parents=True)
    _sentinel(str(host_dir))
    node = HostileNode(root, host_dir, [_sentinel("/tmp"), _sentinel("/dev/shm")])
    yield node
    for sentinel in node.sentinels:
        sentinel.unlink(missing_ok=True)
    shutil.rmtree(host_dir, ignore_errors=True)
    shutil.rmtree(root, ignore_errors=True)


def _targets(node: HostileNode, runtime, stack, services, object_store, ids: dict, victim_pid: int, agent_pid: int) -> dict:
    """What Bob's job knows or could find out on the node; nothing in it is a secret."""
    database, redis = urlsplit(services.database_url), urlsplit(services.redis_url)
    socket_dir, pg_port = parse_qs(database.query)["host"][0], int(parse_qs(database.query)["port"][0])
    return {
        "victim_pid": victim_pid, "agent_pid": agent_pid, "victim_job": ids["victim"], "victim_owner": ids["alice"],
        "agent_work_dir": str(node.work_dir), "victim_workdir": str(node.workdir_of(ids["victim"])),
        "victim_bucket": ids["alice_bucket"], "victim_object": "uploads/victim.py",
        "console_bucket": "simpleai-results", "console_access_key_id": object_store.access_key,
        # SECRET_KEY's file in the checkout (and in the one whose venv the agent runs), the store's keys, the services' passwords
        "console_files": [str(ROOT / ".secret_key"), str(Path(sys.prefix).resolve().parent / ".secret_key"),
                          str(object_store.data_dir / "s3.json"),
                          *(str(p) for p in services.run_dir.rglob("*") if p.is_file())][:14],
        "token_file": str(node.token_file), "uid_lock_dir": "/run/simpleai-agent/uids", "env_cache": str(stack.env_cache),
        "file_storage_root": str(node.file_storage), "victim_share": str(node.file_storage / str(ids["alice"])),
        "mount_path": str(node.host_dir), "share_names": ["bobs-notes.txt", "hostile-targets.json"],
        "tmp_sentinel": str(node.sentinels[0]), "shm_sentinel": str(node.sentinels[1]),
        "engine_sockets": [*([str(runtime.host.socket)] if runtime.host else []), "/var/run/docker.sock", "/run/podman/podman.sock"],
        "s3_endpoint": object_store.endpoint, "console_url": stack.url,
        "seaweed_ports": {"master": [object_store.ports["master"], "/dir/status"], "volume": [object_store.ports["volume"], "/status"],
                          "filer": [object_store.ports["filer"], "/buckets/"]},
        "postgres": [[socket_dir, pg_port]], "redis": [[redis.hostname, redis.port]],
    }


def _judge_what_it_left(tally: Tally, lines: list[str], secrets_: dict[str, str], object_store, bucket: str, probe: int) -> None:
    """What the probe printed, the results the agent uploaded for it, and the processes it left."""
    printed = "\n".join(lines)
    for name, value in secrets_.items():
        tally.add(f"leak-{name.replace(' ', '-')}", value in printed, f"{name} {'found' if value in printed else 'absent'}")
    # the links it left in OUTPUT_DIR: the agent uploads it as root, in the node's view
    assert any(line.startswith("LINKS ") for line in lines), lines[-30:]
    results = _objects(object_store, bucket, f"jobs/{probe}/")
    assert any(body == b"bob's result\n" for body in results.values()), sorted(results)  # OUTPUT_DIR was uploaded
    for name in ("node token", "alice secret"):
        holding = [key for key, body in results.items() if secrets_[name].encode() in body]
        tally.add(f"output-link-{name.replace(' ', '-')}", bool(holding),
                  f"in the results: {holding}" if holding else f"absent from the results {sorted(results)[:6]}")
    shadow = [key for key, body in results.items() if b"root:" in body]
    tally.add("output-link-shadow", bool(shadow), f"in the results: {shadow}" if shadow else "absent from the results")
    # the daemon it left: every process of the job ends with it (its uid serves another placement next)
    daemon = f"hostile-daemon-{probe}"
    try:
        wait_until(lambda: not _processes_with(daemon), timeout=15, message="the job's daemon to be gone")
        tally.add("daemon-outlives-job", False, "every process of the job ended with it")
    except AssertionError:
        tally.add("daemon-outlives-job", True, f"still running after the job ended: {_processes_with(daemon)}")
        for pid in _processes_with(daemon):
            psutil.Process(pid).kill()


def _judge_keys_after_the_end(tally: Tally, lines: list[str], endpoint: str, bucket: str) -> None:
    """Bob's keys, kept after his attempt ended, die with it."""
    keys = json.loads(next(line for line in lines if line.startswith("KEYS "))[len("KEYS "):])
    try:
        wait_until(lambda: _keys_refused(endpoint, keys, bucket), timeout=60, message="the ended attempt's keys to stop working")
        tally.add("s3-keys-after-attempt-end", False, "refused once the attempt ended")
    except AssertionError as error:
        tally.add("s3-keys-after-attempt-end", True, str(error))


@pytest.mark.parametrize("runtime", ["process", "docker"], indirect=True)
def test_a_hostile_tenants_job_reaches_nothing_of_another_tenant_the_node_or_the_console(
        runtime, secured_services, secured_stack, object_store, hostile_node, capsys):
    started = time.monotonic()
    tally = Tally()
    stack, services, node = secured_stack, secured_services, hostile_node
    secret = f"alice-secret-{secrets.token_hex(8)}"
    image = runtime.job_fields() if runtime.host else {"image_url": PROCESS_IMAGE}
    name = f"hostile-{runtime.name}"
    token = services.manage("nodetoken", name, "--quiet").strip()
    node.token_file.write_text(token)
    node.token_file.chmod(0o600)
    agent = stack.agent(name, token, extra=node.agent_args(runtime), env=runtime.agent_env)  # the token in its environment too
    try:
        wait_until(lambda: services.sql("SELECT connected FROM jobs_node WHERE name = %s", (name,)) == [(True,)],
                   timeout=30, message="the agent to register")
        made = services.manage("shell", "-c", SETUP, env={**object_store.env(), "HOSTILE": json.dumps({
            "prefix": f"{runtime.name}-", "victim": VICTIM, "probe": probe_script(),
            "secret": secret, "image": dict(image)})})
        ids = json.loads(next(line for line in made.splitlines() if line.startswith("HOSTILE "))[len("HOSTILE "):])
        victim = ids["victim"]
        wait_until(lambda: "VICTIM-READY" in _lines(services, victim) or _status(services, victim) in ("Failed", "Completed"),
                   timeout=180, message="Alice's job to hold its secret")
        assert "VICTIM-READY" in _lines(services, victim), _lines(services, victim)[-20:]
        victim_pid = wait_until(lambda: _victim_pid(secret), timeout=10, message="the victim's process")

        # Bob, through the API with his own token: another tenant's script URL, a system directory
        url = f"{stack.url}/api/v1/training-jobs/"
        _refused_on_field(tally, "api-other-tenant-script-url", _api(url, ids["bob_token"], _job_body(
            "steal", "python victim.py", f"s3://{ids['alice_bucket']}/uploads/victim.py", image)), "script_url")
        _refused_on_field(tally, "api-system-mount-path", _api(url, ids["bob_token"], _job_body(
            "socket", "true", "", image, volume_mount_path="/var/run/docker.sock")), "volume_mount_path")

        # Bob's job, with what it knows in his File Storage share, mounted at a directory of the node
        share = tenant_share(node.file_storage, ids["bob"], IdentityPool().tenant_gid(ids["bob"]))
        (share / "bobs-notes.txt").write_text("bob's own\n")
        targets = _targets(node, runtime, stack, services, object_store, ids, victim_pid, agent.process.pid)
        (share / "hostile-targets.json").write_text(json.dumps(targets))
        status, created = _api(url, ids["bob_token"], _job_body(
            "probe", f"python hostile_probe.py {node.host_dir}/hostile-targets.json",
            f"s3://{ids['bob_bucket']}/uploads/hostile_probe.py", image, volume_mount_path=str(node.host_dir)))
        assert status == 201, created
        probe = created["id"]
        wait_until(lambda: _status(services, probe) in ("Completed", "Failed"), timeout=90, message="the probe to end")
        lines = _lines(services, probe)
        assert any(line.startswith("CHECKS DONE") for line in lines), lines[-30:]
        for line in lines:
            if line.startswith("CHECK "):
                check, verdict, *detail = line[len("CHECK "):].split(" ", 2)
                tally.add(check, verdict == "ESCAPED", detail[0] if detail else "")

        _judge_what_it_left(tally, lines, {
            "database password": urlsplit(services.database_url).password, "redis password": urlsplit(services.redis_url).password,
            "console S3 secret": object_store.secret_key, "node token": token, "alice secret": secret,
            "alice storage secret": ids["alice_storage_secret"], "console secret key": settings.SECRET_KEY,
        }, object_store, ids["bob_bucket"], probe)
        # Alice's job is untouched: still running, its files as it wrote them
        victim_dir = node.workdir_of(victim)
        untouched = (_status(services, victim) == "Running" and (victim_dir / "secret.txt").read_text() == secret
                     and not (victim_dir / "output" / "hostile-planted").exists())
        tally.add("victim-unharmed", not untouched, f"Alice's job is {_status(services, victim)}")
        _judge_keys_after_the_end(tally, lines, object_store.endpoint, ids["bob_bucket"])
    finally:
        agent.stop()
        stack.agents.remove(agent)
        forget_identities(object_store)

    with capsys.disabled():
        print(f"\nhostile tenant ({runtime.name}): {tally.summary()} in {time.monotonic() - started:.0f} s")
        for check, (escaped, detail) in tally.checks.items():
            print(f"  {'ESCAPED' if escaped else 'refused'} {check}: {detail[:160]}")
    assert not tally.escapes(), tally.escapes()
    # a refusal only counts where the service was there to refuse: object storage, the console and Redis answered
    unanswered = {check: detail for check, (_, detail) in tally.checks.items()
                  if check.startswith(("s3-", "iam-", "anon-", "channel-", "api-", "redis")) and "Connection refused" in detail}
    assert not unanswered, unanswered
    assert len(tally.checks) >= 80, tally.summary()
