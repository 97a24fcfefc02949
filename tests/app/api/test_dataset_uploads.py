"""Resumable uploads over HTTP, in-process, and the ingest task's work run in this process on
the real database and store: an upload interrupted halfway completes from the offset the server
holds; a wrong offset is a 409 with it; a checksum mismatch a 422; a bad record fails the ingest
naming the file and the record and leaves no index; a job is refused until its data set is
ready, or when it pins another version; unfinished uploads expire; an ingest held by another
is not run twice, and a lost one is sent again."""

from __future__ import annotations

import hashlib
import io
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from app.core.config import get_settings
from app.core.db import session_scope
from app.domain.tables import Dataset, DatasetUpload, Worker, utcnow
from app.services import ingest_lease
from app.services.dataset_ingest import run_ingest
from app.services.maintenance import clean_store
from app.shards import IndexMissing, dataset_prefix, read_index
from app.storage import get_store
from app.storage.base import MIN_PART_BYTES, PartInfo
from tests.conftest import make_key


@pytest.fixture
def client(db_env: dict[str, str]) -> Iterator[TestClient]:
    from app.main import create_app

    with TestClient(create_app(), raise_server_exceptions=False) as client:
        client.headers["Authorization"] = f"Bearer {make_key('uploader')}"
        yield client


def npz_bytes(rows: int, width: int, seed: int = 0, test_rows: int = 0) -> bytes:
    """An .npz of uint8 rows (width values each) and 3 classes, past one part when large."""
    rng = np.random.default_rng(seed)
    arrays: dict[str, Any] = {
        "x": rng.integers(0, 256, (rows, width), dtype=np.uint8),
        "y": np.arange(rows) % 3,
    }
    if test_rows:
        arrays["x_test"] = rng.integers(0, 256, (test_rows, width), dtype=np.uint8)
        arrays["y_test"] = np.arange(test_rows) % 3
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def announce(client: TestClient, content: bytes, filename: str = "big.npz", **extra: Any) -> Any:
    body = {
        "name": "big",
        "filename": filename,
        "size": len(content),
        "sha256": hashlib.sha256(content).hexdigest(),
        **extra,
    }
    response = client.post("/v1/datasets/uploads", json=body)
    assert response.status_code == 201, response.text
    return response.json()


def send(client: TestClient, upload_id: str, content: bytes, start: int, end: int) -> Any:
    header = {"Content-Range": f"bytes {start}-{end - 1}/{len(content)}"}
    part = content[start:end]
    return client.put(f"/v1/datasets/uploads/{upload_id}", content=part, headers=header)


def test_an_upload_interrupted_halfway_completes_from_its_offset(client: TestClient) -> None:
    content = npz_bytes(rows=1500, width=4096, test_rows=30)  # ~6.3 MB: two parts
    assert len(content) > MIN_PART_BYTES
    upload = announce(client, content)
    assert upload["offset"] == 0 and upload["size"] == len(content)
    first = send(client, upload["id"], content, 0, MIN_PART_BYTES)
    assert first.status_code == 200, first.text
    # The client is gone; a new one asks where to go on.
    held = client.get(f"/v1/datasets/uploads/{upload['id']}").json()["offset"]
    assert held == MIN_PART_BYTES
    early = client.post(f"/v1/datasets/uploads/{upload['id']}/complete")
    assert early.status_code == 409 and early.headers["Upload-Offset"] == str(held)
    again = send(client, upload["id"], content, 0, MIN_PART_BYTES)  # a part sent twice
    assert again.status_code == 409, again.text
    assert again.headers["Upload-Offset"] == str(held) and str(held) in again.json()["detail"]
    rest = send(client, upload["id"], content, held, len(content))
    assert rest.status_code == 200 and rest.json()["offset"] == len(content)
    done = client.post(f"/v1/datasets/uploads/{upload['id']}/complete")
    assert done.status_code == 201, done.text
    dataset = done.json()
    assert (dataset["status"], dataset["storage"], dataset["checksum"]) == (
        "ingesting",
        "shards",
        hashlib.sha256(content).hexdigest(),
    )
    assert client.get(f"/v1/datasets/uploads/{upload['id']}").status_code == 404
    assert run_ingest(dataset["id"]) == "ready"
    shown = client.get(f"/v1/datasets/{dataset['id']}").json()
    index = read_index(get_store(), dataset_prefix(dataset["id"], "train"))
    assert (shown["status"], shown["samples"], shown["test_samples"]) == ("ready", 1500, 30)
    assert (shown["rows"], shown["classes"], shown["shape"]) == (1530, 3, [4096])
    assert shown["version"] == index.version and shown["dtype"] == "uint8"
    assert shown["bytes"] == shown["size_bytes"] > 1530 * 4096
    assert read_index(get_store(), dataset_prefix(dataset["id"], "test")).rows == 30
    assert not list(get_store().list_objects("dataset-uploads/"))  # the shards hold it now


def test_a_checksum_mismatch_is_422_and_discards_the_upload(client: TestClient) -> None:
    content = npz_bytes(rows=20, width=8)
    upload = announce(client, content, sha256="0" * 64)
    assert send(client, upload["id"], content, 0, len(content)).status_code == 200
    done = client.post(f"/v1/datasets/uploads/{upload['id']}/complete")
    assert done.status_code == 422 and "sha256" in done.json()["detail"]
    assert client.get(f"/v1/datasets/uploads/{upload['id']}").status_code == 404
    assert client.get("/v1/datasets").json()["items"] == []


def test_an_upload_the_store_joined_before_the_answer_was_lost_completes(
    client: TestClient,
) -> None:
    """The store joined the parts, then died (or the API did) before the request answered: the
    next completion finds the upload closed and the file whole, and checks its sha256."""
    content = npz_bytes(rows=20, width=8)
    upload = announce(client, content)
    assert send(client, upload["id"], content, 0, len(content)).status_code == 200
    with session_scope() as session:
        row = session.get(DatasetUpload, upload["id"])
        assert row is not None
        parts = [PartInfo(number, etag) for number, etag, _ in row.parts]
        get_store().complete_upload(row.store_key, row.store_upload_id, parts)
    done = client.post(f"/v1/datasets/uploads/{upload['id']}/complete")
    assert done.status_code == 201, done.text
    assert done.json()["checksum"] == hashlib.sha256(content).hexdigest()
    assert client.get(f"/v1/datasets/uploads/{upload['id']}").status_code == 404


def test_parts_are_checked_against_the_announced_size(client: TestClient) -> None:
    content = npz_bytes(rows=20, width=8)
    upload = announce(client, content)
    small = send(client, upload["id"], content, 0, 100)  # not the last, and under the floor
    assert small.status_code == 422 and str(MIN_PART_BYTES) in small.json()["detail"]
    bare = client.put(f"/v1/datasets/uploads/{upload['id']}", content=content)
    assert bare.status_code == 422 and "Content-Range" in bare.json()["detail"]
    assert client.delete(f"/v1/datasets/uploads/{upload['id']}").status_code == 204
    assert client.get(f"/v1/datasets/uploads/{upload['id']}").status_code == 404


def csv_dataset(client: TestClient, text: str) -> str:
    content = text.encode()
    upload = announce(client, content, filename="table.csv", label_column="label")
    assert send(client, upload["id"], content, 0, len(content)).status_code == 200
    done = client.post(f"/v1/datasets/uploads/{upload['id']}/complete")
    assert done.status_code == 201, done.text
    return str(done.json()["id"])


def test_a_csv_row_with_a_wrong_column_count_fails_naming_file_and_record(
    client: TestClient,
) -> None:
    dataset_id = csv_dataset(client, "a,b,label\n1,2,0\n3,4,1\n5,6\n7,8,1\n")
    assert run_ingest(dataset_id) == "failed"
    shown = client.get(f"/v1/datasets/{dataset_id}").json()
    assert shown["status"] == "failed"
    assert "table.csv, record 2" in shown["error"] and "line 4" in shown["error"]
    with pytest.raises(IndexMissing):
        read_index(get_store(), dataset_prefix(dataset_id, "train"))
    assert not list(get_store().list_objects(f"datasets/{dataset_id}/"))
    spec = {"framework": "pytorch", "dataset": {"id": dataset_id}}
    refused = client.post("/v1/jobs", json=spec)
    assert refused.status_code == 422 and "failed to ingest" in refused.text


def test_a_job_waits_for_ready_and_its_pinned_version(client: TestClient) -> None:
    rows = "".join(f"{i},{i},{i % 2}\n" for i in range(40))
    dataset_id = csv_dataset(client, "a,b,label\n" + rows)
    spec: dict[str, Any] = {"framework": "pytorch", "dataset": {"id": dataset_id}}
    early = client.post("/v1/jobs", json=spec)
    assert early.status_code == 422 and "still being ingested" in early.text
    assert run_ingest(dataset_id) == "ready"
    assert run_ingest(dataset_id) == "skipped"  # a message delivered twice
    version = client.get(f"/v1/datasets/{dataset_id}").json()["version"]
    spec["dataset"]["version"] = "f" * 64
    wrong = client.post("/v1/jobs", json=spec)
    assert wrong.status_code == 422 and "does not match" in wrong.text
    spec["dataset"]["version"] = version
    assert client.post("/v1/jobs", json=spec).status_code == 201


def test_an_upload_no_part_reached_expires(client: TestClient) -> None:
    content = npz_bytes(rows=20, width=8)
    upload = announce(client, content)
    later = datetime.now(UTC) + timedelta(seconds=get_settings().dataset_upload_expiry_seconds + 5)
    cleaned = clean_store(get_settings(), now=later)
    assert any(upload["id"] in key for key in cleaned.uploads)
    assert client.get(f"/v1/datasets/uploads/{upload['id']}").status_code == 404
    assert get_store().list_uploads("dataset-uploads/") == []


def set_dataset(dataset_id: str, **values: object) -> None:
    with session_scope() as session:
        session.execute(update(Dataset).where(Dataset.id == dataset_id).values(**values))


def test_a_held_ingest_is_not_run_twice_and_a_lost_one_is_sent_again(client: TestClient) -> None:
    rows = "".join(f"{i},{i},{i % 2}\n" for i in range(30))
    dataset_id = csv_dataset(client, "a,b,label\n" + rows)
    set_dataset(dataset_id, ingest_lease_at=utcnow())  # a live ingest elsewhere holds it
    assert run_ingest(dataset_id) == "skipped"
    settings = get_settings()
    with session_scope() as session:  # not lost: the lease is live, and no worker is idle
        assert ingest_lease.lost(session, settings) == []
    stale = settings.dispatch_retry_seconds + settings.lease_seconds
    long_ago = utcnow() - timedelta(seconds=stale)
    set_dataset(dataset_id, ingest_lease_at=long_ago, ingest_sent_at=long_ago)
    with session_scope() as session:
        assert ingest_lease.lost(session, settings) == []  # no live worker to take it
        session.add(
            Worker(
                name="idle",
                hostname="h",
                pid=1,
                gpus=0,
                devices=[],
                queues=[],
                heartbeat_at=utcnow(),
            )
        )
    with session_scope() as session:
        assert ingest_lease.lost(session, settings) == [dataset_id]
    with session_scope() as session:  # marked sent: the next round leaves it
        assert ingest_lease.lost(session, settings) == []
    assert run_ingest(dataset_id) == "ready"  # the stale lease is taken over
