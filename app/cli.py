"""The `epochal` command: server commands (migrate, api, worker, up)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from app.config import get_settings

cli = typer.Typer(help="epochal: a REST training-job service.", no_args_is_help=True)
ROOT = Path(__file__).resolve().parent.parent


def alembic_config():  # type: ignore[no-untyped-def]
    from alembic.config import Config

    config = Config(str(ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(ROOT / "migrations"))
    return config


@cli.command()
def migrate(revision: Annotated[str, typer.Argument(help="target revision")] = "head") -> None:
    """Apply the Alembic migrations to the configured database."""
    from alembic import command

    settings = get_settings()
    settings.resolved_home.mkdir(parents=True, exist_ok=True)
    command.upgrade(alembic_config(), revision)
    typer.echo(f"database at {revision}: {_redact(settings.sqlalchemy_url)}")


def _redact(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


@cli.command()
def api(
    port: Annotated[int | None, typer.Option(help="default EPOCHAL_PORT")] = None,
    host: Annotated[str | None, typer.Option(help="default EPOCHAL_HOST")] = None,
    workers: Annotated[int, typer.Option(help="uvicorn worker processes")] = 1,
) -> None:
    """Serve the HTTP API with uvicorn."""
    import uvicorn

    settings = get_settings()
    uvicorn.run(
        "app.main:app",
        host=host or settings.host,
        port=port or settings.port,
        workers=workers,
        log_level="info",
        proxy_headers=False,
    )


def worker_argv(gpus: int, name: str | None) -> list[str]:
    queues = ",".join(f"gpus-{g}" for g in range(gpus + 1))
    argv = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "worker.celery_app",
        "worker",
        "-Q",
        queues,
        "-c",
        "1",
        "--pool",
        "prefork",
        "-l",
        "INFO",
        "--without-mingle",
        "--without-gossip",
    ]
    return argv + (["-n", name] if name else [])


@cli.command()
def worker(name: Annotated[str | None, typer.Option(help="Celery node name")] = None) -> None:
    """Run a Celery worker for the GPUs in EPOCHAL_WORKER_GPUS or CUDA_VISIBLE_DEVICES."""
    os.execv(sys.executable, worker_argv(len(get_settings().worker_gpu_ids), name))


@cli.command()
def up() -> None:
    """Migrate, then run the API and one worker until Ctrl-C (the embedded default)."""
    settings = get_settings()
    migrate("head")
    env = {**os.environ, "EPOCHAL_HOME": str(settings.resolved_home)}
    api_proc = subprocess.Popen([sys.executable, "-m", "app.cli", "api"], env=env)
    worker_proc = subprocess.Popen([sys.executable, "-m", "app.cli", "worker"], env=env)
    url = f"http://{settings.host}:{settings.port}"
    typer.echo(_banner(url))
    _wait_for_either(api_proc, worker_proc)


def _banner(url: str) -> str:
    body = '{"framework":"pytorch","dataset":{"name":"digits"},"training":{"epochs":5}}'
    return (
        f"\nepochal is starting on {url}  (API docs: {url}/docs)\n"
        f"Submit a job:\n  curl -s -X POST {url}/v1/jobs -H 'Content-Type: application/json' "
        f"-d '{body}'\n"
        f"Then poll:\n  curl -s {url}/v1/jobs/JOB_ID\n  curl -s {url}/v1/jobs/JOB_ID/metrics\n"
        "Ctrl-C stops the API and the worker.\n"
    )


def _wait_for_either(*procs: subprocess.Popen[bytes]) -> None:
    try:
        while all(p.poll() is None for p in procs):
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
