"""Downloading the built-in IDX data sets (mnist, fashion_mnist), only when allowed.

Off unless EPOCHAL_ALLOW_DOWNLOAD is set. Files come from the canonical mirrors, or from
EPOCHAL_DOWNLOAD_MIRROR as `{mirror}/{name}/{file}.gz`. Each file is written under a hidden
temporary name, checked (a readable IDX file of the expected shape, labels 0-9; mirrors
recompress the files, so their bytes and checksums differ) and renamed into
`data_dir/<name>/`: a reader sees a whole file or none, and two jobs downloading at once
cannot leave a torn one.
"""

from __future__ import annotations

import os
import struct
import urllib.request
from pathlib import Path

import numpy as np

from app.core.config import get_settings
from worker.training.data.idx import IDX_FILES, read_idx
from worker.training.data.types import DataError

CANONICAL = {
    "fashion_mnist": ["http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"],
    "mnist": [
        "https://ossci-datasets.s3.amazonaws.com/mnist/",
        "http://yann.lecun.com/exdb/mnist/",
    ],
}
SHAPES = {
    "train-images-idx3-ubyte": (60000, 28, 28),
    "train-labels-idx1-ubyte": (60000,),
    "t10k-images-idx3-ubyte": (10000, 28, 28),
    "t10k-labels-idx1-ubyte": (10000,),
}
MAX_FILE_BYTES = (
    100_000_000  # the largest file is ~26 MB gzipped; a bad mirror cannot fill the disk
)
TIMEOUT_SECONDS = 60


def download_if_allowed(name: str, data_dir: Path, missing: DataError) -> None:
    """Fetch the files of `name` into data_dir/<name>/; re-raise `missing` when not allowed."""
    settings = get_settings()
    if not settings.allow_download:
        raise DataError(f"{missing}; or set EPOCHAL_ALLOW_DOWNLOAD=1 to download them") from None
    mirrors = (
        [f"{settings.download_mirror.rstrip('/')}/{name}/"] if settings.download_mirror else []
    )
    target = data_dir / name
    target.mkdir(parents=True, exist_ok=True)
    for images, labels in IDX_FILES.values():
        for base in (images, labels):
            if not any((target / f"{base}{ext}").exists() for ext in (".gz", "")):
                fetch([f"{m}{base}.gz" for m in mirrors or CANONICAL[name]], target / f"{base}.gz")


def fetch(urls: list[str], final: Path) -> None:
    """Download the first URL that yields a valid file to `final`, atomically."""
    errors = []
    for url in urls:
        tmp = final.with_name(f".{final.name.removesuffix('.gz')}.{os.getpid()}.part.gz")
        try:
            _copy(url, tmp)
            _check(tmp, SHAPES[final.name.removesuffix(".gz")])
            os.replace(tmp, final)
            return
        except (OSError, ValueError, EOFError, struct.error, DataError) as exc:
            errors.append(f"{url}: {exc}")
        finally:
            tmp.unlink(missing_ok=True)
    raise DataError(f"could not download {final.name}: " + "; ".join(errors))


def _copy(url: str, path: Path) -> None:
    with urllib.request.urlopen(url, timeout=TIMEOUT_SECONDS) as response, path.open("wb") as out:
        written = 0
        while chunk := response.read(1 << 20):
            written += len(chunk)
            if written > MAX_FILE_BYTES:
                raise DataError(f"larger than {MAX_FILE_BYTES} bytes")
            out.write(chunk)


def _check(path: Path, shape: tuple[int, ...]) -> None:
    array = read_idx(path)
    if array.shape != shape:
        raise DataError(f"holds an array of shape {array.shape}, expected {shape}")
    if array.ndim == 1 and int(np.max(array)) > 9:
        raise DataError(f"holds label {int(np.max(array))}; labels are 0-9")
