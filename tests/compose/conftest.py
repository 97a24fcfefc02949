"""The deployment test's engine, shared by its stacks, and its hooks: a failed step prints the
stack's logs (the modules read the outcome this hook keeps on the test)."""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import Any

import pytest

from tests.compose import engine as engines
from tests.compose.engine import Engine
from tests.compose.stack import Stack


@pytest.fixture(scope="session")
def engine() -> Iterator[Engine]:
    """The engine with every image the stacks run: the base, the stand-ins, and the api and
    CPU worker images built from the Dockerfile once for all. Stopped at the end (its bridge
    removed, its mounts unmounted)."""
    engine = engines.start()
    try:
        engines.images(engine)
        Stack.create(engine).build()
        yield engine
    finally:
        engines.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


@pytest.fixture(autouse=True)
def logs_on_failure(request: pytest.FixtureRequest, stack: Stack) -> Iterator[None]:
    """The stack's logs after a step that failed (`stack`: each module's own project)."""
    yield
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        print(stack.logs())
