"""The job's model as a graph built for its data: the model field's union, the size limits,
and the build kept on the spec object so one request builds each graph once.

Pure Pydantic and the standard library, like the job spec that holds the model.
"""

from __future__ import annotations

from typing import Annotated, Any, Protocol

from pydantic import Discriminator, Tag

from app.schemas.graph import (
    BuiltGraph,
    CNNSpec,
    GraphError,
    GraphSpec,
    MLPSpec,
    TensorType,
    build,
)

MAX_PARAMETERS = 50_000_000
MAX_FLOPS_PER_SAMPLE = 200_000_000_000


def _model_type(value: Any) -> str:
    """`type` may be left out: an MLP is the default model."""
    if isinstance(value, dict):
        return str(value.get("type", "mlp"))
    return str(getattr(value, "type", "mlp"))


ModelSpec = Annotated[
    Annotated[MLPSpec, Tag("mlp")]
    | Annotated[CNNSpec, Tag("cnn")]
    | Annotated[GraphSpec, Tag("graph")],
    Discriminator(_model_type),
]


class SpecModel(Protocol):
    """What the graph helpers read of a job spec (a JobSpec is one)."""

    @property
    def model(self) -> ModelSpec: ...

    @property
    def _builds(self) -> Builds: ...


class Builds:
    """The graphs built for one spec object, by input and output width, each with the model
    it was built from: the validator's build serves the data-set check, admission and the
    stored summary of the same request. Not part of the spec's value: any two compare equal
    (pydantic compares private attributes). Bounded by the inputs one spec is built for."""

    def __init__(self) -> None:
        self.graphs: dict[tuple[TensorType, int], tuple[object, BuiltGraph]] = {}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Builds)


def built_model(spec: SpecModel, x: TensorType, outputs: int) -> BuiltGraph:
    """The job's model as a graph built for its data (head included); GraphError if not.
    Built once per spec object and input: a copy with another model builds its own."""
    graphs = spec._builds.graphs
    found = graphs.get((x, outputs))
    if found is not None and found[0] is spec.model:
        return found[1]
    graph = build(spec.model.graph(x), x, outputs)
    graphs[(x, outputs)] = (spec.model, graph)
    return graph


def count_parameters(model: ModelSpec, sample_shape: tuple[int, ...], outputs: int) -> int:
    """Trainable parameters of the model the spec describes (same count in both back-ends)."""
    x = TensorType(tuple(sample_shape))
    return build(model.graph(x), x, outputs).parameters


def check_model_for_data(spec: SpecModel, x: TensorType, outputs: int) -> BuiltGraph:
    """Raise ValueError when the model cannot take this input or is too large; else the built
    graph (its summary is the job's model_summary)."""
    try:
        graph = built_model(spec, x, outputs)
    except GraphError as exc:
        raise ValueError(f"model: {exc}") from None
    parameters = graph.parameters + graph.frozen_parameters  # frozen ones are held too
    if parameters > MAX_PARAMETERS:
        raise ValueError(
            f"the model has {parameters:,} parameters; the limit is {MAX_PARAMETERS:,} "
            f"(the largest, {graph.heaviest('parameters')})"
        )
    if graph.flops_per_sample > MAX_FLOPS_PER_SAMPLE:
        raise ValueError(
            f"the model costs {graph.flops_per_sample:,} FLOPs per sample; "
            f"the limit is {MAX_FLOPS_PER_SAMPLE:,} (the largest, {graph.heaviest('flops')})"
        )
    return graph
