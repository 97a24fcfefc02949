"""Every op, found once in the ops package: adding an op is adding one module there."""

from __future__ import annotations

from typing import Annotated, Any, Union

from pydantic import Field

from app.schemas.graph import ops as ops_package
from app.schemas.graph.base import Op
from app.schemas.registry import discover

OPS: dict[str, type[Op]] = discover(ops_package, Op, "op")
# The node of a graph: one of the ops, told apart by its `op` field.
Node: Any = Annotated[Union[tuple(OPS.values())], Field(discriminator="op")]  # noqa: UP007
