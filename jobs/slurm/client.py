"""A thin slurmrestd client: JSON over HTTP with JWT headers, one adapter per API version.

No Django: the console builds it from a SlurmCluster row (jobs.slurm.models), the tests from a
local cluster. Every failure is one of three exceptions whose message a user or operator can read:
SlurmUnreachable (network, timeouts, a daemon that answers garbage: retry later), SlurmAuthError
(the token was refused: staff must fix the cluster's settings), SlurmRefused (Slurm answered
and said no: e.g. a submission it cannot ever run).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .adapters import AccountingView, SlurmJobView, adapter_for

DEFAULT_TIMEOUT = 10.0
INVALID_JOB_ID = 2017  # slurm_load_job: "Invalid job id specified"
UNSPECIFIED = -1  # what a read answers when slurmctld refused the token


class SlurmError(Exception):
    pass


class SlurmUnreachable(SlurmError):
    pass


class SlurmAuthError(SlurmError):
    pass


@dataclass(frozen=True)
class Submission:
    """Slurm took the job: its id, and what slurmctld said along with it (e.g. "Required node not
    available (down, drained or reserved)" for a job it queued until a drained node resumes)."""

    job_id: int
    warnings: tuple[str, ...] = ()


class SlurmRefused(SlurmError):
    def __init__(self, message: str, codes: tuple[int, ...] = ()) -> None:
        super().__init__(message)
        self.codes = codes


def _errors(body: dict[str, Any]) -> list[dict[str, Any]]:
    errors = body.get("errors") or []
    return [e for e in errors if isinstance(e, dict) and (e.get("error_number") or e.get("error") or e.get("description"))]


def _describe(errors: list[dict[str, Any]]) -> str:
    parts = []
    for error in errors:
        text = error.get("description") or error.get("error") or "error"
        if error.get("error") and error.get("error") != text:
            text = f"{text} ({error['error']})"
        parts.append(text)
    return "; ".join(parts)


class SlurmClient:
    def __init__(self, url: str, api_version: str, user: str, token: Callable[[], str],
                 timeout: float = DEFAULT_TIMEOUT) -> None:
        self.url = url.rstrip("/")
        self.adapter = adapter_for(api_version)
        self.user, self.token, self.timeout = user, token, timeout

    # -- transport -----------------------------------------------------------------------------
    def _request(self, method: str, path: str, body: dict[str, Any] | None = None,
                 query: dict[str, str] | None = None, prefix: str | None = None) -> dict[str, Any]:
        url = f"{self.url}{self.adapter.prefix if prefix is None else prefix}{path}"
        if query:
            url += "?" + urllib.parse.urlencode(query)
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(url, data=data, method=method, headers={
            "X-SLURM-USER-NAME": self.user, "X-SLURM-USER-TOKEN": self.token(),
            "Content-Type": "application/json", "Accept": "application/json",
        })
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            if exc.code in (401, 403) or b"Authentication failure" in raw:
                raise SlurmAuthError(f"slurmrestd at {self.url} refused the token of user {self.user!r} "
                                     "(expired, or signed with another key)") from exc
            parsed = _json(raw)
            if parsed is None:
                raise SlurmUnreachable(f"slurmrestd at {self.url} answered HTTP {exc.code}: {raw[:200]!r}") from exc
            return parsed  # Slurm's own errors come with a JSON body and a 500: the caller reads them
        except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise SlurmUnreachable(f"slurmrestd at {self.url} is unreachable: {reason}") from exc
        parsed = _json(raw)
        if parsed is None:
            raise SlurmUnreachable(f"slurmrestd at {self.url} answered something that is not JSON: {raw[:200]!r}")
        return parsed

    def _checked(self, body: dict[str, Any], reading: bool = False) -> dict[str, Any]:
        errors = _errors(body)
        if not errors:
            return body
        codes = tuple(int(e.get("error_number") or e.get("error_code") or 0) for e in errors)
        if reading and set(codes) == {UNSPECIFIED}:
            # slurmrestd passes the token on; slurmctld's refusal reaches us only as this
            raise SlurmAuthError(f"slurmrestd at {self.url}: {_describe(errors)}: slurmctld does not accept the "
                                 f"token of user {self.user!r} (expired, another user's, or signed with another key)")
        raise SlurmRefused(_describe(errors), codes)

    # -- operations ----------------------------------------------------------------------------
    def ping(self) -> str:
        """The Slurm release that answers (e.g. "22.05.8"); raises when the controller is down."""
        body = self._checked(self._request("GET", "/ping"), reading=True)
        pings = body.get("pings") or []
        if pings and all(str(p.get("ping", "")).upper() != "UP" for p in pings):
            raise SlurmUnreachable("slurmctld does not answer slurmrestd's ping")
        meta = body.get("meta") or {}
        return str((meta.get("Slurm") or meta.get("slurm") or {}).get("release") or "unknown")

    def submit(self, script: str, properties: dict[str, Any]) -> Submission:
        """Slurm queued the job whenever it names a job id, even with `errors` beside it (slurmctld
        reports ESLURM_NODES_BUSY, a drained node or a hold that way, and the job waits); without
        an id it refused the job, and SlurmRefused carries its words."""
        body = self._request("POST", "/job/submit", self.adapter.submit_body(script, properties))
        errors = _errors(body)
        if body.get("job_id"):
            return Submission(int(body["job_id"]), tuple(_describe([e]) for e in errors))
        if errors:
            self._checked(body)
        raise SlurmRefused("slurmrestd accepted the submission but named no job id")

    def release(self, job_id: int) -> None:
        """scontrol release: lift a hold (an admin hold needs an operator's or SlurmUser's token)."""
        self._checked(self._request("POST", f"/job/{int(job_id)}", {"hold": False}))

    def jobs(self) -> list[SlurmJobView]:
        """Every job slurmctld still remembers (it forgets ended jobs after MinJobAge)."""
        body = self._checked(self._request("GET", "/jobs"), reading=True)
        return [self.adapter.parse_job(raw) for raw in body.get("jobs") or []]

    def job(self, job_id: int) -> SlurmJobView | None:
        """One job, or None when slurmctld no longer knows it."""
        try:
            body = self._checked(self._request("GET", f"/job/{int(job_id)}"))
        except SlurmRefused as refused:
            if _unknown_job(refused):
                return None
            raise
        jobs = body.get("jobs") or []
        return self.adapter.parse_job(jobs[0]) if jobs else None

    def cancel(self, job_id: int, signal: str | None = None) -> None:
        """scancel: SIGTERM to every step, then SIGKILL after KillWait; a job already gone is fine."""
        query = {"signal": signal} if signal else None
        try:
            self._checked(self._request("DELETE", f"/job/{int(job_id)}", query=query))
        except SlurmRefused as refused:
            if _unknown_job(refused) or "already completed" in str(refused).lower():
                return
            raise

    def accounting(self, job_id: int) -> AccountingView | None:
        """slurmdbd's record of the job (sacct), or None while it has none."""
        try:
            body = self._checked(self._request("GET", f"/job/{int(job_id)}", prefix=self.adapter.db_prefix), reading=True)
        except SlurmRefused as refused:
            if _unknown_job(refused) or "not found" in str(refused).lower():
                return None
            raise
        jobs = body.get("jobs") or []
        return self.adapter.parse_accounting(jobs[-1]) if jobs else None

    def node_address(self, name: str) -> str | None:
        """Where other nodes reach `name` (its NodeAddr), or None."""
        body = self._checked(self._request("GET", f"/node/{urllib.parse.quote(name)}"), reading=True)
        nodes = body.get("nodes") or []
        return str(nodes[0].get("address") or name) if nodes else None

    def node_states(self) -> dict[str, str]:
        """Every node's state as slurmctld sees it (e.g. "idle", "down*"), by name."""
        body = self._checked(self._request("GET", "/nodes"), reading=True)
        return {str(n.get("name")): str(n.get("state") or "") for n in body.get("nodes") or []}

    def partitions(self) -> list[str]:
        body = self._checked(self._request("GET", "/partitions"), reading=True)
        return [str(p.get("name")) for p in body.get("partitions") or []]


def _unknown_job(refused: SlurmRefused) -> bool:
    # v0.0.37+ give the error number; v0.0.36 only says "unknown job"
    text = str(refused).lower()
    return INVALID_JOB_ID in refused.codes or "unknown job" in text or "invalid job id" in text


def _json(raw: bytes) -> dict[str, Any] | None:
    try:
        parsed = json.loads(raw or b"null")
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None
