"""upload_*: a data set sent as a resumable upload, cut off halfway and finished by a rerun
(epochal_client.resumable, over HTTP to a live API and worker): the bytes sent again after the
cut and those the rerun sent, whether the checksum matched, the upload's pace, the completion
(the server reading the whole file for its sha256), the ingest into shards, and the API's peak
resident memory (each part is held whole once; the file never is). 2 GiB in the full run,
256 MiB with --quick, any size with --upload-size; the file is an .npz of uint8 rows written a
block at a time in a temporary folder, removed at the end.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.service.report import Report
from benchmarks.service.stack import bench_env, running
from epochal_client.client import Client
from epochal_client.resumable import UploadFields, sha256_of, upload
from tests.storage_server import BUCKET, CREDENTIALS, start_seaweed

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


def peak_rss_bytes(pgid: int) -> int:
    """The largest peak resident set (VmHWM) among the live processes of group `pgid` (the
    API's uvicorn master and workers)."""
    peak = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
            status = Path(entry.path, "status").read_text()
        except OSError:  # the process ended while we looked
            continue
        if int(stat.rsplit(")", 1)[1].split()[2]) != pgid:
            continue
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                peak = max(peak, int(line.split()[1]) * 1024)
    return peak


def _wait_settled(client: Client, dataset_id: str, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        raw = client.dataset(dataset_id).raw
        if raw["status"] != "ingesting":
            return raw
        time.sleep(0.5)
    raise TimeoutError(f"data set {dataset_id} still ingesting after {timeout} s")


def measure(url: str, api_key: str, size: int, api_pgid: int) -> dict[str, float]:
    """Upload a file of `size` bytes, cut at half, resumed; what each stage took, and the peak
    resident memory of the API (process group `api_pgid`)."""
    folder = Path(tempfile.mkdtemp(prefix="epochal-bench-upload-"))
    try:
        return _measure(url, api_key, folder, size, api_pgid)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _measure(url: str, api_key: str, folder: Path, size: int, api_pgid: int) -> dict[str, float]:
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
    return {
        "bytes": float(total),
        "resent_bytes": float(held_at_cut - resumed_from[0]),
        "rerun_sent_bytes": float(total - resumed_from[0]),
        "api_peak_rss_mib": peak_rss_bytes(api_pgid) / 2**20,
        "checksum_ok": float(shown["checksum"] == checksum),
        "ready": float(shown["status"] == "ready"),
        "send_mb_per_s": total / 2**20 / (first_s + second_s),
        "upload_and_complete_s": first_s + second_s,
        "ingest_s": ingest_s,
        "rows": float(shown["rows"] or 0),
    }


@contextmanager
def store_settings(store: str) -> Iterator[dict[str, str]]:
    """The service's store: {} for the directory (the default); for `s3`, a SeaweedFS of the
    run's own on loopback (tests.storage_server), removed after."""
    if store != "s3":
        yield {}
        return
    folder = Path(tempfile.mkdtemp(prefix="epochal-bench-s3-"))
    server = start_seaweed(folder / "data")
    try:
        yield {
            "EPOCHAL_STORE_URL": f"s3://{BUCKET}/bench",
            "EPOCHAL_STORE_ENDPOINT": server.endpoint,
            "AWS_CONFIG_FILE": str(folder / "no-aws-config"),
            "AWS_SHARED_CREDENTIALS_FILE": str(folder / "no-aws-credentials"),
            **CREDENTIALS,
        }
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)


def bench_upload(
    report: Report, quick: bool, size: int | None = None, store: str = "directory"
) -> None:
    size = size or (256 * 2**20 if quick else 2 * 2**30)
    with (
        store_settings(store) as stored,
        bench_env("postgres") as env,
        running(env | stored, worker=True) as service,
    ):
        api_pgid = service.processes["api"].pid  # its session leader: master and workers
        result = measure(service.url, service.api_key, size, api_pgid)
    tag = "_s3" if store == "s3" else ""
    setup = f"{result['bytes'] / 2**30:.3g} GiB .npz, cut at half, rerun; PostgreSQL, {store}"
    for name, unit, note in (
        ("resent_bytes", "B", f"after the cut; {setup}"),
        ("rerun_sent_bytes", "B", "the rerun's parts"),
        ("checksum_ok", "", "sha256 as announced"),
        ("ready", "", "the data set's status after the ingest"),
        ("send_mb_per_s", "MiB/s", "both runs, with sha256"),
        ("upload_and_complete_s", "s", setup),
        ("ingest_s", "s", f"to ready, {result['rows']:.0f} rows"),
        ("api_peak_rss_mib", "MiB", "VmHWM, largest"),
    ):
        figure = name if name.startswith("upload_") else f"upload_{name}"
        report.add(f"{figure}{tag}", result[name], unit, note)
