"""Checkpoints whole or absent, and the cleaner, on a directory and on a real S3 server."""

from __future__ import annotations

import os
import time
from datetime import datetime, timedelta
from pathlib import Path

from app.storage.base import Store
from app.storage.checkpoint_sets import MANIFEST, CheckpointSets, checkpoint_name
from app.storage.cleaner import clean
from tests.helpers import scaled

ROOT = "jobs/0123/checkpoints/"


def write_parts_only(store: Store, epoch: int) -> str:
    """What a writer that died before its manifest leaves: parts, no manifest."""
    name = checkpoint_name(epoch, epoch * 10)
    store.put(f"{ROOT}{name}/model", b"half")
    store.put(f"{ROOT}{name}/optimizer", b"written")
    return name


def test_whole_checkpoint_round_trip(store: Store, tmp_path: Path) -> None:
    sets = CheckpointSets(store, ROOT)
    staged = tmp_path / "optimizer.bin"
    staged.write_bytes(os.urandom(200_000))
    written = sets.write(2, 20, {"model": b"weights", "state/optimizer": staged})
    assert [p.name for p in written.parts] == ["model", "state/optimizer"]
    latest = sets.latest()
    assert latest is not None and (latest.epoch, latest.step) == (2, 20)
    assert latest.parts == written.parts and latest.created == written.created
    parts = sets.load(latest.name)
    assert parts == {"model": b"weights", "state/optimizer": staged.read_bytes()}
    into = tmp_path / "fetched"
    assert sets.download(latest.name, into) == latest
    assert (into / "state" / "optimizer").read_bytes() == staged.read_bytes()
    assert store.get(f"{ROOT}{latest.name}/{MANIFEST}").startswith(b"{")  # JSON, not a pickle


def test_a_prefix_without_manifest_is_absent_and_latest_skips_it(store: Store) -> None:
    sets = CheckpointSets(store, ROOT)
    assert sets.latest() is None and sets.load_latest() is None
    whole = sets.write(1, 10, {"model": b"one"})
    partial = write_parts_only(store, 2)
    assert sets.names() == [whole.name, partial]
    assert sets.manifest(partial) is None and sets.load(partial) is None
    latest = sets.latest()
    assert latest is not None and latest.name == whole.name
    loaded = sets.load_latest()
    assert loaded is not None and loaded[1] == {"model": b"one"}


def test_a_corrupted_or_missing_part_fails_and_the_older_one_is_read(
    store: Store, tmp_path: Path
) -> None:
    sets = CheckpointSets(store, ROOT)
    sets.write(1, 10, {"model": b"epoch one"})
    newer = sets.write(2, 20, {"model": b"epoch two", "extra": b"x"})
    store.put(f"{ROOT}{newer.name}/model", b"epoch 2wo")  # same size, other bytes
    assert sets.load(newer.name) is None
    assert sets.download(newer.name, tmp_path / "got") is None
    assert not (tmp_path / "got" / "model").exists()  # nothing half-checked left behind
    loaded = sets.load_latest()
    assert loaded is not None and (loaded[0].epoch, loaded[1]) == (1, {"model": b"epoch one"})
    store.put(f"{ROOT}{newer.name}/model", b"epoch two")
    assert sets.load(newer.name) == {"model": b"epoch two", "extra": b"x"}
    store.delete(f"{ROOT}{newer.name}/extra")
    assert sets.load(newer.name) is None


def test_a_rewrite_of_the_same_step_replaces_it_whole(store: Store) -> None:
    sets = CheckpointSets(store, ROOT)
    sets.write(3, 30, {"model": b"first", "old-only": b"o"})
    again = sets.write(3, 30, {"model": b"second"})
    assert sets.load(again.name) == {"model": b"second"}
    assert sets.delete(again.name) == 2  # the model and the stray part; the manifest first
    assert sets.names() == [] and sets.latest() is None


def store_clock_past(store: Store, stamp: datetime) -> datetime:
    """Wait until the store's own clock (an object's modified time) is past `stamp`; that time.
    S3 stamps whole seconds, so this waits up to one."""
    deadline = time.monotonic() + scaled(10)
    while time.monotonic() < deadline:
        store.put("clock/probe", b"")
        now = store.head("clock/probe").modified
        if now > stamp:
            return now
        time.sleep(0.05)
    raise AssertionError(f"the store's clock never passed {stamp}")


def test_cleaner_removes_partial_prefixes_and_stale_uploads_only(store: Store) -> None:
    sets = CheckpointSets(store, ROOT)
    whole = sets.write(1, 10, {"model": b"kept"})
    stale_partial = write_parts_only(store, 2)
    stale_upload = store.start_upload(f"{ROOT}{checkpoint_name(2, 20)}/big")
    stamps = [i.modified for i in store.list_objects(ROOT)]
    stamps += [u.initiated for u in store.list_uploads(ROOT)]
    cutoff = store_clock_past(store, max(stamps))
    fresh_partial = write_parts_only(store, 3)
    fresh_upload = store.start_upload(f"{ROOT}{fresh_partial}/big")
    outside = store.start_upload("uploads/elsewhere")  # not under this root: not its business

    grace = timedelta(minutes=10)
    cleaned = clean(sets, grace, now=cutoff + grace)

    assert cleaned.prefixes == [stale_partial]
    assert cleaned.uploads == [f"{ROOT}{checkpoint_name(2, 20)}/big"]
    assert sets.names() == [whole.name, fresh_partial]
    assert sets.load(whole.name) == {"model": b"kept"}
    open_ids = {u.upload_id for u in store.list_uploads()}
    assert stale_upload not in open_ids and {fresh_upload, outside} <= open_ids
    # Once the grace has passed for the rest too, only the whole checkpoint remains.
    late = clean(sets, grace, now=datetime.now(cutoff.tzinfo) + 2 * grace)
    assert late.prefixes == [fresh_partial] and late.uploads == [f"{ROOT}{fresh_partial}/big"]
    assert sets.names() == [whole.name]
    assert [u.upload_id for u in store.list_uploads()] == [outside]
