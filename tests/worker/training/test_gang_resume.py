"""A gang's resume, ranks as threads on folders of their own: every rank takes the checkpoint
the ranks agree on from the store (a directory that is neither rank's) or from a local copy
that matches the set's checksums, and nothing but a few small numbers crosses the collectives
(the back-ends have no way to send bytes). Without a store, nodes on folders of their own
start over together; nodes sharing one folder resume from it untouched."""

from __future__ import annotations

import ast
import threading
from pathlib import Path
from typing import Any

import pytest

from app.storage.checkpoint_sets import CheckpointSets
from app.storage.directory import DirectoryStore
from tests.helpers import ROOT
from worker.training.backend import Backend
from worker.training.callbacks import TrainState
from worker.training.checkpoint import Checkpointer, latest_checkpoint
from worker.training.checkpoint_upload import StoreCheckpoints
from worker.training.gang_resume import resume

JOB = "0a0b0c0d-gang"


def weights(epoch: int) -> bytes:
    return f"weights of epoch {epoch};".encode() * 50


class Group:
    """Ranks as threads: each collective waits until every rank has brought its value, and
    every value brought is kept (what crossed the collectives)."""

    def __init__(self, size: int) -> None:
        self.barrier = threading.Barrier(size, timeout=30)
        self.values: list[Any] = [None] * size
        self.carried: list[Any] = []
        self.lock = threading.Lock()

    def gather(self, rank: int, value: Any) -> list[Any]:
        with self.lock:
            self.carried.append(value)
        self.values[rank] = value
        self.barrier.wait()
        seen = list(self.values)
        self.barrier.wait()  # nobody overwrites a value before every rank has read it
        return seen


class RankBackend:
    """One rank of a Group: `agree` is the group's, as a process group's all-reduce MAX is;
    checkpoints are one file of weights, and the one loaded is kept."""

    def __init__(self, group: Group, rank: int, epoch: int = 0) -> None:
        self.group, self.rank, self.is_main, self.epoch = group, rank, rank == 0, epoch
        self.loaded: bytes | None = None

    def agree(self, value: int) -> int:
        return max(self.group.gather(self.rank, value))

    def save_checkpoint(self, directory: Path) -> None:
        (directory / "model.pt").write_bytes(weights(self.epoch))

    def load_checkpoint(self, directory: Path) -> None:
        self.loaded = (directory / "model.pt").read_bytes()


def uploads(store: DirectoryStore | None, staging: Path) -> StoreCheckpoints | None:
    return None if store is None else StoreCheckpoints(store, JOB, staging, wait_seconds=10)


def train(staging: Path, epochs: int, store: DirectoryStore | None = None) -> None:
    """An earlier attempt's rank 0: a checkpoint each epoch, staged here and put in `store`."""
    publisher = uploads(store, staging)
    backend: Any = RankBackend(Group(1), 0)
    checkpointer = Checkpointer(staging, backend, 1, publisher=publisher)
    for epoch in range(1, epochs + 1):
        backend.epoch = epoch
        checkpointer.save(
            TrainState(epochs=9, learning_rate=0.1, epoch=epoch, global_step=7 * epoch)
        )
        if publisher is not None:
            assert publisher.drain(30)
    if publisher is not None:
        publisher.close()


def resume_ranks(
    folders: list[Path], store: DirectoryStore | None
) -> tuple[list[RankBackend], list[TrainState], Group]:
    """`resume` on every rank at once, rank r on folders[r], as a gang's nodes do at an
    attempt's start: each rank's back-end (what it loaded) and state (the epoch it is at)."""
    group = Group(len(folders))
    backends = [RankBackend(group, rank) for rank in range(len(folders))]
    states = [TrainState(epochs=9, learning_rate=0.1) for _ in folders]
    failed: list[BaseException] = []

    def rank_start(rank: int) -> None:
        backend: Any = backends[rank]
        publisher = uploads(store, folders[rank])
        try:
            checkpointer = Checkpointer(folders[rank], backend, 1, publisher=publisher)
            resume(checkpointer, states[rank], publisher, gang=True)
        except BaseException as exc:
            failed.append(exc)
            group.barrier.abort()

    threads = [threading.Thread(target=rank_start, args=(r,)) for r in range(len(folders))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not failed, failed
    return backends, states, group


def files_of(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under `root`: its inode and modification time."""
    return {
        str(p.relative_to(root)): (p.stat().st_ino, p.stat().st_mtime_ns)
        for p in root.rglob("*")
        if p.is_file() and not p.name.startswith(".")
    }


def test_ranks_with_nothing_on_their_disks_resume_from_the_stores_set(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path / "store")  # neither rank's home
    train(tmp_path / "earlier" / "checkpoints", 3, store)  # a box the gang no longer has
    folders = [tmp_path / home / "checkpoints" for home in ("a", "b")]
    backends, states, group = resume_ranks(folders, store)
    assert [s.epoch for s in states] == [3, 3] and [s.global_step for s in states] == [21, 21]
    assert [b.loaded for b in backends] == [weights(3)] * 2
    for folder in folders:  # the set, checked, and `latest` there names it
        latest = latest_checkpoint(folder)
        assert latest is not None and (latest / "model.pt").read_bytes() == weights(3)
    # Only small numbers crossed: rank 0's epoch + 1 and step, then whether each rank had it.
    assert all(type(v) is int and abs(v) < 100 for v in group.carried), group.carried
    assert sorted(group.carried) == sorted([4, 0, 21, 0, 0, 0])


def test_no_back_end_can_send_a_checkpoints_bytes_between_ranks() -> None:
    """The loop's collectives carry numbers only: no back-end has a way to send bytes, and no
    worker code calls a broadcast (nor, tests/test_security_review.py, an object collective)."""
    assert not hasattr(Backend, "broadcast")
    for path in sorted((ROOT / "worker").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef):
                assert "broadcast" not in node.name, f"{path}: def {node.name}"
            if isinstance(node, ast.Call):
                assert "broadcast" not in ast.unparse(node.func), f"{path}: {ast.unparse(node)}"


def test_a_matching_local_copy_is_used_and_one_that_differs_is_fetched(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path / "store")
    own = tmp_path / "a" / "checkpoints"  # rank 0's worker staged these itself
    train(own, 2, store)
    stale = tmp_path / "b" / "checkpoints"  # rank 1's: epoch 2 with other bytes, same sizes
    train(stale, 2)
    model = stale / "epoch-0002" / "model.pt"
    model.write_bytes(model.read_bytes().replace(b"2", b"X"))
    before = files_of(own)
    backends, states, _ = resume_ranks([own, stale], store)
    assert [s.epoch for s in states] == [2, 2] and [b.loaded for b in backends] == [weights(2)] * 2
    assert files_of(own) == before  # its copy matched the set's sha256: nothing downloaded
    assert model.read_bytes() == weights(2)  # the copy that differed was replaced


def test_a_set_one_rank_cannot_read_is_passed_over_for_the_one_before(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path / "store")
    own = tmp_path / "a" / "checkpoints"
    train(own, 2, store)
    sets = CheckpointSets(store, f"{JOB}/checkpoints")
    newest = next(sets.manifests())
    store.put(f"{sets.root}{newest.name}/model.pt", b"flipped bits")  # rank 0's copy is whole
    backends, states, _ = resume_ranks([own, tmp_path / "b" / "checkpoints"], store)
    assert [s.epoch for s in states] == [1, 1] and [b.loaded for b in backends] == [weights(1)] * 2


def test_without_a_store_nodes_on_folders_of_their_own_start_over_together(
    tmp_path: Path,
) -> None:
    own = tmp_path / "a" / "checkpoints"
    train(own, 2)
    backends, states, _ = resume_ranks([own, tmp_path / "b" / "checkpoints"], None)
    assert [s.epoch for s in states] == [0, 0] and [b.loaded for b in backends] == [None, None]


@pytest.mark.parametrize("nodes", [2, 3])
def test_nodes_on_one_shared_folder_resume_from_it_and_leave_it_as_it_is(
    tmp_path: Path, nodes: int
) -> None:
    shared = tmp_path / "job" / "checkpoints"  # every worker mounts the same storage
    train(shared, 2)
    before = files_of(shared)
    backends, states, _ = resume_ranks([shared] * nodes, None)
    assert [s.epoch for s in states] == [2] * nodes
    assert [b.loaded for b in backends] == [weights(2)] * nodes
    assert files_of(shared) == before  # no copy, no pointer rewritten
