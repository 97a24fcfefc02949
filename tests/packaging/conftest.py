"""Session fixtures: the wheels built once, and one fresh virtualenv per kind of install."""

from __future__ import annotations

import pytest

from tests.packaging.venvs import (
    TIMINGS,
    Venv,
    Wheels,
    build_wheels,
    make_venv,
    server_requirements,
)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if TIMINGS:
        terminalreporter.section("packaging steps (wall time)")
        for step, seconds in TIMINGS:
            terminalreporter.write_line(f"{step:<48} {seconds:7.1f} s")


@pytest.fixture(scope="session")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Wheels:
    return build_wheels(tmp_path_factory.mktemp("wheels"))


@pytest.fixture(scope="session")
def server_venv(wheels: Wheels, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    """What a server box installs: both wheels and a PyTorch worker's dependencies."""
    return make_venv(tmp_path_factory.mktemp("venvs"), "server", *server_requirements(wheels))


@pytest.fixture(scope="session")
def client_venv(wheels: Wheels, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    """What a laptop installs: only the client wheel, with its CLI extra."""
    return make_venv(tmp_path_factory.mktemp("venvs"), "client", f"{wheels.client}[cli]")
