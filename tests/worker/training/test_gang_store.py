"""A gang's rendezvous: only holders of the attempt's secret may read or write it, and the
ranks' collectives go on without pickle.

Two real gloo ranks join the way a gang's training processes do (tests/worker/training/
gang_rank.py); a stranger on the same network then tries what reached PyTorch's TCPStore:
list its keys, read one and write another."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import torch.distributed as dist

from tests.helpers import ROOT, scaled, wait_until
from tests.worker.training.gang_rank import OFFSET
from worker.protocol import GANG_SECRET_ENV
from worker.supervisor import gang_port
from worker.training.torch import gang_store
from worker.training.torch.gang_store import GangStore, StoreServer

SECRET = "ab" * 32


def start_rank(rank: int, init: str, folder: Path, secret: str) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "tests.worker.training.gang_rank"]
    argv += [str(rank), "2", init, str(folder)]
    env = {**os.environ, GANG_SECRET_ENV: secret, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(argv, cwd=ROOT, env=env)


def stranger_tries(port: int) -> list[str]:
    """What a process without the secret got from the rendezvous: PyTorch's own client."""
    got: list[str] = []
    try:
        store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=5))
        got.append(f"keys {store.list_keys()}")
        got.append(f"read {store.get('legit')!r}")
        store.set("legit", "evil")
        got.append("wrote evil")
    except (RuntimeError, ValueError, OSError):
        pass
    return got


def test_two_ranks_meet_and_a_stranger_can_neither_read_nor_write(tmp_path: Path) -> None:
    holder = gang_port.hold()  # as rank 0's worker holds the port it published
    port = gang_port.port_of(holder)
    init = f"tcp://127.0.0.1:{port}"
    ranks = [start_rank(rank, init, tmp_path, SECRET) for rank in (0, 1)]
    try:
        joined = [tmp_path / f"joined-{rank}" for rank in (0, 1)]
        wait_until(lambda: all(p.exists() for p in joined), 120, "both ranks in the group")
        assert stranger_tries(port) == []
        (tmp_path / "go").touch()
        for rank in ranks:
            assert rank.wait(timeout=scaled(120)) == 0
    finally:
        holder.close()
        for rank in ranks:
            rank.kill()
    for index in (0, 1):  # both agreed, and pickle was never used
        assert (tmp_path / f"got-{index}").read_text() == str(OFFSET + 1)


def test_a_rank_without_the_secret_cannot_join(tmp_path: Path) -> None:
    holder = gang_port.hold()
    init = f"tcp://127.0.0.1:{gang_port.port_of(holder)}"
    ranks = [start_rank(0, init, tmp_path, SECRET), start_rank(1, init, tmp_path, "cd" * 32)]
    try:
        assert ranks[1].wait(timeout=scaled(120)) != 0  # refused by rank 0's store
        assert not (tmp_path / "joined-1").exists()
        assert not (tmp_path / "joined-0").exists()  # rank 0 still waits for its peer
    finally:
        holder.close()
        for rank in ranks:
            rank.kill()


@pytest.fixture
def served() -> Iterator[tuple[StoreServer, int]]:
    listener = gang_store.listen("127.0.0.1", 0)
    server = StoreServer(listener, SECRET.encode()).start()
    yield server, int(listener.getsockname()[1])
    server.close()


def member(port: int, secret: str = SECRET) -> GangStore:
    return GangStore("127.0.0.1", port, secret.encode(), timedelta(seconds=10))


def test_a_wrong_secret_or_none_gets_nothing_and_changes_nothing(
    served: tuple[StoreServer, int],
) -> None:
    server, port = served
    member(port).set("legit", b"legit")
    with pytest.raises(ConnectionError):
        member(port, "00" * 32)
    with socket.create_connection(("127.0.0.1", port)) as raw:  # a write, no handshake
        gang_store.send_frames(raw, b"set", b"legit", b"evil")
        gang_store.send_frames(raw, b"get", b"legit", b"1")
        seen = raw.recv(4096)
        assert seen.startswith(gang_store.MAGIC) and b"legit" not in seen  # a nonce, no more
    wait_until(lambda: server.refused == 2, 30, "both strangers refused")
    assert member(port).get("legit") == b"legit"
    assert stranger_tries(port) == []


def test_the_store_keeps_tcpstores_semantics(served: tuple[StoreServer, int]) -> None:
    _, port = served
    one, two = member(port), member(port)
    assert one.add("n", 2) == 2 and two.add("n", 3) == 5
    assert two.get("n") == b"5"
    assert one.compare_set("k", "", "v") == b"v"
    assert one.compare_set("k", "x", "w") == b"v"  # not what was expected: unchanged
    assert two.check(["k", "n"]) and not two.check(["k", "absent"])
    two.wait(["k"], timedelta(seconds=1))
    with pytest.raises(dist.DistStoreError):
        two.wait(["absent"], timedelta(seconds=0.2))
    assert one.num_keys() == 2 and one.delete_key("k") and not one.delete_key("k")


def test_the_listener_is_on_the_advertised_address_only() -> None:
    with gang_store.listen("127.0.0.1", 0) as listener:
        assert listener.getsockname()[0] == "127.0.0.1"  # not 0.0.0.0
    with gang_store.listen("192.0.2.1", 0) as listener:  # on no interface here (a NAT's)
        assert listener.getsockname()[0] == "0.0.0.0"
