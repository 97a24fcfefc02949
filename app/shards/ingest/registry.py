"""Every format, found once in this package (a module with a FORMAT): adding one is adding a
module here; and which one a path is, by its suffix or, for a directory, by what it holds."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

from app.shards.ingest.base import Format, IngestError


def _discover() -> dict[str, Format]:
    from app.shards import ingest as package

    found: dict[str, Format] = {}
    for info in pkgutil.iter_modules(package.__path__):
        if info.name.startswith("_") or info.name in ("base", "registry"):
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        kind = getattr(module, "FORMAT", None)
        if isinstance(kind, Format):
            found[kind.name] = kind
    return dict(sorted(found.items()))


FORMATS: dict[str, Format] = _discover()


def format_of(path: Path, name: str | None) -> Format:
    """The format `name` picks, or the one the path's suffix (a file) or content (a directory)
    says; IngestError naming the path when none does."""
    if name is not None:
        if name not in FORMATS:
            raise IngestError(path.name, f"unknown format {name!r}: one of {', '.join(FORMATS)}")
        return FORMATS[name]
    if path.is_dir():
        claimed = [f for f in FORMATS.values() if f.claims_directory and f.claims_directory(path)]
        if len(claimed) == 1:
            return claimed[0]
        what = "several formats' files" if claimed else "no class folders, .parquet or .tar files"
        raise IngestError(path.name, f"a directory of {what}; give the format")
    suffix = path.suffix.lower()
    for kind in FORMATS.values():
        if suffix in kind.suffixes:
            return kind
    known = sorted({s for f in FORMATS.values() for s in f.suffixes})
    raise IngestError(path.name, f"not a {', '.join(known[:-1])} or {known[-1]} file")
