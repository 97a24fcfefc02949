"""Image folders: one subfolder per class (the class names are the folder names, sorted), each
holding JPEG or PNG files of any size. Every image becomes a record of one size and colour
(see _images). The files are stored in one fixed shuffle of (class, name) order: a job holds out
the last records for validation and `limit` takes the first ones, and neither may be one class."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from app.shards.ingest._images import IMAGE_SUFFIXES, ImageFitter, read_bytes
from app.shards.ingest.base import Format, IngestError, Options, Source, decoded_chunks


def classes_of(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))


def is_image_folder(path: Path) -> bool:
    return bool(classes_of(path)) and not any(
        p.is_file() and not p.name.startswith(".") for p in path.iterdir()
    )


SHUFFLE_SEED = 0  # fixed: the same folder gives the same records, so the same version


def _images(root: Path, classes: list[Path]) -> Iterator[tuple[Path, int]]:
    listed = [
        (path, label)
        for label, folder in enumerate(classes)
        for path in sorted(folder.iterdir())
        if path.is_file() and path.suffix.lower() in IMAGE_SUFFIXES
    ]
    rest = np.random.default_rng(SHUFFLE_SEED).permutation(len(listed) - 1) + 1
    for i in (0, *rest) if listed else ():  # the first file (class, then name) stays first:
        yield listed[i]  # its size is the records' (ImageFitter)


def read(path: Path, options: Options) -> Source:
    if not path.is_dir():
        raise IngestError(path.name, "an image folder is a directory of class folders")
    classes = classes_of(path)
    if not classes:
        raise IngestError(path.name, "no class folders: one subfolder per class")
    try:
        fitter = ImageFitter(options.image_size, options.color)
    except ValueError as exc:
        raise IngestError(path.name, str(exc)) from exc
    files = _images(path, classes)
    first = next(files, None)
    if first is None:
        raise IngestError(path.name, f"no {', '.join(IMAGE_SUFFIXES)} file in its class folders")

    def name(file: Path) -> str:
        return f"{path.name}/{file.relative_to(path).as_posix()}"

    head = fitter(read_bytes(first[0], name(first[0]), 0), name(first[0]), 0)
    step = options.rows_per_chunk(head.shape, head.dtype)

    def decode(item: tuple[Path, int], record: int) -> tuple[np.ndarray, int]:
        file, label = item
        return fitter(read_bytes(file, name(file), record), name(file), record), label

    chunks = decoded_chunks((head, first[1]), files, decode, step)
    return Source(chunks, head.shape, head.dtype, [c.name for c in classes])


FORMAT = Format("image_folder", (), read, claims_directory=is_image_folder)
