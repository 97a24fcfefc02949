"""A Python client for the epochal API, importable with nothing but httpx and the standard library.

    from epochal_client.client import Client
    with Client() as c:                      # EPOCHAL_URL, EPOCHAL_API_KEY or the key file
        job = c.submit({"framework": "pytorch", "dataset": {"name": "digits"}})
        for event in c.follow(job.id):       # SSE, resumed after a dropped connection
            print(event.type, event.data)
        rows = c.metrics(job.id)

Every error the API answers is raised as ApiError carrying the problem details.
"""

from __future__ import annotations

import builtins
import io
import os
import re
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import httpx

from epochal_client.sweeps import SweepMethods
from epochal_client.types import (
    TERMINAL,
    ApiError,
    Dataset,
    Event,
    Job,
    MetricRow,
    Predictions,
    WorkerInfo,
    build,
    parse_sse,
)

__all__ = [
    "ApiError",
    "Client",
    "Dataset",
    "Event",
    "Job",
    "MetricRow",
    "Predictions",
    "WorkerInfo",
    "TERMINAL",
    "parse_sse",
]

DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 8000
FollowMode = Literal["auto", "sse", "poll"]


def default_url() -> str:
    """EPOCHAL_URL, else the local service on EPOCHAL_PORT (the port `epochal up` serves on)."""
    if url := os.environ.get("EPOCHAL_URL"):
        return url
    return f"http://{DEFAULT_HOST}:{os.environ.get('EPOCHAL_PORT') or DEFAULT_PORT}"


def key_file() -> Path:
    """EPOCHAL_API_KEY_FILE, else $EPOCHAL_HOME/api-key (as app.core.config resolves it; the
    home defaults to .epochal in the current directory)."""
    home = Path(os.environ.get("EPOCHAL_HOME") or ".epochal")
    return Path(os.environ.get("EPOCHAL_API_KEY_FILE") or home / "api-key").expanduser().absolute()


def find_api_key() -> tuple[str | None, str]:
    """The key to send and where it came from: EPOCHAL_API_KEY, else the key file."""
    if key := os.environ.get("EPOCHAL_API_KEY", "").strip():
        return key, "EPOCHAL_API_KEY"
    path = key_file()
    try:
        key = path.read_text().strip()
    except OSError:
        key = ""
    if key:
        return key, f"the key file {path}"
    return None, f"EPOCHAL_API_KEY is unset and there is no key file {path}"


def default_api_key() -> str | None:
    """EPOCHAL_API_KEY, else the key file `epochal up` writes (see find_api_key)."""
    return find_api_key()[0]


class Client(SweepMethods):
    """A typed client for one epochal service; usable as a context manager."""

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = (url or default_url()).rstrip("/")
        if api_key is not None:  # "" sends no key at all
            key, self.key_source = api_key or None, "the api_key given to Client()"
        else:
            key, self.key_source = find_api_key()
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._sent_key = bool(key)
        self._http = httpx.Client(
            base_url=self.url, headers=headers, timeout=timeout, transport=transport
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise ApiError.unreachable(self.url, exc) from exc
        if response.status_code >= 400:
            raise self._error(response)
        return response

    def _error(self, response: httpx.Response) -> ApiError:
        """The answer as an ApiError; a 401 also says which key was sent, from where."""
        error = ApiError.from_response(response)
        if response.status_code == 401:
            error.add_hint(self._key_hint())
        return error

    def _key_hint(self) -> str:
        if not self._sent_key:
            return (
                f"no key was sent: {self.key_source}; set EPOCHAL_API_KEY, or EPOCHAL_HOME to "
                "the directory holding api-key (`epochal up` prints it)"
            )
        return f"the key sent came from {self.key_source}; set EPOCHAL_API_KEY to a live key"

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        return self._request(method, path, **kwargs).json()

    # Jobs.

    def submit(self, spec: Mapping[str, Any], idempotency_key: str | None = None) -> Job:
        """Submit a job spec; with an idempotency key a retried call returns the same job."""
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        return build(Job, self._json("POST", "/v1/jobs", json=dict(spec), headers=headers))

    def get(self, job_id: str) -> Job:
        return build(Job, self._json("GET", f"/v1/jobs/{job_id}"))

    # Signatures below this method name the builtin as builtins.list: in the class body, `list`
    # is this method.
    def list(
        self, status: str | None = None, framework: str | None = None, limit: int = 50
    ) -> list[Job]:
        """Newest first; follows the cursor until `limit` jobs are read or none are left."""
        jobs: list[Job] = []
        cursor: str | None = None
        while len(jobs) < limit:
            params = {"status": status, "framework": framework, "cursor": cursor}
            params = {k: v for k, v in params.items() if v is not None}
            page = self._json("GET", "/v1/jobs", params={**params, "limit": min(limit, 500)})
            jobs += [build(Job, item) for item in page["items"]]
            cursor = page.get("next_cursor")
            if not cursor:
                break
        return jobs[:limit]

    def metrics(self, job_id: str, since_epoch: int = 0) -> builtins.list[MetricRow]:
        """The per-epoch rows after `since_epoch`, in epoch order."""
        rows: list[MetricRow] = []
        while True:
            params = {"since_epoch": since_epoch, "limit": 1000}
            page = self._json("GET", f"/v1/jobs/{job_id}/metrics", params=params)["items"]
            rows += [build(MetricRow, item) for item in page]
            if len(page) < 1000:
                return rows
            since_epoch = rows[-1].epoch

    def continue_job(self, job_id: str, epochs: int, changes: dict[str, Any] | None = None) -> Job:
        """A new job training `epochs` more from a succeeded job's last checkpoint; `changes`:
        what the checkpoint does not fix (name, tags, priority, max_runtime_seconds,
        early_stopping.patience, a dataset of the same shapes)."""
        body = {**(changes or {}), "epochs": epochs}
        return build(Job, self._json("POST", f"/v1/jobs/{job_id}/continue", json=body))

    def cancel(self, job_id: str) -> Job:
        return build(Job, self._json("POST", f"/v1/jobs/{job_id}/cancel"))

    def delete_job(self, job_id: str) -> None:
        """Delete a finished job with its metrics, events and files (409 until it has ended)."""
        self._request("DELETE", f"/v1/jobs/{job_id}")

    def wait(self, job_id: str, timeout: float | None = None, poll: float = 1.0) -> Job:
        """Block until the job has ended; TimeoutError after `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = self.get(job_id)
            if job.done:
                return job
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"job {job_id} is still {job.status} after {timeout}s")
            time.sleep(poll)

    def logs(
        self, job_id: str, tail: int = 200, rank: int = 0, *, member: int | None = None
    ) -> builtins.list[str]:
        """The last `tail` lines of the job's log (of a multi-node job's `rank`, 0: rank 0).
        `member` is the deprecated name of `rank`."""
        rank = rank if member is None else member
        params = {"tail": tail, **({"rank": rank} if rank else {})}
        response = self._request("GET", f"/v1/jobs/{job_id}/logs", params=params)
        if "json" not in response.headers.get("content-type", ""):
            return response.text.splitlines()
        body = response.json()
        lines = body if isinstance(body, list) else body.get("lines", body.get("items", []))
        return [str(line) for line in lines]

    # Events.

    def follow(
        self,
        job_id: str,
        last_event_id: str | None = None,
        mode: FollowMode = "auto",
        poll_interval: float = 1.0,
    ) -> Iterator[Event]:
        """Transitions and finished epochs as they happen, until the job ends.

        `auto` streams Server-Sent Events and falls back to polling when the server has no
        events route; a dropped stream is resumed from the last event id it delivered.
        """
        if mode == "poll":
            yield from self._follow_poll(job_id, poll_interval)
            return
        try:
            yield from self._follow_sse(job_id, last_event_id)
        except ApiError as exc:
            if mode == "sse" or exc.status not in (404, 405, 406):
                raise
            self.get(job_id)  # the job exists (else this raises): the events route does not
            yield from self._follow_poll(job_id, poll_interval)

    def _follow_sse(self, job_id: str, last_id: str | None) -> Iterator[Event]:
        failures = 0
        while True:
            headers = {"Accept": "text/event-stream"}
            if last_id:
                headers["Last-Event-ID"] = last_id
            try:
                # Read timeout above the server's 15 s keep-alive comments.
                timeout = httpx.Timeout(30.0, read=60.0)
                with self._http.stream(
                    "GET", f"/v1/jobs/{job_id}/events", headers=headers, timeout=timeout
                ) as response:
                    if response.status_code >= 400:
                        response.read()
                        raise self._error(response)
                    for event in parse_sse(response.iter_lines()):
                        failures, last_id = 0, event.id or last_id
                        yield event
                        if event.terminal:
                            return
            except httpx.TransportError as exc:
                failures += 1
                if failures > 5:
                    raise ApiError.unreachable(self.url, exc) from exc
            # The stream ended early (a restart, a proxy): resume where it stopped.
            time.sleep(min(0.25 * 2**failures, 5.0))

    def _follow_poll(self, job_id: str, interval: float) -> Iterator[Event]:
        """The same events from GET requests (no resume ids: they are for SSE only)."""
        transitions_seen, last_epoch = 0, 0
        while True:
            job = self.get(job_id)  # first the job, then rows: a finished job's rows are all in
            rows = self.metrics(job_id, since_epoch=last_epoch)
            fresh = [
                Event("transition", {"job_id": job_id, **t}, None)
                for t in job.transitions[transitions_seen:]
            ]
            transitions_seen = len(job.transitions)
            yield from (e for e in fresh if not e.terminal)
            for row in rows:
                last_epoch = row.epoch
                yield Event("epoch", {"job_id": job_id, **row.as_dict()}, None)
            if any(e.terminal for e in fresh):
                yield next(e for e in fresh if e.terminal)
                return
            time.sleep(interval)

    # Data sets, artifacts, workers.

    def upload_dataset(
        self,
        path: str | Path,
        name: str | None = None,
        label_column: str | None = None,
        task: str | None = None,
        kind: str | None = None,
    ) -> Dataset:
        """Upload an .npz (arrays x, y) or a CSV file; returns the stored data set. kind
        "tokens": x holds integer token ids (samples, steps); default "values"."""
        path = Path(path)
        form = {
            "name": name or path.stem,
            "label_column": label_column,
            "task": task,
            "kind": kind,
        }
        data = {k: v for k, v in form.items() if v is not None}
        with path.open("rb") as f:
            files = {"file": (path.name, f, "application/octet-stream")}
            return build(Dataset, self._json("POST", "/v1/datasets", data=data, files=files))

    def datasets(self) -> builtins.list[Dataset]:
        return [build(Dataset, item) for item in _items(self._json("GET", "/v1/datasets"))]

    def dataset(self, dataset_id: str) -> Dataset:
        """One data set: status (ingesting, ready, failed), rows, bytes, version, error."""
        return build(Dataset, self._json("GET", f"/v1/datasets/{dataset_id}"))

    def add_dataset(self, source: str, **fields: str | None) -> Dataset:
        """Register files the server may read (a path under EPOCHAL_DATA_ROOTS, or s3://… in
        its store) as a data set; it is ingested. fields: name, task, format, label_column."""
        body = {"source": source, **{k: v for k, v in fields.items() if v is not None}}
        return build(Dataset, self._json("POST", "/v1/datasets/references", json=body))

    def download_model(self, job_id: str, path: str | Path = ".", format: str = "native") -> Path:
        """Save the trained model into a folder under the server's file name, or to `path`:
        `native` (model.pt or model.keras), `onnx` (model.onnx) or `model-card` (model-card.json;
        `card` is its old name)."""
        route = MODEL_FORMATS.get(FORMAT_ALIASES.get(format, format))
        if route is None:
            raise ValueError(f"format is one of {', '.join(MODEL_FORMATS)}, not {format!r}")
        target = Path(path)
        url = f"/v1/jobs/{job_id}/artifacts/{route}"
        try:
            # follow_redirects: a server may send a download to its store's signed URL (httpx
            # does not carry the API key to another origin).
            with self._http.stream("GET", url, follow_redirects=True) as response:
                if response.status_code >= 400:
                    response.read()
                    raise self._error(response)
                if target.is_dir():
                    target = target / _filename(response, f"{job_id}-model")
                _save(response, target)
        except httpx.TransportError as exc:
            raise ApiError.unreachable(self.url, exc) from exc
        return target

    def predict(self, job_id: str, inputs: Any) -> Predictions:
        """A succeeded job's predictions for raw rows: nested lists in the model card's row
        shape (sent as JSON), or a numpy array (sent as .npy; numpy stays optional)."""
        url = f"/v1/jobs/{job_id}/predict"
        if type(inputs).__module__ != "numpy":
            return build(Predictions, self._json("POST", url, json={"inputs": inputs}))
        npy = {"Content-Type": "application/x-npy"}
        return build(Predictions, self._json("POST", url, content=_npy_bytes(inputs), headers=npy))

    def queue(self, limit: int = 50) -> dict[str, Any]:
        """The queue as the scheduler sees it: own jobs (an admin: all) with position, reason
        and estimated start under "jobs", other keys' as counts under "others"."""
        return dict(self._json("GET", "/v1/queue", params={"limit": limit}))

    def workers(self) -> builtins.list[WorkerInfo]:
        return [build(WorkerInfo, item) for item in _items(self._json("GET", "/v1/workers"))]


def _npy_bytes(array: Any) -> bytes:
    """An array as the bytes of a .npy file (never pickled)."""
    import numpy as np

    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(array), allow_pickle=False)
    return buffer.getvalue()


# download_model's formats -> the artifact route that serves each
MODEL_FORMATS = {"native": "model", "onnx": "onnx", "model-card": "model-card"}
FORMAT_ALIASES = {"card": "model-card"}  # earlier names, still accepted


def _save(response: httpx.Response, target: Path) -> None:
    """Write to a .part file and rename it: never a half file under the real name."""
    partial = target.with_name(target.name + ".part")
    try:
        with partial.open("wb") as out:
            for chunk in response.iter_bytes():
                out.write(chunk)
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)


def _items(body: Any) -> list[Any]:
    return list(body if isinstance(body, list) else body.get("items", []))


def _filename(response: httpx.Response, fallback: str) -> str:
    disposition = response.headers.get("content-disposition", "")
    match = re.search(r'filename="?([^";]+)"?', disposition)
    return Path(match.group(1)).name if match else fallback
