"""The server verbs of `epochal` (migrate, api, worker, up, keys); the client distribution
holds the rest and finds these through the `epochal.commands` entry point (`register`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from app.core.config import get_settings

cli = typer.Typer(help="epochal: a REST training-job service.", no_args_is_help=True)
keys = typer.Typer(help="API keys: create, list, revoke.", no_args_is_help=True)
cli.add_typer(keys, name="keys")


def alembic_config():  # type: ignore[no-untyped-def]
    """Alembic's settings without alembic.ini: the scripts ship inside the package."""
    from alembic.config import Config

    import migrations

    config = Config()
    config.set_main_option("script_location", str(Path(migrations.__file__).parent))
    return config


@cli.command()
def migrate(revision: Annotated[str, typer.Argument(help="target revision")] = "head") -> None:
    """Apply the Alembic migrations to the configured database."""
    from alembic import command

    settings = get_settings()
    settings.resolved_home.mkdir(parents=True, exist_ok=True)
    command.upgrade(alembic_config(), revision)
    if revision == "head":  # Optuna's tables for sweeps, beside ours (app.services.sweep_study)
        from app.services.sweep_study import ensure_tables

        ensure_tables()
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

    from app.core.log_setup import uvicorn_log_config
    from app.observability.telemetry import enable_multiprocess

    settings = get_settings()
    enable_multiprocess(workers)
    uvicorn.run(
        "app.main:app",
        host=host or settings.host,
        port=port or settings.port,
        workers=workers,
        log_level="info",
        log_config=uvicorn_log_config(),
        access_log=False,  # telemetry logs each request, with the job id it concerns
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


@keys.command("create")
def keys_create(
    name: Annotated[str, typer.Argument(help="who the key is for")],
    admin: Annotated[bool, typer.Option("--admin", help="sees and cancels every job")] = False,
) -> None:
    """Create a key; its plaintext is the last word of the output (shown only once)."""
    from app.core.db import session_scope
    from app.domain.keys import create_key

    with session_scope() as session:
        row, plaintext = create_key(session, name, is_admin=admin)
        typer.echo(f"created key {row.id} ({name}{', admin' if admin else ''}); store it now:")
    typer.echo(plaintext)


@keys.command("list")
def keys_list() -> None:
    """List keys (never their secrets)."""
    from app.core.db import session_scope
    from app.domain.keys import list_keys

    with session_scope() as session:
        for row in list_keys(session):
            state = f"revoked {row.revoked_at:%Y-%m-%d}" if row.revoked_at else "active"
            role = "admin" if row.is_admin else "user"
            typer.echo(
                f"{row.id}  {row.name:<24} {role:<5}  {state}  created {row.created_at:%Y-%m-%d}"
            )


@keys.command("revoke")
def keys_revoke(key_id: Annotated[str, typer.Argument(help="the id shown by keys list")]) -> None:
    """Revoke a key: requests with it get 401 from now on."""
    from app.core.db import session_scope
    from app.domain.keys import revoke

    with session_scope() as session:
        if not revoke(session, key_id):
            typer.echo(f"no active key {key_id}", err=True)
            raise typer.Exit(1)
    typer.echo(f"revoked {key_id}")


def ensure_admin_key() -> str:
    """The embedded default's admin key: reuse the key file while it is valid, else make one."""
    from app.core.db import session_scope
    from app.domain.keys import create_key, verify

    path = get_settings().resolved_api_key_file
    with session_scope() as session:
        if path.exists() and verify(session, path.read_text().strip()):
            return path.read_text().strip()
        _, plaintext = create_key(session, "local-admin", is_admin=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # the mode above applies only when the file is new
    with os.fdopen(fd, "w") as f:
        f.write(plaintext + "\n")
    return plaintext


@cli.command()
def up() -> None:
    """Migrate, then run the API and one worker until Ctrl-C (the embedded default)."""
    settings = get_settings()
    migrate("head")
    ensure_admin_key()
    env = {**os.environ, "EPOCHAL_HOME": str(settings.resolved_home)}
    api_proc = subprocess.Popen([sys.executable, "-m", "app.cli", "api"], env=env)
    worker_proc = subprocess.Popen([sys.executable, "-m", "app.cli", "worker"], env=env)
    url = f"http://{settings.host}:{settings.port}"
    typer.echo(_banner(url, settings.resolved_api_key_file))
    _wait_for_either(api_proc, worker_proc)


def _banner(url: str, key_file: Path) -> str:
    body = '{"framework":"pytorch","dataset":{"name":"digits"},"training":{"epochs":5}}'
    auth = f'-H "Authorization: Bearer $(cat {key_file})"'
    return (
        f"\nepochal is starting on {url}  (API docs: {url}/docs)\n"
        f"The admin API key is in {key_file} (mode 0600).\n"
        f"Submit a job:\n  curl -s -X POST {url}/v1/jobs {auth} "
        f"-H 'Content-Type: application/json' -d '{body}'\n"
        f"Then poll:\n  curl -s {auth} {url}/v1/jobs/JOB_ID\n"
        f"  curl -s {auth} {url}/v1/jobs/JOB_ID/metrics\n"
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


def register(target: typer.Typer) -> None:
    """Add the server verbs to the user's `epochal` (epochal_client.cli.build_cli)."""
    target.registered_commands.extend(cli.registered_commands)
    target.registered_groups.extend(cli.registered_groups)


def main() -> None:
    """`python -m app.cli`: the whole command, client verbs included."""
    from epochal_client.cli import build_cli

    build_cli()()


if __name__ == "__main__":
    main()
