"""Image folders: one subfolder per class (the class names are the folder names, sorted), each
holding JPEG or PNG files of any size. Every image becomes a record of one size and colour
(see _images). The files are stored in one fixed shuffle of (class, name) order: a job holds out
the last records for validation and `limit` takes the first ones, and neither may be one class.

The folder may come as a tar file (what `epochal datasets upload DIR` sends): members
`CLASS/FILE`, optionally inside one top-level folder, read one member at a time from the tar,
never extracted; it gives the records, classes and errors the folder itself gives."""

from __future__ import annotations

import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

import numpy as np

from app.shards.ingest._image_tar import TarFolder
from app.shards.ingest._images import IMAGE_SUFFIXES, ImageFitter, read_bytes
from app.shards.ingest.base import Format, IngestError, Options, Source, decoded_chunks

T = TypeVar("T")
# A record's file: its name (DIR/CLASS/FILE), its label, and its path or the bytes read already.
Item = tuple[str, int, Path | bytes]


def classes_of(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))


def is_image_folder(path: Path) -> bool:
    return bool(classes_of(path)) and not any(
        p.is_file() and not p.name.startswith(".") for p in path.iterdir()
    )


SHUFFLE_SEED = 0  # fixed: the same folder gives the same records, so the same version


def shuffled(listed: list[T]) -> Iterator[T]:
    """The files in the fixed shuffle; the first file (class, then name) stays first: its size
    is the records' (ImageFitter)."""
    rest = np.random.default_rng(SHUFFLE_SEED).permutation(len(listed) - 1) + 1
    for i in (0, *rest) if listed else ():
        yield listed[i]


def _folder_items(path: Path) -> tuple[list[str], Iterator[Item]]:
    classes = classes_of(path)
    if not classes:
        raise IngestError(path.name, "no class folders: one subfolder per class")
    listed = [
        (f"{path.name}/{file.relative_to(path).as_posix()}", label, file)
        for label, folder in enumerate(classes)
        for file in sorted(folder.iterdir())
        if file.is_file() and file.suffix.lower() in IMAGE_SUFFIXES
    ]
    return [c.name for c in classes], shuffled(listed)


def _tar_items(path: Path) -> tuple[list[str], Iterator[Item]]:
    try:
        archive = TarFolder(path)
    except tarfile.TarError as exc:
        why = f"neither a directory of class folders nor a tar of one: {exc}"
        raise IngestError(path.name, why) from exc
    if not archive.classes:
        raise IngestError(archive.top, "no class folders: one subfolder per class")

    def items() -> Iterator[Item]:
        with archive:  # read here, one member at a time; decoded by the threads
            for name, label, member in shuffled(archive.listed):
                yield name, label, archive.read(member, name)

    return archive.classes, items()


def read(path: Path, options: Options) -> Source:
    if path.is_dir():
        classes, files = _folder_items(path)
    elif path.is_file():
        classes, files = _tar_items(path)
    else:
        raise IngestError(path.name, "an image folder is a directory of class folders")
    try:
        fitter = ImageFitter(options.image_size, options.color)
    except ValueError as exc:
        raise IngestError(path.name, str(exc)) from exc
    first = next(files, None)
    if first is None:
        raise IngestError(path.name, f"no {', '.join(IMAGE_SUFFIXES)} file in its class folders")

    def decode(item: Item, record: int) -> tuple[np.ndarray, int]:
        name, label, held = item
        data = held if isinstance(held, bytes) else read_bytes(held, name, record)
        return fitter(data, name, record), label

    head = decode(first, 0)
    step = options.rows_per_chunk(head[0].shape, head[0].dtype)
    chunks = decoded_chunks(head, files, decode, step)
    return Source(chunks, head[0].shape, head[0].dtype, classes)


FORMAT = Format("image_folder", (), read, claims_directory=is_image_folder)
