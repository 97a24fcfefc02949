"""`epochal datasets upload | add | show | list`: data sets from the command line.

`upload` sends a file of one part or less in one request (stored whole, ready at once) and a
larger one as a resumable upload, ingested into shards; rerun on the same file, it goes on
from what the server holds. A directory (an image folder, or WebDataset tar shards) is packed
into one tar file (packed.py) and sent as a resumable upload the same way. `add` registers
files the server may read; `show` prints the resource, its status, rows, bytes, classes,
version and error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn
from rich.table import Table

from epochal_client import packed, render, resumable
from epochal_client.client import Client
from epochal_client.terminal import connect, console, errors
from epochal_client.types import Dataset, build

datasets = typer.Typer(help="Data sets: upload, register, show and list.", no_args_is_help=True)
SHOWN = ("id", "name", "status", "rows", "bytes", "classes", "version", "error")


def _send_resumable(client: Client, path: Path, fields: resumable.UploadFields) -> Dataset:
    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        console=errors,
        transient=True,
    ) as bar:
        label = fields.filename or path.name
        task = bar.add_task(label, total=path.stat().st_size)

        def moved(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        return build(Dataset, resumable.upload(client, path, fields, moved))


@datasets.command("upload")
def datasets_upload(
    path: Annotated[
        Path,
        typer.Argument(
            help=".npz with arrays x and y, .npy, .csv, or a directory (image folder, or "
            "WebDataset .tar shards)"
        ),
    ],
    name: Annotated[str | None, typer.Option(help="default: the file name")] = None,
    label_column: Annotated[str | None, typer.Option(help="CSV: the label column")] = None,
    task: Annotated[str | None, typer.Option(help="classification or regression")] = None,
    kind: Annotated[
        str | None, typer.Option(help="values (default) or tokens: x holds token ids")
    ] = None,
    format: Annotated[
        str | None,
        typer.Option(
            help="when the suffix does not say it; a directory: webdataset if it holds only "
            ".tar files, else image_folder"
        ),
    ] = None,
    resumable_: Annotated[
        bool,
        typer.Option("--resumable", help="send in parts and ingest into shards, whatever the size"),
    ] = False,
) -> None:
    """Upload a file or a directory (image folder, tar shards) and print its id; rerun, it resumes.

    Use the id as dataset.id in a spec. A file over one part (8 MiB) goes in parts and is
    ingested into shards (`datasets show` tells when it is ready). A directory (an image
    folder, or WebDataset shards: shard-000.tar, shard-001.tar, ...) is packed into one tar
    file (kept in the cache folder until it is sent) and sent in parts the same way."""
    if path.is_dir():
        _upload_directory(path, name, task, format)
        return
    if not path.is_file():
        errors.print(
            f"[red]error:[/] {path} is neither a file nor a directory: upload one file "
            "(.npz, .npy, .csv) or a directory (image folder, tar shards)",
            highlight=False,
        )
        raise typer.Exit(1)
    large = path.stat().st_size > resumable.PART_BYTES
    with connect() as client:
        if (large or resumable_ or format) and kind != "tokens":
            fields = resumable.UploadFields(name or path.stem, task, label_column, format)
            dataset = _send_resumable(client, path, fields)
        else:
            dataset = client.upload_dataset(path, name, label_column, task, kind)
    console.print(dataset.id, highlight=False)


def directory_format(path: Path) -> str:
    """webdataset for a directory of tar shards (every file in it a .tar, hidden ones aside),
    else image_folder."""
    files = [p for p in path.rglob("*") if p.is_file() and not p.name.startswith(".")]
    shards = bool(files) and all(p.suffix.lower() == ".tar" for p in files)
    return "webdataset" if shards else "image_folder"


def _upload_directory(path: Path, name: str | None, task: str | None, format: str | None) -> None:
    """Pack the directory (or reuse its tar, packed before from the same files) and send it."""
    title = path.resolve().name
    fields = resumable.UploadFields(
        name or title, task, None, format or directory_format(path), filename=f"{title}.tar"
    )
    tar = packed.packed(path)
    with connect() as client:
        dataset = _send_resumable(client, tar, fields)
    packed.forget(path)
    console.print(dataset.id, highlight=False)


@datasets.command("add")
def datasets_add(
    source: Annotated[str, typer.Argument(help="a server path under an allowed root, or s3://…")],
    format: Annotated[str | None, typer.Option(help="when the source does not say it")] = None,
    name: Annotated[str | None, typer.Option(help="default: the source's name")] = None,
    label_column: Annotated[str | None, typer.Option(help="CSV: the label column")] = None,
    task: Annotated[str | None, typer.Option(help="classification or regression")] = None,
) -> None:
    """Register files the server may read as a data set (ingested) and print its id.

    `epochal datasets show ID` tells when it is ready."""
    with connect() as client:
        dataset = client.add_dataset(
            source, format=format, name=name, label_column=label_column, task=task
        )
    console.print(dataset.id, highlight=False)


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else render.fmt(value)


@datasets.command("show")
def datasets_show(
    dataset_id: Annotated[str, typer.Argument()],
    json_: Annotated[bool, typer.Option("--json", help="the whole resource as JSON")] = False,
) -> None:
    """One data set: status, rows, bytes, classes, version and error."""
    with connect() as client:
        dataset = client.dataset(dataset_id)
    if json_:
        console.print_json(json.dumps(dataset.raw))
        return
    table = Table(box=None, show_header=False)
    raw = dataset.raw
    for field in SHOWN:
        value = raw.get(field)
        if field == "status" and value == "ingesting" and raw.get("progress") is not None:
            value = f"ingesting ({raw['progress']:.0%})"
        table.add_row(field, _shown(value))
    table.add_row("shape", "x".join(map(str, dataset.shape)) or "–")
    console.print(table)


@datasets.command("list")
def datasets_list() -> None:
    """List data sets."""
    with connect() as client:
        rows = client.datasets()
    table = Table(
        "id", "name", "status", "task", "samples", "classes", "shape", "created", box=None
    )
    for d in rows:
        table.add_row(
            d.id,
            d.name,
            d.status or "–",
            d.task or "–",
            render.fmt(d.samples),
            render.fmt(d.classes),
            "x".join(map(str, d.shape)) or "–",
            render.fmt(d.created_at),
        )
    console.print(table)
