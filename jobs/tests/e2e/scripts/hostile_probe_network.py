"""The hostile probe's second half: the checks of the network (object storage signed by hand,
the console's HTTP and WebSocket, PostgreSQL, Redis, sockets) and `main`. It runs appended to
hostile_probe.py (test_hostile_tenant.py uploads the two as the job's one script), whose tally
(`check`, `report`, `COUNT`), TARGETS and checks of files and processes it uses.
"""
# ruff: noqa: F821  (the names of hostile_probe.py, which comes first in the script the job runs)

import base64
import datetime
import glob
import hashlib
import hmac
import json
import os
import socket
import ssl
import struct
import urllib.error
import urllib.parse
import urllib.request

# -- object storage: S3 and IAM requests signed by hand (Signature Version 4) -----------------------------------
ENDPOINT = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("S3_ENDPOINT_URL") or TARGETS["s3_endpoint"]
KEYS = (os.environ.get("AWS_ACCESS_KEY_ID", ""), os.environ.get("AWS_SECRET_ACCESS_KEY", ""))


def _sign(key, text):
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def s3(method, path, query="", body=b"", keys=KEYS, service="s3", headers=None):
    """(status, body) of a request to the S3 endpoint; `keys` None: anonymous."""
    url = urllib.parse.urlsplit(ENDPOINT)
    headers = dict(headers or {})
    payload = hashlib.sha256(body).hexdigest()
    if keys is not None:
        access, secret = keys
        now = datetime.datetime.now(datetime.UTC)
        stamp, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
        headers.update({"host": url.netloc, "x-amz-date": stamp, "x-amz-content-sha256": payload})
        signed = sorted(headers)
        canonical_query = "&".join(sorted(
            f"{urllib.parse.quote(k, safe='-_.~')}={urllib.parse.quote(v, safe='-_.~')}"
            for k, v in urllib.parse.parse_qsl(query, keep_blank_values=True)))
        canonical = "\n".join([method, urllib.parse.quote(path, safe="/-_.~"), canonical_query,
                               "".join(f"{h}:{headers[h].strip()}\n" for h in signed), ";".join(signed), payload])
        scope = f"{day}/us-east-1/{service}/aws4_request"
        to_sign = "\n".join(["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()])
        key = _sign(_sign(_sign(_sign(("AWS4" + secret).encode(), day), "us-east-1"), service), "aws4_request")
        signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
        headers["authorization"] = (f"AWS4-HMAC-SHA256 Credential={access}/{scope}, SignedHeaders={';'.join(signed)}, "
                                    f"Signature={signature}")
    request = urllib.request.Request(f"{ENDPOINT}{urllib.parse.quote(path, safe='/-_.~')}" + (f"?{query}" if query else ""),
                                     data=body if method in ("PUT", "POST") else None, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def s3_call(method, path, query="", body=b"", keys=KEYS, service="s3", headers=None):
    def attempt():
        status, answer = s3(method, path, query, body, keys, service, headers)
        text = answer.decode(errors="replace")
        code = text.split("<Code>")[1].split("</Code>")[0] if "<Code>" in text else text[:120]
        return 200 <= status < 300, f"{method} {path}?{query} -> {status} {code}"
    return attempt


def iam(action, keys=KEYS, **params):
    body = urllib.parse.urlencode({"Action": action, "Version": "2010-05-08", **params}).encode()
    return s3_call("POST", "/", body=body, keys=keys, service="iam",
                   headers={"content-type": "application/x-www-form-urlencoded; charset=utf-8"})


def list_buckets():
    status, answer = s3("GET", "/")
    names = [part.split("</Name>")[0] for part in answer.decode(errors="replace").split("<Name>")[1:]]
    others = [name for name in names if name != os.environ.get("SIMPLEAI_BUCKET")]
    return bool(others), f"{status}: lists {names}"


# -- services on the node's network ---------------------------------------------------------------------------
def http_get(url, context=None):
    def attempt():
        try:
            with urllib.request.urlopen(url, timeout=5, context=context) as response:
                body = response.read(300)
                return True, f"{url} -> {response.status} {body[:120]!r}"
        except urllib.error.HTTPError as error:
            return error.code < 400, f"{url} -> {error.code}"
    return attempt


def post_json(url, body, bearer):
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", "Authorization": f"Bearer {bearer}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return True, f"{url} -> {response.status} {response.read(160)!r}"
    except urllib.error.HTTPError as error:
        return error.code < 400, f"{url} -> {error.code} {error.read(160)!r}"


def seaweed_port(name, port, path):
    """Plain HTTP, then HTTPS without the store's client certificate."""
    def attempt():
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE
        return first_ok(http_get(f"http://127.0.0.1:{port}{path}"), http_get(f"https://127.0.0.1:{port}{path}", insecure))
    return attempt


def websocket(path, headers=""):
    """Open the console's WebSocket `path`; escaped when the console says anything but a refusal."""
    def attempt():
        url = urllib.parse.urlsplit(TARGETS["console_url"])
        with socket.create_connection((url.hostname, url.port), timeout=10) as sock:
            key = base64.b64encode(os.urandom(16)).decode()
            sock.sendall((f"GET {path} HTTP/1.1\r\nHost: {url.netloc}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                          f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n{headers}\r\n").encode())
            answer = b""
            while b"\r\n\r\n" not in answer:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                answer += chunk
            status = answer.split(b"\r\n", 1)[0].decode(errors="replace")
            if " 101 " not in status:
                return False, f"{path}: {status}"
            frames = answer.split(b"\r\n\r\n", 1)[1]
            sock.settimeout(5)
            try:
                while len(frames) < 2 or len(frames) < 2 + (frames[1] & 0x7F):
                    chunk = sock.recv(4096)
                    if not chunk:
                        break
                    frames += chunk
            except TimeoutError:
                pass
            if not frames:
                return False, f"{path}: accepted, then closed without a word"
            opcode, length = frames[0] & 0x0F, frames[1] & 0x7F
            start = 2
            if length == 126:
                length, start = struct.unpack(">H", frames[2:4])[0], 4
            payload = frames[start:start + length]
            if opcode == 8:
                return False, f"{path}: closed with {struct.unpack('>H', payload[:2])[0] if len(payload) >= 2 else '-'}"
            text = payload.decode(errors="replace")
            return '"error"' not in text, f"{path}: {text[:160]}"
    return attempt


def postgres(host, port, user="postgres", database="postgres"):
    """A startup message without a password: trust lets it in (escaped), a password request refuses."""
    def attempt():
        family = socket.AF_UNIX if host.startswith("/") else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.settimeout(5)
            sock.connect(f"{host}/.s.PGSQL.{port}" if family == socket.AF_UNIX else (host, port))
            params = f"user\0{user}\0database\0{database}\0\0".encode()
            sock.sendall(struct.pack(">ii", 8 + len(params), 196608) + params)
            kind, _, code = struct.unpack(">cii", sock.recv(9)[:9])
            if kind == b"R" and code == 0:
                return True, f"{host}:{port} let {user} in without a password"
            if kind == b"R":
                return False, f"{host}:{port} asks for a password (auth method {code})"
            return False, f"{host}:{port} answered {kind!r}"
    return attempt


def redis_ping(host, port):
    def attempt():
        with socket.create_connection((host, port), timeout=5) as sock:
            sock.sendall(b"*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nKEYS\r\n$1\r\n*\r\n")
            answer = sock.recv(200).decode(errors="replace")
            return answer.startswith("+PONG"), f"{host}:{port} -> {answer.strip()[:120]}"
    return attempt


def unix_connect(path):
    def attempt():
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(5)
            sock.connect(path)
            return True, f"connected to {path}"
    return attempt


def environment():
    found = [name for name in os.environ if name in CONSOLE_NAMES or name.startswith(("PG", "CELERY", "DJANGO"))]
    found += [f"{name} holds the console's S3 user" for name in ("AWS_ACCESS_KEY_ID", "S3_ACCESS_KEY")
              if os.environ.get(name) == TARGETS.get("console_access_key_id")]
    return bool(found), f"found {found}" if found else f"{len(os.environ)} variables, none of the console's or the agent's"


def main():
    victim, agent = TARGETS["victim_pid"], TARGETS["agent_pid"]
    work, victim_dir = TARGETS["agent_work_dir"], TARGETS["victim_workdir"]
    alice, console_bucket = TARGETS["victim_bucket"], TARGETS["console_bucket"]
    own_bucket = os.environ.get("SIMPLEAI_BUCKET", "")
    own_job = int(os.environ.get("CHECKPOINT_S3_URL", "/jobs/0/").split("/jobs/")[1].split("/")[0])
    victim_job = TARGETS["victim_job"]
    # what any process may read of the others (their command lines): the test looks for the other job's secret in it
    seen = []
    for pid in visible_pids():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                seen.append(f"{pid}:" + handle.read().replace(b"\0", b" ").decode(errors="replace")[:200])
        except OSError:
            pass
    print("SEEN " + " | ".join(seen), flush=True)
    print("KEYS " + json.dumps({"access_key": KEYS[0], "secret_key": KEYS[1]}), flush=True)  # for the use-after-end check

    # the environment and the console's files
    check("env-console-secrets", environment)
    check("read-console-settings", lambda: first_ok(*(lambda p=p: read(p) for p in TARGETS["console_files"])))
    # /proc of the agent, of the other job, of anything
    check("proc-agent-visible", agent_visible)
    check("proc-agent-environ", proc_of(agent, "environ"))
    check("proc-agent-root", proc_of(agent, "root"))
    check("proc-victim-environ", proc_of(victim, "environ"))
    check("proc-victim-cwd", proc_of(victim, "cwd"))
    check("proc-victim-root", proc_of(victim, "root"))
    check("proc-foreign-processes", foreign_processes)
    check("ptrace-victim", ptrace(victim))
    check("ptrace-agent", ptrace(agent))
    # signals
    check("signal-victim", signal_to(victim))
    check("signal-agent", signal_to(agent))
    check("signal-victim-group", signal_group(victim))
    # the agent's directories
    check("agent-workdir-list", lambda: agent_tree(work, own_job))
    check("agent-workdir-write", lambda: write_in(work))
    check("agent-spool-read", lambda: first_ok(lambda: listing(os.path.join(work, "spool")),
                                               *(lambda p=p: read(p) for p in glob.glob(os.path.join(work, "spool", "*")))))
    check("agent-markers-write", lambda: first_ok(
        lambda: write_in(os.path.dirname(victim_dir), "master.agent.json"),
        lambda: write_in(os.path.join(work, "jobs", str(own_job), "attempt-1"), "master.agent.json"),
        lambda: read(os.path.join(os.path.dirname(victim_dir), "master.agent.json"))))
    check("agent-token-file", lambda: read(TARGETS["token_file"]))
    check("agent-uid-locks", steal_uid_lock)
    check("envcache-write", lambda: first_ok(lambda: write_in(TARGETS["env_cache"]),
                                             *(lambda d=d: write_in(d) for d in glob.glob(os.path.join(TARGETS["env_cache"], "*")))))
    check("vendor-write", lambda: write_in(os.environ.get("CHECKPOINT_VENDOR", "/nonexistent")))
    # the other job's files: by the node's path, and through File Storage
    check("victim-workdir-list", lambda: listing(victim_dir))
    check("victim-secret-read", lambda: read(os.path.join(victim_dir, "secret.txt")))
    check("victim-output-write", lambda: write_in(os.path.join(victim_dir, "output")))
    check("file-storage-root-list", lambda: listing(TARGETS["file_storage_root"]))
    check("file-storage-victim-share", lambda: first_ok(lambda: listing(TARGETS["victim_share"]),
                                                        lambda: read(os.path.join(TARGETS["victim_share"], "secret.txt"))))
    # a host path named as the mount path shows this tenant's share, not the host's directory
    check("host-mount-path", host_mount_path)
    check("host-tmp", lambda: read(TARGETS["tmp_sentinel"]))
    check("host-shm", lambda: read(TARGETS["shm_sentinel"]))
    check("container-engine-socket", lambda: first_ok(*(unix_connect(p) for p in TARGETS["engine_sockets"])))
    check("setuid-root", lambda: (os.setuid(0), (True, "setuid(0) worked"))[1])
    check("write-system-file", lambda: write_in("/etc", "hostile-planted"))
    # object storage with the job's own keys
    check("s3-list-buckets", list_buckets)
    check("s3-list-other-tenant", s3_call("GET", f"/{alice}", "list-type=2"))
    check("s3-read-other-tenant", s3_call("GET", f"/{alice}/{TARGETS['victim_object']}"))
    check("s3-write-other-tenant", s3_call("PUT", f"/{alice}/uploads/planted.py", body=b"import os"))
    check("s3-delete-other-tenant", s3_call("DELETE", f"/{alice}/{TARGETS['victim_object']}"))
    check("s3-plant-checkpoint", s3_call("PUT", f"/{alice}/jobs/{victim_job}/checkpoints/step-999/MANIFEST.json", body=b"{}"))
    check("s3-list-console-bucket", s3_call("GET", f"/{console_bucket}", "list-type=2"))
    check("s3-write-console-bucket", s3_call("PUT", f"/{console_bucket}/planted.txt", body=b"x"))
    check("s3-own-bucket-outside-prefix", s3_call("PUT", f"/{own_bucket}/uploads/hostile_probe.py", body=b"planted"))
    check("s3-own-bucket-other-job", s3_call("PUT", f"/{own_bucket}/jobs/{own_job + 1}/checkpoints/x", body=b"x"))
    check("s3-create-bucket", s3_call("PUT", f"/{own_bucket}-more"))
    check("s3-bucket-policy", s3_call("PUT", f"/{own_bucket}", "policy=", body=json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Principal": "*", "Action": "s3:*", "Resource": f"arn:aws:s3:::{alice}/*"}]}).encode()))
    check("iam-list-users", iam("ListUsers"))
    check("iam-create-key", iam("CreateAccessKey", UserName=f"user-{TARGETS['victim_owner']}"))
    check("iam-put-policy", iam("PutUserPolicy", UserName=f"job-{own_job}-a1", PolicyName="all", PolicyDocument=json.dumps(
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]})))
    # anonymous
    check("anon-list-buckets", s3_call("GET", "/", keys=None))
    check("anon-list-other-tenant", s3_call("GET", f"/{alice}", "list-type=2", keys=None))
    check("anon-read-other-tenant", s3_call("GET", f"/{alice}/{TARGETS['victim_object']}", keys=None))
    check("anon-write-other-tenant", s3_call("PUT", f"/{alice}/uploads/anon.py", body=b"x", keys=None))
    check("anon-iam", iam("ListUsers", keys=None))
    # SeaweedFS behind its gateway: master, volume and filer
    for name, (port, path) in TARGETS["seaweed_ports"].items():
        check(f"seaweed-{name}", seaweed_port(name, port, path))
    # the console: its agent channel with whatever a job finds, its database and Redis
    check("channel-agent-no-token", websocket("/ws/agent/"))
    check("channel-agent-job-keys", websocket("/ws/agent/", f"Authorization: Bearer {KEYS[1]}\r\n"))
    check("channel-agent-signing-key", websocket("/ws/agent/", f"Authorization: Bearer {os.environ.get('CHECKPOINT_SIGNING_KEY', '')}\r\n"))
    check("channel-slurm-step", websocket("/ws/slurm-step/"))
    check("api-other-job", http_get(f"{TARGETS['console_url']}/api/v1/training-jobs/{victim_job}/"))
    check("api-other-job-logs", http_get(f"{TARGETS['console_url']}/api/v1/training-jobs/{victim_job}/logs/"))
    check("channel-browser-logs", websocket(f"/ws/jobs/{victim_job}/logs/"))
    check("channel-browser-job", websocket(f"/ws/jobs/{victim_job}/"))
    check("slurm-redeem-run", lambda: post_json(f"{TARGETS['console_url']}/api/v1/slurm/runs/", {
        "job_id": victim_job, "slurm_job_id": 1, "nodelist": "node-1"}, KEYS[1]))
    for host, port in TARGETS["postgres"]:
        check(f"postgres-{'socket' if host.startswith('/') else 'tcp'}", postgres(host, port))
    for host, port in TARGETS["redis"]:
        check("redis", redis_ping(host, port))
    check("cgroup-escape", cgroup_escape)
    check("inherited-fds", inherited_fds)
    check("cgroup-own-limits", cgroup_own_limits)
    check("raw-devices", raw_devices)
    print(f"LINKS {','.join(plant_output_links())}", flush=True)  # judged by the test, in the uploaded results
    leave_daemon(f"hostile-daemon-{own_job}")  # judged by the test, after the job ended
    print(f"CHECKS DONE {COUNT}", flush=True)


if __name__ == "__main__":
    main()
