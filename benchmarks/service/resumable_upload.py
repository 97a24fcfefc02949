"""upload_*: a data set sent as a resumable upload, cut off halfway and finished by a rerun
(epochal_client.resumable, over HTTP to a live API and worker): the bytes sent again after the
cut, whether the checksum matched, the upload's pace, the completion (the server reading the
whole file for its sha256) and the ingest into shards. 2 GB in the full run, 256 MB with
--quick; the file is an .npz of uint8 rows written beside the service's home.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from epochal_client.client import Client
from epochal_client.resumable import UploadFields, sha256_of, upload

ROW_BYTES = 4096


class CutOff(Exception):
    """The client gone at the halfway mark."""


def write_npz(path: Path, size: int) -> None:
    """An .npz of about `size` bytes: uint8 rows of ROW_BYTES values, 10 classes, written a
    block of rows at a time so the generator never holds the whole file."""
    rows = max(20, size // ROW_BYTES)
    rng = np.random.default_rng(0)
    x = np.lib.format.open_memmap(path.with_suffix(".x.npy"), "w+", np.uint8, (rows, ROW_BYTES))
    for at in range(0, rows, 65536):
        end = min(rows, at + 65536)
        x[at:end] = rng.integers(0, 256, (end - at, ROW_BYTES), dtype=np.uint8)
    x.flush()
    np.savez(path, x=x, y=np.arange(rows) % 10)
    del x
    path.with_suffix(".x.npy").unlink()


def _wait_settled(client: Client, dataset_id: str, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        raw = client.dataset(dataset_id).raw
        if raw["status"] != "ingesting":
            return raw
        time.sleep(0.5)
    raise TimeoutError(f"data set {dataset_id} still ingesting after {timeout} s")


def measure(url: str, api_key: str, size: int) -> dict[str, float]:
    """Upload a file of `size` bytes, cut at half, resumed; what each stage took."""
    folder = Path(tempfile.mkdtemp(prefix="epochal-bench-upload-"))
    path = folder / "big.npz"
    write_npz(path, size)
    total = path.stat().st_size
    sent: list[int] = []

    def cut_at_half(done: int, _total: int) -> None:
        sent.append(done)
        if done >= total // 2:
            raise CutOff

    os.environ["XDG_CACHE_HOME"] = str(folder / "cache")  # this run's state file only
    with Client(url, api_key, timeout=600) as client:
        started = time.perf_counter()
        try:
            upload(client, path, UploadFields("bench-upload"), cut_at_half)
        except CutOff:
            held_at_cut = sent[-1]
        first_s = time.perf_counter() - started
        resumed_from: list[int] = []
        started = time.perf_counter()
        dataset = upload(
            client, path, UploadFields("bench-upload"), lambda d, _t: resumed_from.append(d)
        )
        second_s = time.perf_counter() - started
        started = time.perf_counter()
        shown = _wait_settled(client, dataset["id"], timeout=3600)
        ingest_s = time.perf_counter() - started
    checksum = sha256_of(path)
    path.unlink()
    return {
        "bytes": float(total),
        "resent_bytes": float(held_at_cut - resumed_from[0]),
        "checksum_ok": float(shown["checksum"] == checksum),
        "ready": float(shown["status"] == "ready"),
        "send_mb_per_s": total / 2**20 / (first_s + second_s),
        "upload_and_complete_s": first_s + second_s,
        "ingest_s": ingest_s,
        "rows": float(shown["rows"] or 0),
    }
