"""Docs that must not drift: README's generated references, the examples, DEPLOY.md."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from app.schemas.job_spec import JobSpec
from epochal_client.cli import load_spec
from tools.spec_reference import rewrite

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


def test_readme_references_match_the_schema_and_the_cli() -> None:
    readme = (ROOT / "README.md").read_text()
    assert rewrite(readme) == readme, "README.md is stale: run python -m tools.spec_reference"
    for field in JobSpec.model_fields:
        assert f"| `{field}` |" in readme
    check = [sys.executable, "-m", "tools.spec_reference", "--check"]
    assert subprocess.run(check, cwd=ROOT).returncode == 0


def test_a_changed_schema_is_caught() -> None:
    readme = (ROOT / "README.md").read_text()
    stale = readme.replace("| `max_restarts` | integer | `2`", "| `max_restarts` | integer | `3`")
    assert stale != readme and rewrite(stale) == readme


def test_there_is_an_example_for_each_kind_of_run() -> None:
    specs = [JobSpec.model_validate(load_spec(path, [])) for path in EXAMPLES]
    assert {s.framework for s in specs} == {"pytorch", "tensorflow"}
    assert any(s.model.type == "cnn" for s in specs)
    assert any(s.task == "regression" for s in specs)
    assert any(s.resources.replica_count == 2 for s in specs)
    assert any(s.early_stopping and s.regularization.l2 for s in specs)
    assert any(s.lr_scheduler and s.lr_scheduler.name == "step" for s in specs)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_is_a_valid_spec(path: Path) -> None:
    JobSpec.model_validate(load_spec(path, []))


def test_deploy_guide_covers_the_production_topics() -> None:
    guide = (ROOT / "DEPLOY.md").read_text()
    for topic in (
        "nvidia-container-toolkit",
        "docker compose up",
        "pg_dump",
        "--profile flower",
        "epochal migrate",
        "EPOCHAL_WORKER_GPUS",
        "/metrics",
    ):
        assert topic in guide, topic
