"""What the client returns: typed dataclasses, the one error type, SSE parsing (httpx + stdlib).

Unknown fields in an answer are ignored, so a newer server does not break an older client.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar, get_type_hints

import httpx

TERMINAL = frozenset({"succeeded", "failed", "cancelled"})
T = TypeVar("T")


class ApiError(Exception):
    """An error answer of the API, with its problem details (RFC 9457 fields)."""

    def __init__(
        self,
        status: int,
        title: str,
        detail: str,
        errors: list[dict[str, Any]] | None = None,
        type: str = "about:blank",
    ) -> None:
        super().__init__(f"{status} {title}: {detail}" if status else f"{title}: {detail}")
        self.status, self.title, self.detail = status, title, detail
        self.errors, self.type = errors or [], type
        self.hint: str | None = None

    def add_hint(self, hint: str) -> None:
        """What the client knows about the cause (for a 401: which key it sent, from where)."""
        self.hint = hint
        self.args = (f"{self.args[0]}\n{hint}",)

    @classmethod
    def from_response(cls, response: httpx.Response) -> ApiError:
        try:
            body = response.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            body = None
        if not isinstance(body, dict):
            body = {"detail": response.text[:500] or response.reason_phrase}
        detail = body.get("detail", "")
        return cls(
            response.status_code,
            str(body.get("title") or response.reason_phrase),
            detail if isinstance(detail, str) else json.dumps(detail),
            body.get("errors"),
            str(body.get("type", "about:blank")),
        )

    @classmethod
    def unreachable(cls, url: str, exc: Exception) -> ApiError:
        """status 0: no answer at all (connection refused, timeout, dropped stream)."""
        return cls(0, "Service unreachable", f"{url}: {type(exc).__name__}: {exc}")


@dataclass(frozen=True)
class Job:
    """A job; list results leave spec, transitions, result and error empty."""

    id: str
    name: str
    framework: str
    status: str
    attempt: int
    epochs: int
    current_epoch: int
    created_at: datetime
    stop_reason: str | None = None
    best_epoch: int | None = None
    best_metric: float | None = None
    best_metric_name: str | None = None  # the metrics-row field best_epoch is chosen by
    started_at: datetime | None = None
    finished_at: datetime | None = None
    tags: dict[str, str] = field(default_factory=dict)
    error_code: str | None = None
    error: str | None = None
    result: dict[str, Any] | None = None
    wait_reason: str | None = None
    # a queued job's {"position", "reason", "estimated_start"}; None once it left the queue
    queue: dict[str, Any] | None = None
    priority: int = 50
    spec: dict[str, Any] = field(default_factory=dict)
    transitions: list[dict[str, Any]] = field(default_factory=list)
    sweep_id: str | None = None  # the sweep this job is a trial of
    # the built model: parameters, flops_per_sample, layers [{name, op, output_shape,
    # parameters}], head included; None for a job stored before the server kept summaries
    model_summary: dict[str, Any] | None = None
    # while an attempt trains: {"epoch" (the one in progress), "step" (done), "steps"}
    step_progress: dict[str, int] | None = None

    @property
    def done(self) -> bool:
        return self.status in TERMINAL

    @property
    def steps_in_progress(self) -> tuple[int, int] | None:
        """(steps done, steps) of the epoch after current_epoch; None when nothing says (a
        report about an epoch already finished is no news)."""
        progress = self.step_progress or {}
        if progress.get("epoch") != self.current_epoch + 1 or not progress.get("steps"):
            return None
        return min(progress["step"], progress["steps"]), progress["steps"]

    @property
    def epochs_done(self) -> float:
        """Finished epochs plus the share of the one in progress: what a progress bar shows."""
        steps = self.steps_in_progress
        return self.current_epoch + (steps[0] / steps[1] if steps else 0.0)


@dataclass(frozen=True)
class MetricRow:
    """One finished epoch; values that were not finite are None.

    The client's one definition of the metrics row (the server's is app.schemas.metric_row,
    which the client cannot import; tests/client/test_client_unit.py holds the two equal). A
    split's score is the field `score_field(split, score)`: `train_loss`, `val_accuracy`, …"""

    epoch: int
    train_loss: float | None = None
    train_accuracy: float | None = None
    train_mae: float | None = None
    val_loss: float | None = None
    val_accuracy: float | None = None
    val_mae: float | None = None
    learning_rate: float | None = None
    epoch_seconds: float | None = None
    samples_per_second: float | None = None
    data_wait_seconds: float | None = None  # a streamed data set: time spent waiting for input
    data_read_bytes: float | None = None  # … bytes it read from the store
    data_cache_hits: float | None = None  # … shard uses its cache served
    data_cache_misses: float | None = None  # … shard uses that fetched from the store

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


ROW_FIELDS = tuple(f.name for f in dataclasses.fields(MetricRow))
SPLITS = ("train", "val")  # the passes of an epoch that are scored
SCORES = ("loss", "accuracy", "mae")  # each pass's scores; a result has `test_…` ones too


def score_field(split: str, score: str) -> str:
    """The name of a split's score: `train_loss`, `val_accuracy` (a row's), `test_mae`."""
    return f"{split}_{score}"


@dataclass(frozen=True)
class Dataset:
    """An uploaded data set; `raw` keeps every field the server sent."""

    id: str
    name: str
    task: str | None = None
    samples: int | None = None
    classes: int | None = None
    shape: list[Any] = field(default_factory=list)
    kind: str | None = None  # values, or tokens (x holds token ids below vocab)
    vocab: int | None = None
    created_at: datetime | None = None
    status: str | None = None  # ingesting, ready or failed
    rows: int | None = None
    bytes: int | None = None
    version: str | None = None
    error: str | None = None
    progress: float | None = None
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Predictions:
    """One prediction per row: a class (name or index) or a value; classification adds the
    probability of each class per row."""

    predictions: list[Any]
    probabilities: list[list[float]] | None = None


@dataclass(frozen=True)
class WorkerInfo:
    """A live worker as its heartbeats describe it."""

    name: str
    hostname: str | None = None  # shown to admin keys only, as devices are
    gpus: int = 0
    devices: list[Any] = field(default_factory=list)
    busy: bool = False
    current_job_id: str | None = None
    heartbeat_at: datetime | None = None


@dataclass(frozen=True)
class Event:
    """A live event: `transition` (a status change) or `epoch` (a metrics row)."""

    type: str
    data: dict[str, Any]
    id: str | None = None

    @property
    def terminal(self) -> bool:
        return self.type == "transition" and self.data.get("to_status") in TERMINAL

    @classmethod
    def from_sse(cls, kind: str, data: str, event_id: str | None) -> Event:
        try:
            payload = json.loads(data)
        except json.JSONDecodeError:
            payload = {"text": data}
        return cls(kind, payload if isinstance(payload, dict) else {"value": payload}, event_id)


def _parse_time(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return value
    return value


def build(cls: type[T], data: dict[str, Any]) -> T:
    """An instance of the dataclass from an API object, keeping only the fields it declares."""
    hints = get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    values = {
        k: _parse_time(v) if "datetime" in str(hints[k]) else v
        for k, v in data.items()
        if k in names and k != "raw"
    }
    if "raw" in names:
        values["raw"] = dict(data)
    return cls(**values)


def parse_sse(lines: Iterable[str]) -> Iterator[Event]:
    """Events from text/event-stream lines (the WHATWG rules: data lines joined, comments out)."""
    data: list[str] = []
    kind, event_id = "message", None
    for line in lines:
        if not line:
            if data:
                yield Event.from_sse(kind, "\n".join(data), event_id)
            kind, data, event_id = "message", [], None
            continue
        if line.startswith(":"):
            continue  # keep-alive comment
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            kind = value
        elif field == "data":
            data.append(value)
        elif field == "id":
            event_id = value
