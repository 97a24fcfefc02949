"""The model as a graph: named nodes in order, each reading earlier ones; checked, built for
one input (shapes inferred node by node) and summarized, head included."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from app.schemas.graph.base import INITIALIZER_NAMES, GraphError, Op, TensorType, Variable
from app.schemas.graph.ops.dense import Dense
from app.schemas.graph.ops.flatten import Flatten
from app.schemas.graph.registry import OPS, Node
from app.schemas.strict import StrictModel

INPUT = "input"  # the name that reads the data
HEAD, HEAD_FLATTEN = "head", "head_flatten"  # what the service adds
RESERVED = {INPUT, HEAD, HEAD_FLATTEN}
MAX_NODES = 256


def _named_errors(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """The layers; an error inside one says which: "layer 3 'c1' (conv2d): ..."."""
    try:
        return handler(value)
    except ValidationError as exc:
        details = [_named(error, value) for error in exc.errors()]
        raise ValidationError.from_exception_data(exc.title, details) from None


def _named(error: Any, layers: Any) -> InitErrorDetails:
    """The error with the layer it is in named in its message (its loc stays Pydantic's)."""
    loc, msg = tuple(error["loc"]), str(error["msg"])
    if not loc and error["type"] == "too_long" and isinstance(layers, list):
        msg = f"a graph has at most {MAX_NODES} layers; this one has {len(layers)}"
    index = loc[0] if loc and isinstance(loc[0], int) else None
    if index is not None and isinstance(layers, list) and index < len(layers):
        item = layers[index] if isinstance(layers[index], dict) else {}
        name, op = item.get("name"), item.get("op")
        if error["type"] in ("union_tag_invalid", "union_tag_not_found"):
            given = f"unknown op {str(op)[:64]!r}" if op is not None else "no op given"
            msg = f"{given}; the ops are {', '.join(OPS)}"
        who = f"layer {index}"
        who += f" {name[:64]!r}" if isinstance(name, str) else ""
        who += f" ({op[:64]})" if isinstance(op, str) and op in OPS else ""
        msg = f"{who}: {msg}"
    custom = PydanticCustomError(error["type"], "{message}", {"message": msg})
    return InitErrorDetails(type=custom, loc=loc, input=error.get("input"))


class GraphSpec(StrictModel):
    """Named layers in order; a layer reads the one before it unless `inputs` names earlier
    ones ("input" is the data). The service adds the head: Dense to the classes (or to 1 for
    regression), after a flatten when the graph ends in a sequence or an image."""

    type: Literal["graph"] = "graph"
    layers: Annotated[list[Node], WrapValidator(_named_errors)] = Field(
        min_length=1,
        max_length=MAX_NODES,
        description='the nodes, in order: {"name", "op", "inputs"?, ...the op\'s fields}',
    )

    @model_validator(mode="after")
    def _wired(self) -> GraphSpec:
        seen = {INPUT}
        for index, node in enumerate(self.layers):
            if node.name in RESERVED:
                raise GraphError(
                    f"{node.op} {node.name!r} (layer {index}): the name is reserved; "
                    f"{INPUT!r} is the data, {HEAD!r} and {HEAD_FLATTEN!r} the head"
                )
            if node.name in seen:
                raise GraphError(f"{node.op} {node.name!r}: two layers are called {node.name!r}")
            for name in wiring(node, self.layers[index - 1] if index else None):
                if name not in seen:
                    later = any(n.name == name for n in self.layers[index:])
                    where = (
                        "comes later (inputs name earlier layers)" if later else "does not exist"
                    )
                    raise GraphError(f"{node.op} {node.name!r}: its input {name!r} {where}")
            low, high = node.arity
            count = len(wiring(node, None))
            if not low <= count <= high:
                raise GraphError(f"{node.op} {node.name!r} takes {low} to {high} inputs; name them")
            seen.add(node.name)
        return self

    def graph(self, x: TensorType) -> GraphSpec:
        """Itself: a graph is its own template."""
        return self


def wiring(node: Op, before: Op | None) -> list[str]:
    """The names a node reads: its inputs, else the node before it, else the data."""
    if node.inputs:
        return list(node.inputs)
    return [before.name if before is not None else INPUT]


@dataclass(frozen=True)
class BuiltNode:
    """A node with its inputs resolved: names, their types, its output type."""

    op: Op
    inputs: tuple[str, ...]
    types: tuple[TensorType, ...]
    out: TensorType

    @property
    def name(self) -> str:
        return self.op.name

    def variables(self) -> list[Variable]:
        """The op's variables; a frozen node's parameters are frozen (no gradient, no L2), a
        trained node's parameters carry its lr_multiplier."""
        variables = self.op.variables(list(self.types))
        if not self.op.trainable:
            return [
                replace(v, trainable=False, decays=False, frozen=v.trainable) for v in variables
            ]
        if self.op.lr_multiplier == 1.0:
            return variables
        multiplier = self.op.lr_multiplier  # moving statistics take no step to scale
        return [replace(v, lr_multiplier=multiplier) if v.trainable else v for v in variables]

    @property
    def parameters(self) -> int:
        return sum(v.size for v in self.variables() if v.trainable)

    @property
    def frozen_parameters(self) -> int:
        return sum(v.size for v in self.variables() if v.frozen)

    @property
    def flops(self) -> int:
        return self.op.flops(list(self.types), self.out)


@dataclass(frozen=True)
class BuiltGraph:
    """A graph built for one input and output width: what every back-end and the exporter
    walk, and what the summary and the cost model read."""

    input: TensorType
    nodes: tuple[BuiltNode, ...]

    @property
    def output(self) -> str:
        return self.nodes[-1].name

    def variables(self) -> list[Variable]:
        return [v for node in self.nodes for v in node.variables()]

    @property
    def parameters(self) -> int:
        """Trainable parameters (a frozen node's are frozen_parameters)."""
        return sum(v.size for v in self.variables() if v.trainable)

    @property
    def frozen_parameters(self) -> int:
        return sum(v.size for v in self.variables() if v.frozen)

    @property
    def xla_on_cpu(self) -> bool:
        """Whether every op lets TensorFlow compile the CPU step with XLA (Op.xla_on_cpu)."""
        return all(node.op.xla_on_cpu for node in self.nodes)

    @property
    def flops_per_sample(self) -> int:
        return sum(node.flops for node in self.nodes)

    def kept_per_sample(self, framework: str) -> int:
        """Values one sample's forward pass keeps for the backward pass in `framework`: the
        input and what each node keeps (Op.kept: its output, or more)."""
        kept = (node.op.kept(list(node.types), node.out, framework) for node in self.nodes)
        return self.input.size + sum(kept)

    def summary(self) -> dict[str, Any]:
        layers = [
            {
                "name": node.name,
                "op": node.op.op,
                "output_shape": list(node.out.shape),
                "parameters": node.parameters,
                "frozen_parameters": node.frozen_parameters,
            }
            for node in self.nodes
        ]
        return {
            "parameters": self.parameters,
            "frozen_parameters": self.frozen_parameters,
            "flops_per_sample": self.flops_per_sample,
            "layers": layers,
        }

    def heaviest(self, what: Literal["parameters", "flops"]) -> str:
        """The layer with the most parameters (or FLOPs), in words: what to shrink first."""
        node = max(self.nodes, key=lambda n: getattr(n, what))
        noun = "FLOPs" if what == "flops" else "parameters"
        return f"{node.op.op} {node.name!r} of output {node.out} has {getattr(node, what):,} {noun}"


def build(graph: GraphSpec, x: TensorType, outputs: int) -> BuiltGraph:
    """Infer every node's output from the input; add the head. GraphError when one does not
    fit (the message names the node and the shapes)."""
    types: dict[str, TensorType] = {INPUT: x}
    nodes: list[BuiltNode] = []
    before: Op | None = None
    for op in graph.layers:
        before = _add(nodes, types, op, before)
    for op in _head(nodes[-1], outputs):
        before = _add(nodes, types, op, before)
    return BuiltGraph(x, tuple(nodes))


def _add(nodes: list[BuiltNode], types: dict[str, TensorType], op: Op, before: Op | None) -> Op:
    names = tuple(wiring(op, before))
    ins = tuple(types[name] for name in names)
    types[op.name] = out = op.infer(list(ins))
    variables = op.variables(list(ins))
    _known_initializers(op, variables)
    trains = any(v.trainable for v in variables)
    if not op.trainable and not trains:
        raise op.fail("has no parameters to freeze; trainable: false is for nodes with weights")
    if op.lr_multiplier != 1.0 and not (trains and op.trainable):
        why = "is frozen (trainable: false)" if trains else "has no parameters"
        raise op.fail(f"{why}: lr_multiplier {op.lr_multiplier:g} would scale nothing")
    nodes.append(BuiltNode(op, names, ins, out))
    return op


def _known_initializers(op: Op, variables: list[Variable]) -> None:
    """Fail at submit, naming the variable, when an op names an initializer no back-end
    draws (mypy finds it first where the name is a literal)."""
    for variable in variables:
        if variable.init not in INITIALIZER_NAMES:
            raise op.fail(
                f"variable {variable.name!r} names initializer {variable.init!r}, not one of "
                f"{', '.join(INITIALIZER_NAMES)}"
            )


def _head(last: BuiltNode, outputs: int) -> list[Op]:
    """Dense to the outputs, after a flatten when the graph ends in more than one axis."""
    if last.out.tokens:
        raise GraphError(f"the graph ends in token ids {last.out}; put an embedding first")
    head: list[Op] = []
    if len(last.out.shape) > 1:
        head.append(Flatten(name=HEAD_FLATTEN, inputs=[last.name]))
    head.append(Dense(name=HEAD, units=outputs, inputs=[head[-1].name if head else last.name]))
    return head
