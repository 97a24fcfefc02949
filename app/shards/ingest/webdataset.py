"""Tar shards in the WebDataset layout: a `.tar` (or a directory of them, by name) whose
members come in samples, one key each (the member's path up to the first dot of its name):
`<key>.jpg`, `.jpeg`, `.png` or `.npy` is x, `<key>.cls` (a whole number, as text) its class.
Other members of a sample are ignored. Images become records as in image folders (see
_images); `.npy` samples are read without pickle and must all share the first one's shape and
dtype. The tar is streamed, one sample in memory at a time.

A tar of shards (a directory of them packed in one tar, as `epochal datasets upload DIR` sends
it) is that directory: its `.tar` files are read in order of name, each streamed from the
outer tar, its other files not at all; a sample is named OUTER.tar/SHARD.tar/KEY."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import numpy as np

from app.shards.ingest._images import ImageFitter
from app.shards.ingest.base import (
    Format,
    IngestError,
    Options,
    Source,
    decoded_chunks,
    files_of,
)

X_EXTENSIONS = ("jpg", "jpeg", "png", "npy")
MAX_MEMBER_BYTES = 256 * 1024 * 1024


@dataclass
class Sample:
    where: str  # "<tar>/<key>", for errors
    parts: dict[str, bytes] = field(default_factory=dict)


def _streamed(source: Path | IO[bytes], name: str) -> Iterator[tuple[str, str, bytes]]:
    """(key, extension, bytes) of each file member of the tar at (or read from) `source`, in
    its order; `name` is the tar's, for errors."""
    try:
        if isinstance(source, Path):
            opened = tarfile.open(source, "r|*")
        else:
            opened = tarfile.open(fileobj=source, mode="r|*")
        with opened as tar:
            for member in tar:
                if not member.isfile():
                    continue
                if member.size > MAX_MEMBER_BYTES:
                    raise IngestError(f"{name}/{member.name}", "a member over 256 MiB")
                folder, _, base = member.name.rpartition("/")
                stem, dot, extension = base.partition(".")
                if not dot or not stem:
                    continue
                reader = tar.extractfile(member)
                assert reader is not None
                key = f"{folder}/{stem}" if folder else stem
                yield key, extension.lower(), reader.read()
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise IngestError(name, f"not a readable tar file: {exc}") from exc


def _shards_in(tar_path: Path) -> list[tarfile.TarInfo] | None:
    """The `.tar` files in the tar, by name, if it is a directory of shards packed: it holds
    `.tar` files and no `.cls` (a shard's samples may have a part named `.tar`). Headers are
    read, their data skipped. None for any other tar, or one that cannot be listed so
    (compressed, or no tar): it is read as one shard, which says what is wrong."""
    try:
        with tarfile.open(tar_path, "r:") as tar:
            files = [m for m in tar.getmembers() if m.isfile()]
    except (tarfile.TarError, OSError, EOFError):
        return None
    if any(m.name.lower().endswith(".cls") for m in files):
        return None
    shards = [m for m in files if m.name.lower().endswith(".tar")]
    return sorted(shards, key=lambda m: m.name) or None


def _members(tar_path: Path) -> Iterator[tuple[str, str, bytes]]:
    """(key, extension, bytes) of each member of the tar, or, in a tar of shards, of each
    shard's in turn, streamed from the outer tar, keyed SHARD.tar/KEY; as in a directory of
    shards, its other files are not read."""
    shards = _shards_in(tar_path)
    if shards is None:
        yield from _streamed(tar_path, tar_path.name)
        return
    with tarfile.open(tar_path, "r:") as tar:
        for shard in shards:
            file = tar.extractfile(shard)
            assert file is not None  # a regular file's member
            for key, extension, data in _streamed(file, f"{tar_path.name}/{shard.name}"):
                yield f"{shard.name}/{key}", extension, data


def _samples(files: list[Path]) -> Iterator[Sample]:
    for tar_path in files:
        sample: Sample | None = None
        for key, extension, data in _members(tar_path):
            where = f"{tar_path.name}/{key}"
            if sample is None or sample.where != where:
                if sample is not None:
                    yield sample
                sample = Sample(where)
            sample.parts[extension] = data
        if sample is not None:
            yield sample


class Decoder:
    """A sample's (x, y), x of the first sample's shape and dtype."""

    def __init__(self, options: Options) -> None:
        self.images = ImageFitter(options.image_size, options.color)
        self.array: tuple[tuple[int, ...], np.dtype] | None = None

    def __call__(self, sample: Sample, record: int) -> tuple[np.ndarray, int]:
        xs = [e for e in X_EXTENSIONS if e in sample.parts]
        if len(xs) != 1 or "cls" not in sample.parts:
            raise IngestError(
                sample.where, "a sample needs one .jpg, .png or .npy and one .cls", record
            )
        try:
            label = int(sample.parts["cls"].decode("ascii").strip())
        except (UnicodeDecodeError, ValueError):
            raise IngestError(
                f"{sample.where}.cls", "the class is not a whole number", record
            ) from None
        data, name = sample.parts[xs[0]], f"{sample.where}.{xs[0]}"
        if (xs[0] == "npy") != (self.array is not None) and record > 0:
            raise IngestError(name, "samples mix images and .npy arrays", record)
        if xs[0] != "npy":
            return self.images(data, name, record), label
        return self._array(data, name, record), label

    def _array(self, data: bytes, name: str, record: int) -> np.ndarray:
        try:
            x = np.load(io.BytesIO(data), allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:
            raise IngestError(name, f"not a readable .npy array: {exc}", record) from exc
        if self.array is None:
            self.array = (x.shape, x.dtype)
        if (x.shape, x.dtype) != self.array:
            raise IngestError(
                name,
                f"{x.dtype} {x.shape}; the first sample is {self.array[1]} {self.array[0]}",
                record,
            )
        return x


def read(path: Path, options: Options) -> Source:
    files = files_of(path, (".tar",)) if path.is_dir() else [path]
    try:
        decode = Decoder(options)
    except ValueError as exc:
        raise IngestError(path.name, str(exc)) from exc
    samples = _samples(files)
    first = next(samples, None)
    if first is None:
        raise IngestError(path.name, "no samples in the tar")
    x0, y0 = decode(first, 0)
    step = options.rows_per_chunk(x0.shape, x0.dtype)

    return Source(decoded_chunks((x0, y0), samples, decode, step), x0.shape, x0.dtype)


def is_tar_directory(path: Path) -> bool:
    return any(p.suffix.lower() == ".tar" for p in path.iterdir() if p.is_file())


FORMAT = Format("webdataset", (".tar",), read, claims_directory=is_tar_directory)
