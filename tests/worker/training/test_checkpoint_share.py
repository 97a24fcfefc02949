"""A gang's nodes keep files of their own: the newest checkpoint goes to the rank that lacks
it whole (its manifest holds), and `latest` names it there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from worker.training.callbacks import TrainState
from worker.training.checkpoint import (
    Checkpointer,
    _pack,
    latest_epoch,
    share_newest,
    whole_checkpoints,
)


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
