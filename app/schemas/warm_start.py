"""`init`: a new job's first weights taken from a succeeded job's, node by node (warm start);
and `continues`: a job that goes on from another's last checkpoint (POST /v1/jobs/{id}/continue,
its body: app.schemas.continuation).

Which nodes may be taken is checked at submit (app.domain.warm_start) against both graphs as
built for their data, by name, op and variable shapes; the worker then loads them in either
framework from the source job's weights (worker.training.warm_start).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from app.schemas.graph.base import NAME_PATTERN
from app.schemas.graph.model import MAX_NODES
from app.schemas.ids import ID_MAX_LENGTH, ID_PATTERN
from app.schemas.strict import StrictModel

NodeName = Annotated[str, Field(pattern=NAME_PATTERN, max_length=64)]
NodeList = Annotated[list[NodeName], Field(min_length=1, max_length=MAX_NODES)]


class InitSpec(StrictModel):
    """Where the job's first weights come from; the nodes not taken start as usual."""

    from_job: str = Field(
        max_length=ID_MAX_LENGTH,
        pattern=ID_PATTERN,
        description="a succeeded job of the same key; either framework",
    )
    nodes: Literal["matching"] | NodeList = Field(
        "matching",
        description='"matching": every node of the same name, op and variable shapes in both '
        "graphs (the head only when the classes are the same); or the nodes to take, by name, "
        "each required to match (the stored spec lists the nodes taken)",
    )
    checkpoint: Literal["best", "last"] = Field(
        "last",
        description="last: the weights of the source's last epoch; best: those of its best "
        "epoch (the source must have kept them: restore_best_weights, or best = last)",
    )

    def named(self) -> list[str] | None:
        """The nodes asked for by name (None: "matching")."""
        return None if self.nodes == "matching" else list(self.nodes)


ContinuesField = Field(
    None,
    max_length=ID_MAX_LENGTH,
    pattern=ID_PATTERN,
    description="a succeeded job of the same key, framework and model this job goes on from: "
    "its last checkpoint (weights, optimizer state, schedule, early stopping) and epoch count; "
    "training.epochs counts its epochs too (set by POST /v1/jobs/{id}/continue)",
)
