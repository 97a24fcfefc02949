"""An image folder packed in a tar file: its members listed once (headers only) and read one
at a time, never extracted. The names are the folder's: CLASS/FILE, optionally inside one
top-level folder, which is stripped; the folder's name is that folder's, or the tar's stem."""

from __future__ import annotations

import tarfile
from pathlib import Path, PurePosixPath
from types import TracebackType

from app.shards.ingest._images import IMAGE_SUFFIXES
from app.shards.ingest.base import IngestError


def _parts(member: tarfile.TarInfo) -> tuple[str, ...]:
    return tuple(p for p in PurePosixPath(member.name).parts if p != ".")


def _wrapper(files: list[tuple[str, ...]]) -> str | None:
    """The one top-level folder every file is inside, below its class folders, if any."""
    tops = {parts[0] for parts in files}
    if len(tops) == 1 and all(len(parts) >= 3 for parts in files):
        return tops.pop()
    return None


class TarFolder:
    """`classes` (sorted names), `listed`: (DIR/CLASS/FILE, label, member) of every JPEG or PNG
    file in a class folder, by class then name, as an image folder lists them. A file outside
    the class folders is an IngestError naming the member."""

    def __init__(self, path: Path) -> None:
        self.archive = tarfile.open(path, "r:")  # uncompressed: members read by seeking
        try:
            self._list(path)
        except BaseException:
            self.archive.close()
            raise

    def _list(self, path: Path) -> None:
        latest: dict[tuple[str, ...], tarfile.TarInfo] = {}
        folders: set[tuple[str, ...]] = set()
        for member in self.archive.getmembers():  # headers only
            if member.isfile() and _parts(member):
                latest[_parts(member)] = member  # a name given twice: the last one, as tar
            elif member.isdir():
                folders.add(_parts(member))
        wrapper = _wrapper(list(latest))
        self.top = wrapper or path.stem
        cut = 1 if wrapper else 0
        files = {parts[cut:]: m for parts, m in latest.items()}
        for parts, member in sorted(files.items()):
            if len(parts) == 1 and not parts[0].startswith("."):
                why = "a file outside the class folders: one subfolder per class"
                raise IngestError(member.name, why)
        in_classes = {p: m for p, m in files.items() if len(p) == 2 and not p[0].startswith(".")}
        empty = {  # class folders without a file, as an image folder counts them
            p[-1] for p in folders if len(p) == cut + 1 and p[:cut] == (wrapper,)[:cut]
        }
        empty = {name for name in empty if not name.startswith(".")}
        self.classes = sorted({parts[0] for parts in in_classes} | empty)
        label = {name: i for i, name in enumerate(self.classes)}
        self.listed = [
            (f"{self.top}/{'/'.join(parts)}", label[parts[0]], member)
            for parts, member in sorted(in_classes.items())
            if PurePosixPath(parts[1]).suffix.lower() in IMAGE_SUFFIXES
        ]

    def read(self, member: tarfile.TarInfo, name: str) -> bytes:
        try:
            held = self.archive.extractfile(member)
            assert held is not None  # a regular file's member
            return held.read()
        except (OSError, tarfile.TarError) as exc:
            raise IngestError(name, f"cannot be read from the tar: {exc}") from exc

    def __enter__(self) -> TarFolder:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.archive.close()
