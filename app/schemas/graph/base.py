"""What every layer op is: a strict spec model that also knows its shapes, variables and cost,
and how each back-end and the ONNX exporter computes it.

An op module never imports a framework: each back-end hands its own kit (the framework's
namespace and a few layout helpers, typed as app.schemas.graph.kits' Protocols) to the builder
methods, so the API can check and cost a graph without PyTorch or TensorFlow installed, and
everything about one op stays in one file.
Shapes are one sample's, channels last, as Keras lays them out; so are variables.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Literal, Protocol, get_args

import numpy as np
from pydantic import Field

from app.schemas.graph.kits import K, KerasLayer, KerasModules, OnnxKit, T, TorchKit
from app.schemas.strict import StrictModel

NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_\-]{0,63}$"
MAX_INPUTS = 8

# How a variable's first values are drawn; worker.training.init maps each name to its draw.
InitializerName = Literal[
    "glorot_uniform", "orthogonal", "small_uniform", "forget_bias", "zeros", "ones"
]
INITIALIZER_NAMES: tuple[InitializerName, ...] = get_args(InitializerName)


@dataclass(frozen=True)
class TensorType:
    """What flows along an edge, per sample: its shape and whether it holds token ids."""

    shape: tuple[int, ...]
    tokens: bool = False
    vocab: int | None = None  # token ids are below this, when the data set says so

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def __str__(self) -> str:
        kind = " token ids" if self.tokens else ""
        return f"({', '.join(map(str, self.shape))}{',' if len(self.shape) == 1 else ''}){kind}"


@dataclass(frozen=True)
class Variable:
    """One model variable in Keras layout: its name within the op, shape and initializer.

    init names one of worker.training.init's initializers; `decays` puts it in the L2 term
    (kernels, not biases, norm scales, embeddings or positions); moving statistics are not
    trainable and are not parameters. A frozen node's parameters are `frozen`: parameters
    that neither train nor decay. `lr_multiplier` scales the rate the variable trains at (its
    node's; 1: the schedule's rate).
    """

    name: str
    shape: tuple[int, ...]
    init: InitializerName
    trainable: bool = True
    decays: bool = False
    frozen: bool = False
    lr_multiplier: float = 1.0

    @property
    def size(self) -> int:
        return math.prod(self.shape)


def kernel(name: str, shape: tuple[int, ...]) -> Variable:
    return Variable(name, shape, "glorot_uniform", decays=True)


def bias(name: str, shape: tuple[int, ...]) -> Variable:
    return Variable(name, shape, "zeros")


class KerasKit(KerasModules[K], Protocol[K]):
    """What keras_layer and keras_forward get: keras.layers, keras.ops and the back-end's
    generic layer, which runs an op's keras_forward on variables the op describes."""

    def OpLayer(self, op: Op, types: list[TensorType], /) -> KerasLayer: ...


class GraphError(ValueError):
    """A graph that cannot be built; the message names the node and the shapes."""


class Op(StrictModel):
    """A node of the graph. Subclasses set `op` (a Literal) and their own bounded fields."""

    name: str = Field(pattern=NAME_PATTERN, description="unique within the graph")
    op: str = Field(description="which op the layer is: one of those below")
    inputs: list[str] | None = Field(
        None,
        min_length=1,
        max_length=MAX_INPUTS,
        description='earlier nodes (or "input", the data) this node reads; default: the node '
        "before it",
    )
    trainable: bool = Field(
        True,
        description="false freezes the node: its variables take no gradient, no weight decay "
        "and no L2 term, and it computes as at inference (batch norm keeps its moving "
        "statistics); only for a node with variables",
    )
    lr_multiplier: float = Field(
        1.0,
        gt=0.0,
        le=100.0,
        allow_inf_nan=False,
        description="scales the learning rate of the node's variables: they step at the "
        "schedule's rate times this (decoupled weight decay too), e.g. 0.1 for a pretrained "
        "backbone under a new head; only for a node that trains (has variables, not frozen)",
    )

    arity: ClassVar[tuple[int, int]] = (1, 1)  # (fewest, most) inputs
    # Whether TensorFlow may compile a CPU training step holding this op with XLA: false where
    # XLA's CPU back-end emits generic loops for some kernels (a convolution's gradients) where
    # TensorFlow's own call tuned libraries (figures: docs/benchmarks.md,
    # "Graph models on Fashion-MNIST").
    xla_on_cpu: ClassVar[bool] = True

    # -- checked at submit, pure ----------------------------------------------------------
    def infer(self, xs: list[TensorType]) -> TensorType:
        """The output for these inputs; raise GraphError (via self.fail) when they do not fit."""
        raise NotImplementedError

    def variables(self, xs: list[TensorType]) -> list[Variable]:
        """The op's variables in Keras layout and order; none by default."""
        return []

    def flops(self, xs: list[TensorType], out: TensorType) -> int:
        """Floating-point operations of one sample's forward pass (a multiply-add is 2)."""
        return 0

    def kept(self, xs: list[TensorType], out: TensorType, framework: str) -> int:
        """Values of one sample the op holds for the backward pass in `framework` (pytorch,
        tensorflow): its output by default; an op whose forward keeps more (a recurrence's
        per-step states, attention) says so. app.domain.cost counts them twice: the values
        and, at the backward pass, their gradients."""
        return out.size

    def fail(self, why: str) -> GraphError:
        return GraphError(f"{self.op} {self.name!r}: {why}")

    def needs_rank(self, x: TensorType, ranks: tuple[int, ...], what: str) -> None:
        """Fail unless x has one of these ranks (a sample's dimensions) and holds values."""
        if x.tokens:
            raise self.fail(f"takes real values, not its input {x}; put an embedding first")
        if len(x.shape) not in ranks:
            raise self.fail(f"needs {what}; its input is {x}")

    # -- built by the back-ends and the exporter, each handing in its kit -----------------
    def torch_forward(self, t: TorchKit[T], w: list[T], xs: list[T], training: bool) -> T:
        """The op in PyTorch on channels-last tensors; w holds variables() as tensors."""
        raise NotImplementedError

    def keras_layer(self, k: KerasKit[K], xs: list[TensorType]) -> KerasLayer:
        """A Keras layer whose weights are variables() in order; default: the kit's generic
        layer, which calls keras_forward."""
        return k.OpLayer(self, xs)

    def keras_forward(self, k: KerasKit[K], w: list[K], xs: list[K], training: bool) -> K:
        """The op in keras.ops, for ops Keras has no layer for."""
        raise NotImplementedError

    def onnx(self, g: OnnxKit, xs: list[str], w: list[np.ndarray], types: list[TensorType]) -> str:
        """Emit the op's ONNX nodes on the exporter's builder; return the output's name."""
        raise NotImplementedError


class JoinOp(Op):
    """An op that joins two or more earlier nodes (add, concat): `inputs` must name them."""

    inputs: list[str] | None = Field(
        None, min_length=2, max_length=MAX_INPUTS, description="two or more earlier nodes"
    )
    arity: ClassVar[tuple[int, int]] = (2, MAX_INPUTS)

    def values_in(self, xs: list[TensorType]) -> None:
        """Fail unless every input holds real values (not token ids)."""
        for x in xs:
            self.needs_rank(x, (1, 2, 3), "values")
