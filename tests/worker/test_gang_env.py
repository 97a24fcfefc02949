"""What a gang node's training process is started with, by the supervisor's own start_child:
its node and the attempt's secret (PyTorch's nodes; TensorFlow's servers cannot ask for one),
the port sharing TensorFlow needs beside the held seat port, and no database URL on a node
that never writes to the database (every node but 0). The secret is in no log line or repr."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.core.config import Settings, get_settings
from app.core.db import session_scope
from app.domain import crud
from app.domain.job_files import JobFiles
from app.domain.tables import utcnow
from app.schemas.job_spec import JobSpec
from tests.worker.gang_nodes import stand_in_child
from worker.protocol import GANG_SECRET_ENV, GangNode
from worker.supervisor.gang_seat import TF_REUSE_PORT_ENV, Formed
from worker.supervisor.runner import start_child

SECRET = "5e" * 32


@pytest.fixture
def settings(db_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """A stand-in training process that writes its environment next to its log."""
    code = (
        "import json, os, sys\n"
        f"open({str(tmp_path)!r} + '/env-' + os.environ['EPOCHAL_GANG_NODE'][0], 'w')"
        ".write(json.dumps(dict(os.environ)))\n"
    )
    settings = stand_in_child(tmp_path, monkeypatch, code)
    monkeypatch.setenv("EPOCHAL_TENSORFLOW_PYTHON", str(settings.pytorch_python))
    get_settings.cache_clear()
    return get_settings()


def node_of(
    settings: Settings, folder: Path, framework: str, rank: int
) -> tuple[dict[str, str], Formed]:
    """Start node `rank` of a 2-node gang as the runner does; its environment and its gang."""
    spec = JobSpec.model_validate(
        {"framework": framework, "dataset": {"name": "digits"}, "resources": {"nodes": 2}}
    )
    with session_scope() as session:
        job_id = crud.create_job(session, spec, "gpus-0").id
    node = GangNode(rank, 2, "tcp://127.0.0.1:29500", ("127.0.0.1:29500",) * 2, SECRET)
    formed = Formed(job_id, 1, spec.model_dump(), utcnow(), node, f"w{rank}")
    attempt = start_child(settings, job_id, 1, spec, 600, formed)
    assert attempt.process.wait(timeout=60) == 0
    env = json.loads((folder / f"env-{rank}").read_text())
    log = JobFiles.of(settings.resolved_artifacts_dir, job_id, rank).log.read_text()
    assert SECRET not in log and SECRET not in repr(formed)
    return env, formed


@pytest.mark.parametrize("rank", [0, 1])
def test_a_pytorch_node_gets_the_secret_and_only_node_0_the_database(
    settings: Settings, db_env: dict[str, str], tmp_path: Path, rank: int
) -> None:
    env, _ = node_of(settings, tmp_path, "pytorch", rank)
    assert env[GANG_SECRET_ENV] == SECRET
    assert env["EPOCHAL_GANG_NODE"] == f"{rank},2"
    for name in ("EPOCHAL_DATABASE_URL", "EPOCHAL_BROKER_URL"):  # PostgreSQL and Redis
        assert (name in env) == (rank == 0 and name in db_env)
    assert env["GLOO_SOCKET_IFNAME"] == "lo"  # the advertised address's interface


def test_a_tensorflow_node_shares_its_held_port_and_holds_no_secret(
    settings: Settings, tmp_path: Path
) -> None:
    env, _ = node_of(settings, tmp_path, "tensorflow", 1)
    assert GANG_SECRET_ENV not in env and "EPOCHAL_DATABASE_URL" not in env
    assert env[TF_REUSE_PORT_ENV] == "1"
