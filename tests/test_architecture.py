"""The import rules and the type checker of the Development page (docs/development.md), enforced
(import-linter and mypy, configured in pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_import_contracts_hold() -> None:
    out = subprocess.run(
        [str(Path(sys.executable).parent / "lint-imports")],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_type_checker_finds_no_error() -> None:
    # `make lint`'s mypy, here so that CI runs it too; warn_unused_ignores makes every
    # `type: ignore` one that is still needed.
    out = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_api_process_never_loads_a_framework_or_the_worker() -> None:
    code = (
        "import sys, app.main, app.cli; "
        "bad = [m for m in ('torch', 'tensorflow', 'keras', 'worker') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def test_states_file_layout_ids_and_metric_row_load_nothing_but_the_stdlib() -> None:
    # The training core and the client-free tools import these; they must stay this light.
    code = (
        "import sys, app.domain.states, app.domain.job_files, app.schemas.ids, "
        "app.schemas.metric_row; "
        "bad = [m for m in ('sqlalchemy', 'pydantic', 'numpy', 'fastapi') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)
