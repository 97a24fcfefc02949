"""The server verbs of `epochal` (migrate, api, worker, up, keys); the client distribution
holds the rest and finds these through the `epochal.commands` entry point (`register`)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from app.core.banner import Banner
from app.core.children import (
    STOP_GRACE_SECONDS,
    Children,
    StopRequest,
    become_subreaper,
    stale,
    stale_message,
)
from app.core.config import get_settings

if TYPE_CHECKING:
    from alembic.config import Config

cli = typer.Typer(help="epochal: a REST training-job service.", no_args_is_help=True)
keys = typer.Typer(help="API keys: create, list, revoke.", no_args_is_help=True)
cli.add_typer(keys, name="keys")


def alembic_config() -> Config:
    """Alembic's settings without alembic.ini: the scripts ship inside the package."""
    from alembic.config import Config

    import migrations

    config = Config()
    config.set_main_option("script_location", str(Path(migrations.__file__).parent))
    return config


def refuse_unsafe_production() -> None:
    """With EPOCHAL_PRODUCTION set, stop before serving on settings anyone could guess."""
    from app.core.production import production_problems

    problems = production_problems(get_settings())
    for problem in problems:
        typer.echo(f"epochal: refusing to start (EPOCHAL_PRODUCTION is set): {problem}", err=True)
    if problems:
        typer.echo("set strong passwords (DEPLOY.md, section 1) and start again", err=True)
        raise typer.Exit(2)


@cli.command()
def migrate(revision: Annotated[str, typer.Argument(help="target revision")] = "head") -> None:
    """Apply the Alembic migrations to the configured database."""
    from alembic import command

    refuse_unsafe_production()
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
    refuse_unsafe_production()
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
        timeout_graceful_shutdown=5,  # an open event stream must not hold a SIGTERM up
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
    refuse_unsafe_production()
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
    """Revoke a key (401 within a second) and cancel its running sweeps and unfinished jobs.

    API processes cache a key 1 s; a running job stops at its next step boundary."""
    import time

    from app.core.db import session_scope
    from app.domain.keys import KEY_CACHE_SECONDS
    from app.services.revocation import end_work, revoke_key

    with session_scope() as session:
        ended = revoke_key(session, key_id)
        if ended is None:
            typer.echo(f"no active key {key_id}", err=True)
            raise typer.Exit(1)
    # An API process may still accept the key for its cache's life: what it admitted then
    # is ended by a second pass.
    time.sleep(KEY_CACHE_SECONDS + 0.5)
    with session_scope() as session:
        late = end_work(session, key_id)
    jobs, sweeps = ended.jobs + late.jobs, ended.sweeps + late.sweeps
    typer.echo(f"revoked {key_id}; cancelled {sweeps} sweep(s) and {jobs} unfinished job(s)")


@keys.command("set-weight")
def keys_set_weight(
    key_id: Annotated[str, typer.Argument(help="the id shown by keys list")],
    weight: Annotated[float, typer.Argument(min=0.01, max=1000, help="share against others (1)")],
) -> None:
    """Set a key's fair-share weight: a key of weight 2 may use twice the GPU-seconds."""
    _set_share(key_id, weight=weight)
    typer.echo(f"key {key_id}: share weight {weight:g}")


@keys.command("set-max-priority")
def keys_set_max_priority(
    key_id: Annotated[str, typer.Argument(help="the id shown by keys list")],
    priority: Annotated[int | None, typer.Argument(min=0, max=100, help="omit: no cap")] = None,
) -> None:
    """Cap the priority a key's jobs and sweeps may ask (omit the number to lift the cap)."""
    _set_share(key_id, max_priority=priority, clear_cap=priority is None)
    typer.echo(f"key {key_id}: max priority {'none' if priority is None else priority}")


def _set_share(key_id: str, **change: Any) -> None:
    from app.core.db import session_scope
    from app.domain.keys import set_share

    with session_scope() as session:
        if set_share(session, key_id, **change) is None:
            typer.echo(f"no key {key_id}", err=True)
            raise typer.Exit(1)


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
    """Migrate, then run the API and one worker until Ctrl-C, SIGTERM or SIGHUP."""
    stop = StopRequest()
    stop.install()
    become_subreaper()
    settings = get_settings()
    if found := stale(settings.up_pids_file):
        typer.echo(stale_message(found, settings.up_pids_file), err=True)
        raise typer.Exit(1)
    migrate("head")
    key = ensure_admin_key()
    env = {**os.environ, "EPOCHAL_HOME": str(settings.resolved_home)}
    # Sessions of their own: a closed terminal's SIGHUP (a restart, for Celery) or a Ctrl-C
    # reaches `up` alone, which stops the two in order and can kill each group as one.
    children = Children(settings.up_pids_file, stop)
    try:
        for verb in ("api", "worker"):
            children.start(verb, [sys.executable, "-m", "app.cli", verb], env)
        children.wait(Banner(settings, key).tick)
        if stop.requested:
            typer.echo(f"epochal up: stopping the API and the worker ({_grace()})", err=True)
    finally:
        children.stop_all()


def _grace() -> str:
    return f"at most {STOP_GRACE_SECONDS:.0f} s"


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
