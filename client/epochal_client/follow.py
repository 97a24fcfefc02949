"""`--follow`: a progress bar over epochs and a live table of the latest metrics until the end.

The events say when an epoch ends; between them a thread reads the job every STEP_POLL_SECONDS
for its step progress, so the bar (and its ETA) moves within an epoch, the first one too.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import httpx
import typer
from rich.console import Console, Group
from rich.live import Live
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from epochal_client.client import Client
from epochal_client.render import fmt, status_text, steps_text
from epochal_client.types import (
    SCORES,
    SPLITS,
    ApiError,
    Event,
    Job,
    MetricRow,
    build,
    score_field,
)

EXIT_CODES = {"succeeded": 0, "failed": 1, "cancelled": 3}
DETACHED = 130  # Ctrl-C, job left running
STEP_POLL_SECONDS = 2.0  # the server's step progress is a second or so old at best
# Short headings so the live table fits an 80-column terminal: each score, training and
# validation side by side, then the rate and the epoch's time (its speed is on the bar).
SHORT = {"train": "", "val": "val ", "accuracy": "acc"}
LIVE_COLUMNS = {
    "epoch": "epoch",
    **{
        score_field(split, score): SHORT[split] + SHORT.get(score, score)
        for score in SCORES
        for split in SPLITS
    },
    "learning_rate": "lr",
    "epoch_seconds": "seconds",
    "data_wait_seconds": "input wait",
    "data_read_bytes": "read B",
    "data_cache_hits": "hits",
    "data_cache_misses": "misses",
}


@dataclass
class View:
    """The live display: a progress bar and the latest epoch's row."""

    job: Job
    progress: Progress = field(init=False)
    task: TaskID = field(init=False)
    latest: MetricRow | None = None
    completed: float = 0.0  # epochs done, with the share of the one in progress

    def __post_init__(self) -> None:
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("epochs"),
            TextColumn("{task.fields[steps]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[speed]}"),
        )
        self.task = self.progress.add_task(
            status_text(self.job.status), total=self.job.epochs, speed="", steps=""
        )
        self.apply_job(self.job)

    def apply_job(self, job: Job) -> None:
        """Move the bar within the epoch in progress, from a fresh read of the job (never
        back: a read sent before an epoch's event may arrive after it)."""
        if job.epochs_done >= self.completed:
            self.completed = job.epochs_done
            self.progress.update(self.task, completed=self.completed, steps=steps_text(job))

    def apply(self, event: Event) -> str | None:
        """Update from one event; returns a line to print above the display, if any."""
        if event.type == "epoch":
            self.latest = build(MetricRow, event.data)
            speed = self.latest.samples_per_second
            self.completed = self.latest.epoch
            self.progress.update(
                self.task,
                completed=self.completed,
                speed=f"{speed:,.0f} samples/s" if speed else "",
                steps="",
            )
            return None
        if event.type == "transition":
            before, to = event.data.get("from_status") or "–", event.data.get("to_status", "?")
            self.progress.update(self.task, description=status_text(to))
            return f"{before} → {status_text(to)}: {event.data.get('reason', '')}"
        return None

    def render(self) -> Group:
        if self.latest is None:
            return Group(self.progress)
        shown = {k: v for k, v in LIVE_COLUMNS.items() if getattr(self.latest, k) is not None}
        table = Table(*shown.values(), box=None)
        table.add_row(*(fmt(getattr(self.latest, k)) for k in shown))
        return Group(self.progress, table)


@contextmanager
def polling_steps(client: Client, view: View, every: float = STEP_POLL_SECONDS) -> Iterator[None]:
    """While the block runs, read the job every `every` seconds into the view's bar."""
    stopped = threading.Event()

    def poll() -> None:
        while not stopped.wait(every):
            try:
                view.apply_job(client.get(view.job.id))
            except (ApiError, httpx.HTTPError, RuntimeError):  # the stream reports trouble
                continue

    threading.Thread(target=poll, name="follow-steps", daemon=True).start()
    try:
        yield
    finally:
        stopped.set()


def _watch(client: Client, view: View, console: Console) -> None:
    live = Live(view.render(), console=console, refresh_per_second=4)
    with live, polling_steps(client, view):
        for event in client.follow(view.job.id):
            line = view.apply(event)
            if line:
                live.console.print(line)
            live.update(view.render())


def ctrl_c_interrupts() -> None:
    """Make Ctrl-C raise KeyboardInterrupt even where it was ignored when we started.

    A shell starts a background job (`cmd &`, a CI step, a test runner run that way) with
    SIGINT ignored, and Python then installs no handler: the Ctrl-C that must bring up the
    cancel prompt would do nothing at all while the job trains on.
    """
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)


def follow_job(client: Client, job: Job, console: Console) -> int:
    """Follow until the job ends; Ctrl-C asks whether to cancel it. Returns the exit code."""
    ctrl_c_interrupts()
    view = View(job)
    try:
        _watch(client, view, console)
    except KeyboardInterrupt:
        try:
            cancel = typer.confirm(f"\nCancel job {job.id}?", default=False)
        except (typer.Abort, EOFError):
            cancel = False
        if not cancel:
            console.print(f"left running; follow again with: epochal follow {job.id}")
            return DETACHED
        client.cancel(job.id)
        console.print("cancel requested; waiting for the job to stop")
        _watch(client, view, console)
    console.print()
    final = client.get(job.id)
    summary = f"job {final.id} {status_text(final.status)} ({final.stop_reason})"
    console.print(summary)
    if final.error:
        console.print(f"[red]{final.error_code}: {final.error}[/]")
    for key, value in (final.result or {}).items():
        if key.endswith(SCORES):
            console.print(
                f"  {key}: {value:.4f}" if isinstance(value, float) else f"  {key}: {value}"
            )
    return EXIT_CODES.get(final.status, 1)
