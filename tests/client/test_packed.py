"""A directory packed for upload: the same files give the same bytes (whatever the files'
times, owners and the order the disk lists them in), and the packed tar is kept for a rerun
until the directory changes or its upload completes; a directory of only tar shards is sent
as webdataset, any other as an image folder."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

import pytest

from epochal_client import packed
from epochal_client.datasets_cli import directory_format


def _tree(root: Path, order: list[str]) -> Path:
    for name in order:  # created in this order: the disk may list them so
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(name.encode() * 50)
    return root


def test_packing_the_same_files_twice_gives_the_same_bytes(tmp_path: Path) -> None:
    names = ["b/2.png", "a/1.jpg", "b/10.png", "a/" + "long" * 40 + ".png"]
    one = _tree(tmp_path / "one", names)
    two = _tree(tmp_path / "two", names[::-1])
    os.utime(two / "b" / "2.png", (1_000_000, 1_000_000))
    (two / "a" / "1.jpg").chmod(0o600)
    first = packed.pack(one, tmp_path / "first.tar").read_bytes()
    again = packed.pack(one, tmp_path / "again.tar").read_bytes()
    other = packed.pack(two, tmp_path / "other.tar").read_bytes()
    assert first == again == other
    with tarfile.open(tmp_path / "first.tar") as tar:
        members = tar.getmembers()
    sorted_names = ["a", "a/1.jpg", f"a/{'long' * 40}.png", "b", "b/10.png", "b/2.png"]
    assert [m.name for m in members] == sorted_names
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname) for m in members} == {(0, 0, 0, "", "")}
    (one / "b" / "2.png").write_bytes(b"changed")
    assert packed.pack(one, tmp_path / "changed.tar").read_bytes() != first


def test_the_packed_tar_is_kept_until_the_folder_changes_or_is_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    root = _tree(tmp_path / "pets", ["cat/1.png", "dog/1.png"])
    tar = packed.packed(root)
    assert tar.is_relative_to(tmp_path / "cache" / "epochal")
    made = tar.stat().st_mtime_ns
    assert packed.packed(root) == tar and tar.stat().st_mtime_ns == made  # re-read, not redone
    (root / "dog" / "2.png").write_bytes(b"another dog")
    assert packed.packed(root) == tar
    with tarfile.open(tar) as archive:
        assert "dog/2.png" in archive.getnames()  # packed again
    packed.forget(root)
    assert list((tmp_path / "cache" / "epochal" / "packed").iterdir()) == []


def test_a_directory_of_only_tar_files_is_sent_as_webdataset(tmp_path: Path) -> None:
    shards = _tree(tmp_path / "shards", ["shard-000.tar", "shard-001.TAR", ".DS_Store"])
    assert directory_format(shards) == "webdataset"
    (shards / "README.md").write_text("a file that is no shard")
    assert directory_format(shards) == "image_folder"
    assert directory_format(_tree(tmp_path / "pets", ["cat/1.png", "dog/1.tar"])) == "image_folder"
    (tmp_path / "empty").mkdir()
    assert directory_format(tmp_path / "empty") == "image_folder"
