"""A TensorFlow gang's TF_CONFIG: from the seats' published addresses to each node's task,
and each node's server on the port its worker holds."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from tests.worker.training.inprocess import make_spec
from worker.child.launch import placement_for
from worker.protocol import GangNode
from worker.supervisor import gang_port
from worker.supervisor.gang_seat import TF_REUSE_PORT_ENV
from worker.training.backend import Placement
from worker.training.tf.cluster import tf_config

PEERS = ("10.0.0.1:41000", "10.0.0.2:42000", "10.0.0.3:43000")


@pytest.mark.parametrize("rank", [0, 1, 2])
def test_each_node_is_the_worker_task_of_its_rank_in_one_cluster(rank: int) -> None:
    config = tf_config(Placement(replicas=3, rank=rank, peers=PEERS))
    assert config == {
        "cluster": {"worker": list(PEERS)},
        "task": {"type": "worker", "index": rank},
    }


def test_a_node_child_learns_its_rank_and_every_peer_from_its_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    node = GangNode(2, 3, f"tcp://{PEERS[0]}", PEERS)
    assert GangNode.from_env(node.env()) == node
    for name, value in node.env().items():
        monkeypatch.setenv(name, value)
    spec = make_spec("tensorflow", resources={"nodes": 3}, training={"batch_size": 30})
    placement = placement_for(spec, 0, None)
    assert (placement.replicas, placement.rank, placement.peers) == (3, 2, PEERS)
    assert not placement.is_main  # node 2 writes no checkpoint, row, model or outcome
    assert tf_config(placement)["task"] == {"type": "worker", "index": 2}


def test_one_node_has_no_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in GangNode(0, 1, "tcp://x:1").env():
        monkeypatch.delenv(name, raising=False)
    spec = make_spec("tensorflow", resources={"replicas": 2})
    placement = placement_for(spec, 0, None)
    assert (placement.replicas, placement.peers, placement.is_main) == (2, (), True)


SERVE = """
import sys, tensorflow as tf
tf.distribute.Server({"worker": [sys.argv[1]]}, job_name="worker", task_index=0, protocol="grpc")
print("serving", flush=True)
"""


def test_a_nodes_server_binds_the_port_its_worker_holds() -> None:
    """The seat's port stays held by its worker (no other program can take it), and the
    node's TensorFlow server binds beside the holder, as its environment tells it to."""
    holder = gang_port.hold()
    try:
        with socket.socket() as stranger, pytest.raises(OSError):
            stranger.bind(("", gang_port.port_of(holder)))
        env = {**os.environ, TF_REUSE_PORT_ENV: "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
        argv = [sys.executable, "-c", SERVE, f"127.0.0.1:{gang_port.port_of(holder)}"]
        served = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    finally:
        holder.close()
    assert served.returncode == 0, served.stderr[-2000:]
    assert "serving" in served.stdout
