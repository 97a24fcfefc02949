"""The security review, kept true by tests: JSON-only Celery, no pickle anywhere a message,
checkpoint, upload or model could reach it, safe loaders only, no user-supplied paths."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from app.core.config import Settings
from app.schemas.job_spec import JobSpec
from app.services.queue import celery_config

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted((ROOT / "app").rglob("*.py")) + sorted((ROOT / "worker").rglob("*.py"))
UNSAFE_MODULES = {"pickle", "cPickle", "dill", "cloudpickle", "shelve", "marshal", "joblib"}
# torch.distributed's object collectives pickle what they send and unpickle what they get: a
# gang's node would run what another sends (its nodes read checkpoints from the store).
OBJECT_COLLECTIVES = {
    "broadcast_object_list",
    "all_gather_object",
    "gather_object",
    "scatter_object_list",
    "send_object_list",
    "recv_object_list",
}


def calls(path: Path) -> list[ast.Call]:
    return [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Call)]


def name_of(call: ast.Call) -> str:
    return ast.unparse(call.func)


def keyword(call: ast.Call, name: str) -> object:
    for kw in call.keywords:
        if kw.arg == name:
            return ast.literal_eval(kw.value) if isinstance(kw.value, ast.Constant) else "?"
    return None


def test_celery_speaks_json_only(sqlite_env: dict[str, str]) -> None:
    for config in (celery_config(Settings()),):
        assert config["accept_content"] == ["json"] and config["task_serializer"] == "json"
        assert config["result_accept_content"] == ["json"]
    from worker.celery_app import celery_app

    assert list(celery_app.conf.accept_content) == ["json"]
    assert celery_app.conf.task_serializer == "json"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_unsafe_deserialization(path: Path) -> None:
    tree = ast.parse(path.read_text())
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in (
            node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")]
        )
    }
    assert not imported & UNSAFE_MODULES
    for call in calls(path):
        name = name_of(call)
        if name.endswith("torch.load"):
            assert keyword(call, "weights_only") is True, f"{path}: {ast.unparse(call)}"
        if name.split(".")[-1] == "load_model":
            assert keyword(call, "safe_mode") is True, f"{path}: {ast.unparse(call)}"
        if name in ("np.load", "numpy.load"):
            assert keyword(call, "allow_pickle") in (None, False), f"{path}: {ast.unparse(call)}"
        if name.split(".")[-1] in OBJECT_COLLECTIVES:
            raise AssertionError(f"{path}: {ast.unparse(call)} pickles between processes")
        if name in ("yaml.load", "yaml.unsafe_load"):
            raise AssertionError(f"{path}: {ast.unparse(call)} (use yaml.safe_load)")
        assert keyword(call, "shell") in (None, False), f"{path}: {ast.unparse(call)}"


def test_a_job_cannot_name_a_file() -> None:
    """Data sets are a built-in name or an upload id (letters, digits, dashes): no paths."""
    dataset = JobSpec.model_json_schema()["$defs"]["DatasetSpec"]["properties"]
    assert not {"path", "url", "file", "uri", "dir"} & set(dataset)
    assert dataset["id"]["anyOf"][0]["pattern"] == "^[A-Za-z0-9-]+$"


def test_key_digests_are_compared_in_constant_time() -> None:
    """P43: the stored digest meets the presented one only in hmac.compare_digest, never `==`."""
    path = ROOT / "app" / "domain" / "keys.py"
    compared = [c for c in calls(path) if name_of(c) == "hmac.compare_digest"]
    # the key row's digest, and the cached copy of it (app.domain.keys.KeyRow, in KeyCache)
    stored = {ast.unparse(c.args[0]) for c in compared}
    assert stored and stored <= {"row.secret_hash", "self.secret_hash"}
    equalities = [
        ast.unparse(node)
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Compare) and "secret_hash" in ast.unparse(node)
    ]
    assert equalities == []
