"""A gang's nodes may keep files of their own: the newest checkpoint goes to the rank that
lacks it whole (its manifest holds), and `latest` names it there; nodes that share one folder
(one storage for every worker) send nothing onto it and resume from it as it is."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from worker.training.callbacks import TrainState
from worker.training.checkpoint import Checkpointer, latest_epoch, whole_checkpoints
from worker.training.checkpoint_share import _pack, share_newest


class FileBackend:
    """Just enough of a back-end to write a checkpoint; a peer scripted by its answers."""

    is_main = True

    def __init__(self, answers: list[int] | None = None, payload: bytes = b"") -> None:
        self.answers, self.payload = list(answers or []), payload
        self.sent: int | None = None

    def save_checkpoint(self, directory: Path) -> None:
        (directory / "model.pt").write_bytes(b"weights" * 100)

    def agree(self, value: int) -> int:
        return max(value, self.answers.pop(0)) if self.answers else value

    def broadcast(self, payload: bytes, source: int) -> bytes:
        self.sent = source
        return self.payload or payload


def write_checkpoint(root: Path, epoch: int) -> None:
    state = TrainState(epochs=5, learning_rate=0.1, epoch=epoch)
    backend: Any = FileBackend()
    Checkpointer(root, backend, 1).save(state)


def test_a_rank_without_the_checkpoint_is_sent_it_whole(tmp_path: Path) -> None:
    holder, lacking = tmp_path / "holder", tmp_path / "lacking"
    write_checkpoint(holder, 1)
    write_checkpoint(holder, 2)
    payload = _pack(whole_checkpoints(holder)[0])
    # Rank 1 has none; rank 0 has epoch 2: newest 2, least 0 (as -0), holder rank 0 (as -0).
    peer: Any = FileBackend(answers=[2, 0, 0], payload=payload)
    share_newest(lacking, peer, rank=1)
    assert peer.sent == 0
    assert [p.name for p in whole_checkpoints(lacking)] == ["epoch-0002"]
    assert latest_epoch(lacking) == 2
    assert (lacking / "epoch-0002" / "model.pt").read_bytes() == b"weights" * 100


def test_ranks_that_all_hold_the_newest_send_nothing(tmp_path: Path) -> None:
    write_checkpoint(tmp_path, 3)
    alone: Any = FileBackend()
    share_newest(tmp_path, alone, rank=0)
    assert alone.sent is None  # one process (or one shared folder): nothing to send
    share_newest(tmp_path / "empty", alone, rank=0)  # nobody has one: nothing either
    assert alone.sent is None and not (tmp_path / "empty").exists()


class Group:
    """Ranks as threads: each collective waits until every rank has brought its value."""

    def __init__(self, size: int) -> None:
        self.barrier = threading.Barrier(size, timeout=30)
        self.values: list[Any] = [None] * size
        self.sent: list[int] = []

    def gather(self, rank: int, value: Any) -> list[Any]:
        self.values[rank] = value
        self.barrier.wait()
        seen = list(self.values)
        self.barrier.wait()  # nobody overwrites a value before every rank has read it
        return seen


class RankBackend(FileBackend):
    """One rank of a Group: agree and broadcast are the group's, as a process group's are."""

    def __init__(self, group: Group, rank: int) -> None:
        super().__init__()
        self.group, self.rank, self.is_main = group, rank, rank == 0
        self.loaded: Path | None = None

    def agree(self, value: int) -> int:
        return max(self.group.gather(self.rank, value))

    def broadcast(self, payload: bytes, source: int) -> bytes:
        if self.rank == source:
            self.group.sent.append(source)
        return bytes(self.group.gather(self.rank, payload)[source])

    def load_checkpoint(self, directory: Path) -> None:
        self.loaded = directory


def run_ranks(folders: list[Path]) -> list[RankBackend]:
    """share_newest then restore on every rank at once, rank r on folders[r], as a gang's
    nodes do at an attempt's start (each rank's `loaded`: the checkpoint it resumed from)."""
    group = Group(len(folders))
    backends = [RankBackend(group, rank) for rank in range(len(folders))]

    def rank_start(rank: int) -> None:
        share_newest(folders[rank], backends[rank], rank)
        state = TrainState(epochs=9, learning_rate=0.1)
        Checkpointer(folders[rank], backends[rank], 1).restore(state)

    threads = [threading.Thread(target=rank_start, args=(r,)) for r in range(len(folders))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return backends


def files_of(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under `root`: its inode and modification time."""
    return {
        str(p.relative_to(root)): (p.stat().st_ino, p.stat().st_mtime_ns)
        for p in root.rglob("*")
        if p.is_file()
    }


def test_nodes_on_one_shared_folder_send_nothing_and_resume_from_it(tmp_path: Path) -> None:
    shared = tmp_path / "job" / "checkpoints"  # every worker mounts the same storage
    write_checkpoint(shared, 1)
    write_checkpoint(shared, 2)
    before = files_of(shared)
    backends = run_ranks([shared, shared])
    assert backends[0].group.sent == []  # nothing sent onto the folder it came from
    assert [b.loaded for b in backends] == [shared / "epoch-0002"] * 2  # both resume from it
    rank_1 = backends[1]
    Checkpointer(shared, rank_1, 1).save(TrainState(epochs=9, learning_rate=0.1, epoch=9))
    assert files_of(shared) == before  # untouched: no copy, no pointer rewritten, no save


def test_a_node_on_its_own_folder_gets_the_shared_ones_checkpoint(tmp_path: Path) -> None:
    shared, own = tmp_path / "shared", tmp_path / "own"  # nodes 0 and 1 share, node 2 not
    write_checkpoint(shared, 3)
    before = files_of(shared)
    backends = run_ranks([shared, shared, own])
    assert backends[0].group.sent == [0]  # the lowest rank that holds it, once
    assert files_of(shared) == before
    assert backends[2].loaded == own / "epoch-0003" and latest_epoch(own) == 3
