"""Every op, found once in the ops package: adding an op is adding one module there."""

from __future__ import annotations

import importlib
import pkgutil
from typing import Annotated, Any, Union

from pydantic import Field

from app.schemas.graph import ops as ops_package
from app.schemas.graph.base import Op


def _discover() -> dict[str, type[Op]]:
    found: dict[str, type[Op]] = {}
    for info in pkgutil.iter_modules(ops_package.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{ops_package.__name__}.{info.name}")
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, Op)
                and value.__module__ == module.__name__
            ):
                name = value.model_fields["op"].default
                if name in found:
                    raise RuntimeError(f"two ops are called {name!r}")
                found[name] = value
    return dict(sorted(found.items()))


OPS: dict[str, type[Op]] = _discover()
# The node of a graph: one of the ops, told apart by its `op` field.
Node: Any = Annotated[Union[tuple(OPS.values())], Field(discriminator="op")]  # noqa: UP007
