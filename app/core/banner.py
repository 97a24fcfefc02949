"""What `epochal up` prints once the service is ready: where it runs, the dashboard, the key
file, and how to point the CLI and curl at it from any directory.

It waits until the API answers and the worker has sent a heartbeat, so Celery's own banner and
start-up warnings come first and this stays at the bottom of the terminal, where it is read.
"""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path

import httpx
import typer

from app.core.config import Settings

READY_WAIT_SECONDS = 120.0  # then the banner is printed anyway, saying what is missing
LOOK_EVERY_SECONDS = 0.5
EXAMPLE = '{"framework":"pytorch","dataset":{"name":"digits"},"training":{"epochs":5}}'


class Banner:
    """Printed once, from `up`'s wait loop (tick), when the API and a worker are live."""

    def __init__(self, settings: Settings, key: str) -> None:
        self.settings, self.key = settings, key
        self.url = f"http://{settings.host}:{settings.port}"
        self.started = time.monotonic()
        self.next_look, self.printed = 0.0, False

    def tick(self) -> None:
        now = time.monotonic()
        if self.printed or now < self.next_look:
            return
        self.next_look = now + LOOK_EVERY_SECONDS
        ready = self._workers_live()
        if ready or now - self.started > READY_WAIT_SECONDS:
            self.printed = True
            note = "" if ready else "  (no worker has reported yet: see its output above)"
            typer.echo(text(self.settings, self.url) + note)

    def _workers_live(self) -> bool:
        """The API answers and lists a live worker (the heartbeat comes after Celery's banner)."""
        probe = self.url.replace("://0.0.0.0:", "://127.0.0.1:")
        try:
            answer = httpx.get(
                f"{probe}/v1/workers", headers={"Authorization": f"Bearer {self.key}"}, timeout=2
            )
            return answer.status_code == 200 and bool(answer.json().get("items"))
        except (httpx.HTTPError, ValueError):
            return False


def cli_path() -> str:
    """The `epochal` beside this interpreter (make run's .venv/bin/epochal), else the name."""
    beside = Path(sys.executable).parent / "epochal"
    return str(beside) if beside.exists() else "epochal"


def text(settings: Settings, url: str) -> str:
    key_file = settings.resolved_api_key_file
    auth = f'-H "Authorization: Bearer $(cat {shlex.quote(str(key_file))})"'
    home = shlex.quote(str(settings.resolved_home))
    point = f"export EPOCHAL_HOME={home} EPOCHAL_URL={url}"
    if key_file != settings.resolved_home / "api-key":
        point += f" EPOCHAL_API_KEY_FILE={shlex.quote(str(key_file))}"
    cli = cli_path()
    on_path = f"; `source {Path(cli).parent}/activate` puts it on PATH" if "/" in cli else ""
    return (
        f"\nepochal is up on {url}\n"
        f"  dashboard  {url}/ui  (log in with the admin key)\n"
        f"  API docs   {url}/docs\n"
        f"  admin key  {key_file}  (mode 0600)\n"
        f"  home       {settings.resolved_home}  (database, broker, models, logs)\n"
        f"The CLI is {cli}{on_path}. From any directory, point it here:\n"
        f"  {point}\n"
        "  epochal submit examples/pytorch-simplenn-steplr.yaml --follow --set training.epochs=3\n"
        "  epochal jobs\n"
        f"Or with curl:\n  curl -s -X POST {url}/v1/jobs {auth} "
        f"-H 'Content-Type: application/json' -d '{EXAMPLE}'\n"
        f"  curl -s {auth} {url}/v1/jobs/JOB_ID\n"
        f"  curl -s {auth} {url}/v1/jobs/JOB_ID/metrics\n"
        "Ctrl-C stops the API, the worker and its training processes.\n"
    )
