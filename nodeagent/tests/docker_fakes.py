"""A Docker engine's client as the Docker runtime's tests need it (no engine runs): images that
are on the node or pulled by a scripted stream of events, and the placement each test starts."""

from __future__ import annotations

from pathlib import Path

import requests
from docker import errors

from nodeagent.jobusers import JobIdentity
from nodeagent.runtimes import LaunchSpec
from nodeagent.tests.agent_support import make_placement

IMAGE = "registry.example.com/team/train:1"
USER = JobIdentity(uid=1_900_000_042, gid=2_000_000_007)
CREDENTIALS = {"username": "trainer", "password": "Reg-Pass-1"}


def launch_spec(tmp_path: Path, env: dict[str, str] | None = None, **overrides) -> LaunchSpec:
    placement = make_placement(**overrides)
    workdir = tmp_path / "jobs/7/attempt-1/master"
    (workdir / "output").mkdir(parents=True, exist_ok=True)
    return LaunchSpec(placement, workdir, workdir / "output", {"JOB_NAME": "demo-job", **(env or {})})


def api_error(status: int, explanation: str) -> errors.APIError:
    response = requests.Response()
    response.status_code, response.url, response.reason = status, "http+docker://localhost/images/create", "x"
    return errors.APIError("pull", response=response, explanation=explanation)


class FakeImage:
    def __init__(self, image_id: str) -> None:
        self.id, self.attrs = image_id, {"Size": 121_000_000}


class FakeImages:
    def __init__(self, present: dict[str, str]) -> None:
        self.present = present

    def get(self, name):
        if name not in self.present:
            raise errors.ImageNotFound(f"No such image: {name}")
        return FakeImage(self.present[name])


class FakeApi:
    """`pull` plays one list of events per call (the last one again when they run out)."""

    def __init__(self, client, *calls):
        self.client, self.scripts, self.calls = client, list(calls) or [[]], []

    def pull(self, repository, tag, stream, decode, auth_config):
        self.calls.append((repository, tag, auth_config))
        events = self.scripts[min(len(self.calls), len(self.scripts)) - 1]
        if isinstance(events, Exception):
            raise events
        yield from events
        if not any("error" in e for e in events):
            self.client.images.present.setdefault(f"{repository}:{tag}", "sha256:" + "ab12" * 16)


class FakeClient:
    def __init__(self, present=(), *calls):
        self.images = FakeImages({name: "sha256:" + "cd34" * 16 for name in present})
        self.api = FakeApi(self, *calls)


class FakeContainer:
    id = "c0ffee" * 10
    name = "simpleai-job7-attempt1-master"

    def __init__(self, stdout=(), stderr=(), status=0, labels=None):
        self.stdout, self.stderr, self.status = list(stdout), list(stderr), status
        self.labels = labels or {}
        self.removed, self.stopped = False, None

    def logs(self, **kwargs):
        assert kwargs["follow"] and kwargs["stream"] and kwargs["stdout"] != kwargs["stderr"]
        return iter(self.stdout if kwargs["stdout"] else self.stderr)

    def wait(self):
        return {"StatusCode": self.status}

    def stop(self, timeout):
        self.stopped = timeout

    def remove(self, force):
        self.removed = force
