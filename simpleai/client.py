"""The SDK: `Client(url, token)`, typed methods over the console's REST API (/api/v1/).

Every method raises simpleai.errors on a refusal: `ApiError` (with the field messages of a
400, worded as the form words them), `NotFound`, `AuthRefused`, `Unreachable`.
"""

from __future__ import annotations

from typing import Any, cast

from .api_types import Job, JobFields, LogPage, MetricResult, ServerType, Tag
from .config import Config, load
from .errors import NotFound
from .storage import Space
from .transport import Query, Transport

JOBS = "/api/v1/training-jobs/"
STORAGE = "/api/v1/account/storage/"
# A job in one of these has ended and will not run again (jobs.choices.TERMINAL_STATUSES on the
# console; jobs/tests/test_cli_contract.py fails when the two differ).
ENDED_STATUSES = frozenset({
    "Completed", "Failed", "Stopped",
    "Pending - internalerror", "Pending - maxretriesexceeded", "Pending - imagepullbackoff",
})


class Client:
    """One console, as the owner of `token` (from the account page's API token)."""

    def __init__(self, url: str, token: str, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.http = Transport(self.url, token, timeout)

    @classmethod
    def from_config(cls, config: Config | None = None) -> Client:
        """SIMPLEAI_URL / SIMPLEAI_TOKEN, else what `simpleai login` stored."""
        config = config or load()
        return cls(config.url, config.token)

    # -- jobs -----------------------------------------------------------------------------------

    def jobs(self, *, status: str | None = None, search: str | None = None, name: str | None = None,
             limit: int | None = None) -> list[Job]:
        """The caller's jobs, newest first, filtered as the list page filters them."""
        query = {"status": status, "search": search, "name": name}
        return cast(list[Job], self._pages(JOBS, query, limit))

    def job(self, job_id: int) -> Job:
        return cast(Job, self.http.request("GET", f"{JOBS}{job_id}/"))

    def find_job(self, ref: str | int) -> Job:
        """One of the caller's jobs by its id or its name (names are unique per owner)."""
        text = str(ref).strip()
        if text.isdigit():
            try:
                return self.job(int(text))
            except NotFound:
                pass  # a name may be all digits
        for job in self.jobs(name=text):
            if job["name"] == text:
                return job
        raise NotFound(f"you have no job with the id or name {text!r}")

    def validate_job(self, fields: JobFields) -> JobFields:
        """Check a new job as a create would, without creating it: the job with its defaults filled in."""
        return cast(JobFields, self.http.request("POST", f"{JOBS}validate/", body=fields))

    def create_job(self, fields: JobFields) -> Job:
        return cast(Job, self.http.request("POST", JOBS, body=fields))

    def stop_job(self, job_id: int) -> Job:
        """Stop a job that waits or runs (ApiError 409 once it has ended)."""
        return cast(Job, self.http.request("POST", f"{JOBS}{job_id}/stop/"))

    def delete_job(self, job_id: int) -> Job | None:
        """None when it is gone; the job (Terminating) while its nodes stop first."""
        return cast(Job | None, self.http.request("DELETE", f"{JOBS}{job_id}/"))

    def set_tags(self, job_id: int, tags: list[Tag]) -> Job:
        """Replace the job's tags (the only thing that changes after a job is created)."""
        return cast(Job, self.http.request("PATCH", f"{JOBS}{job_id}/", body={"tags": tags}))

    def logs(self, job_id: int, *, cursor: str | None = None, stream: str | None = None, limit: int = 1000) -> LogPage:
        """Lines after `cursor` (the `next` of the previous page; from the first line when None)."""
        query = {"cursor": cursor, "stream": stream, "limit": limit}
        return cast(LogPage, self.http.request("GET", f"{JOBS}{job_id}/logs/", query))

    def metric(self, job_id: int, metric: str, *, start: str | None = None, end: str | None = None,
               period: int | None = None, statistic: str | None = None) -> MetricResult:
        """One metric's series over [start, end) (ISO 8601 or unix seconds; the last hour by default)."""
        query = {"metric": metric, "start": start, "end": end, "period": period, "statistic": statistic}
        return cast(MetricResult, self.http.request("GET", f"{JOBS}{job_id}/metrics/", query))

    # -- storage --------------------------------------------------------------------------------

    def storage_space(self) -> Space:
        """The caller's own bucket and keys (NotFound when the console has no object storage)."""
        return Space.from_api(self.http.request("GET", STORAGE))

    # -- catalogue ------------------------------------------------------------------------------

    def server_types(self) -> list[ServerType]:
        return cast(list[ServerType], self._pages("/api/v1/server-types/", {}, None))

    # -- paging ---------------------------------------------------------------------------------

    def _pages(self, path: str, query: Query, limit: int | None) -> list[Any]:
        """Every result of a paged listing (page by page, as `next` says), up to `limit`."""
        results: list[Any] = []
        page = 1
        while limit is None or len(results) < limit:
            body = self.http.request("GET", path, {**query, "page": page})
            results += body["results"]
            if not body.get("next"):
                break
            page += 1
        return results if limit is None else results[:limit]
