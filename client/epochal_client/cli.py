"""The `epochal` client commands: talk to a running service through epochal_client.client.

They read EPOCHAL_URL (default http://127.0.0.1:8000) and EPOCHAL_API_KEY, else the key file
that `epochal up` writes ($EPOCHAL_HOME/api-key).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from importlib.metadata import entry_points
from pathlib import Path
from typing import Annotated, Any

import typer

from epochal_client import predict_files, predict_images, render, tensorboard_export
from epochal_client.client import FORMAT_ALIASES, MODEL_FORMATS, Client
from epochal_client.datasets_cli import datasets
from epochal_client.follow import follow_job
from epochal_client.sweep_cli import sweep
from epochal_client.terminal import connect, console, errors, load_spec, with_sets

COMMANDS_GROUP = "epochal.commands"  # where a server distribution adds its verbs


def submit(
    spec_file: Annotated[Path, typer.Argument(help="a job spec, .json or .yaml")],
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="show progress until the end")
    ] = False,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="override a field, repeatable: training.epochs=10"),
    ] = None,
) -> None:
    """Submit a job and print its id; with --follow, exit 0 on succeeded, 1 failed, 3 cancelled."""
    spec = load_spec(spec_file, set_ or [])
    with connect() as client:
        job = client.submit(spec)
        console.print(job.id, highlight=False)
        if follow:
            raise typer.Exit(follow_job(client, job, console))


def follow(job_id: Annotated[str, typer.Argument()]) -> None:
    """Follow a job until it ends (exit code as for submit --follow)."""
    with connect() as client:
        raise typer.Exit(follow_job(client, client.get(job_id), console))


def jobs(
    status: Annotated[str | None, typer.Option(help="queued, running, succeeded, …")] = None,
    framework: Annotated[str | None, typer.Option(help="pytorch or tensorflow")] = None,
    limit: Annotated[int, typer.Option(help="at most this many, newest first")] = 20,
) -> None:
    """List jobs, newest first."""
    with connect() as client:
        console.print(render.jobs_table(client.list(status, framework, limit)))


def show(
    job_id: Annotated[str, typer.Argument()],
    as_json: Annotated[bool, typer.Option("--json", help="the raw job as JSON")] = False,
) -> None:
    """Show one job: status, progress, model layers, result, error, transitions."""
    with connect() as client:
        job = client.get(job_id)
    if as_json:
        print(json.dumps(job.__dict__, default=str, indent=2))
        return
    console.print(render.job_details(job))
    if layers := render.layers_table(job):
        console.print(layers)
    for table in render.evaluation_tables(job.result):
        console.print(table)
    console.print(render.transitions_table(job))


def metrics(
    job_id: Annotated[str, typer.Argument()],
    csv: Annotated[bool, typer.Option("--csv", help="CSV on stdout")] = False,
    plot: Annotated[
        Path | None, typer.Option(help="write loss and accuracy curves to FILE.png")
    ] = None,
) -> None:
    """Per-epoch metrics as a table, CSV, or a plot."""
    with connect() as client:
        job, rows = client.get(job_id), client.metrics(job_id)
    if csv:
        sys.stdout.write(render.metrics_csv(rows))
    elif plot is None:
        console.print(render.metrics_table(rows))
    if plot is not None:
        try:
            render.plot_metrics(job, rows, plot)
        except RuntimeError as exc:
            errors.print(f"[red]error:[/] {exc}")
            raise typer.Exit(1) from None
        errors.print(f"wrote {plot}")


def logs(
    job_id: Annotated[str, typer.Argument()],
    tail: Annotated[int, typer.Option(help="lines from the end")] = 200,
    follow_: Annotated[
        bool, typer.Option("--follow", "-f", help="keep printing new lines")
    ] = False,
    rank: Annotated[
        int,
        typer.Option(
            "--rank",
            "--member",
            min=0,
            help="a multi-node job's node rank (--member: its old name)",
        ),
    ] = 0,
) -> None:
    """The job's log (the training process's output)."""
    with connect() as client:
        shown = client.logs(job_id, tail, rank)
        for line in shown:
            print(line)
        while follow_:
            time.sleep(1.0)
            ended = client.get(job_id).done  # read the log after this, so its last lines show
            current = client.logs(job_id, max(tail, 1000), rank)
            for line in new_lines(shown, current):
                print(line, flush=True)
            shown = current
            follow_ = not ended


def new_lines(before: list[str], now: list[str]) -> list[str]:
    """Lines of `now` after the overlap with `before` (both are tails of the same growing log)."""
    for shift in range(len(before) + 1):
        overlap = before[shift:]
        if now[: len(overlap)] == overlap:
            return now[len(overlap) :]
    return now


def cancel(job_id: Annotated[str, typer.Argument()]) -> None:
    """Cancel a job: a queued one never runs; a running one stops at the next step."""
    with connect() as client:
        job = client.cancel(job_id)
    console.print(f"{job.id} {render.status_text(job.status)}")


def continue_(
    job_id: Annotated[str, typer.Argument()],
    epochs: Annotated[int, typer.Option(help="epochs more, numbered on from the job's")],
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="change what the checkpoint does not fix, repeatable: priority=5, "
            "early_stopping.patience=4, tags.team=vision",
        ),
    ] = None,
) -> None:
    """Continue a succeeded job from its last checkpoint in a new job; print the new id."""
    changes = with_sets({}, set_ or [])
    with connect() as client:
        console.print(client.continue_job(job_id, epochs, changes).id, highlight=False)


def delete(job_id: Annotated[str, typer.Argument()]) -> None:
    """Delete a finished job: its metrics, events, model and files (refused until it ends)."""
    with connect() as client:
        client.delete_job(job_id)
    console.print(f"{job_id} deleted", highlight=False)


def download(
    job_id: Annotated[str, typer.Argument()],
    path: Annotated[Path, typer.Argument(help="file or folder")] = Path("."),
    format: Annotated[
        str,
        typer.Option(
            "--format",
            help="native (model.pt / model.keras), onnx, or model-card (model-card.json)",
        ),
    ] = "native",
) -> None:
    """Download the trained model, its portable model.onnx, or its model card."""
    if FORMAT_ALIASES.get(format, format) not in MODEL_FORMATS:
        errors.print(f"--format is one of {', '.join(MODEL_FORMATS)}, not {format!r}")
        raise typer.Exit(2)
    with connect() as client:
        saved = client.download_model(job_id, path, format)
    console.print(f"saved {saved}", highlight=False)


def predict(
    job_id: Annotated[str, typer.Argument()],
    files: Annotated[
        list[Path],
        typer.Argument(help=".npy, .npz (array x), .csv or .json rows; or JPEG/PNG images"),
    ],
    as_json: Annotated[bool, typer.Option("--json", help="the answer as JSON")] = False,
    batch: Annotated[int, typer.Option(min=1, help="rows per request")] = 256,
) -> None:
    """Predict raw rows, or image files, with a succeeded job's model (served by the API with
    ONNX Runtime)."""
    images = [f for f in files if predict_images.is_image(f)]
    if (images and len(images) != len(files)) or (not images and len(files) != 1):
        raise typer.BadParameter("give one file of rows, or image files only")
    with connect() as client:
        try:
            rows = (
                _image_rows(client, job_id, files) if images else predict_files.read_rows(files[0])
            )
        except (OSError, ValueError) as exc:
            raise typer.BadParameter(str(exc)) from exc
        parts = [client.predict(job_id, part) for part in predict_files.batches(rows, batch)]
    answer = predict_files.merge(parts)
    if as_json:
        print(json.dumps({k: v for k, v in answer.__dict__.items() if v is not None}))
    else:
        console.print(predict_files.predictions_table(answer))


def _image_rows(client: Client, job_id: str, files: list[Path]) -> Any:
    """The images as the rows the job's model takes (its model card says their shape)."""
    with tempfile.TemporaryDirectory() as folder:
        card = json.loads(client.download_model(job_id, folder, "model-card").read_text())
    return predict_images.image_rows(files, card["input"]["shape"][1:])


def tensorboard(
    job_ids: Annotated[list[str], typer.Argument(help="one or more jobs")],
    logdir: Annotated[Path, typer.Option(help="where the runs go")] = Path("runs"),
) -> None:
    """Write jobs' metrics and hyperparameters as TensorBoard runs: tensorboard --logdir DIR."""
    with connect() as client:
        for job_id in job_ids:
            job, rows = client.get(job_id), client.metrics(job_id)
            try:
                run_dir = tensorboard_export.write_run(logdir, job, rows)
            except RuntimeError as exc:
                errors.print(f"[red]error:[/] {exc}")
                raise typer.Exit(1) from None
            console.print(f"{run_dir}  {len(rows)} epochs", highlight=False)


def workers() -> None:
    """Live workers, their GPUs and current job."""
    with connect() as client:
        console.print(render.workers_table(client.workers()))


def queue(limit: Annotated[int, typer.Option(help="own jobs listed at most")] = 50) -> None:
    """The queue: position, estimated start and why each of your jobs waits; others' counts."""
    with connect() as client:
        view = client.queue(limit)
    console.print(render.queue_table(view))
    console.print(
        f"{view['queued']} queued in all" + (" (list truncated)" if view["truncated"] else "")
    )


def register_client_commands(cli: typer.Typer) -> None:
    """Add the client commands to a Typer app."""
    verbs = (submit, follow, jobs, show, metrics, logs, cancel, delete, download, predict)
    for command in (*verbs, tensorboard, workers, queue):
        cli.command()(command)
    cli.command(name="continue")(continue_)
    cli.add_typer(datasets, name="datasets")
    cli.add_typer(sweep, name="sweep")


def build_cli() -> typer.Typer:
    """The user's `epochal`: the client verbs, plus whatever an installed server adds.

    A server distribution registers a function under the `epochal.commands` entry point group;
    it gets this Typer app and adds its verbs (up, api, worker, migrate, keys). With the client
    alone installed there is none, and only the client verbs exist.
    """
    cli = typer.Typer(help="epochal: a REST training-job service.", no_args_is_help=True)
    register_client_commands(cli)
    for entry in entry_points(group=COMMANDS_GROUP):
        entry.load()(cli)
    return cli


def main() -> None:
    build_cli()()


if __name__ == "__main__":
    main()
