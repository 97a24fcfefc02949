"""The job's graph as one nn.Module: a module per node, each asking its op how to compute.

Tensors stay channels last, as the spec writes shapes: an op that needs PyTorch's
channels-first layout (a convolution, a pool) moves the axis for its own call, so flatten
orders, shapes and the weights (held in Keras layout, as worker.training.init draws them) are
the same as in the TensorFlow back-end and model.onnx, with no conversion anywhere.
"""

from __future__ import annotations

from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from app.schemas.graph import INPUT, BuiltGraph, BuiltNode, Variable
from app.schemas.graph.kits import TorchFunctional, TorchKit, TorchOps
from app.schemas.optimizer_kits import TorchOptim


class _TorchOps:
    """torch's functions the ops call (the kit's TorchOps). Each is taken from the module by
    name, since torch builds its __all__ at run time and so exports none of them to mypy."""

    matmul = staticmethod(torch.matmul)
    stack = staticmethod(torch.stack)
    cat = staticmethod(torch.cat)
    sigmoid = staticmethod(torch.sigmoid)
    tanh = staticmethod(torch.tanh)
    no_grad = torch.no_grad
    native_batch_norm = staticmethod(torch.native_batch_norm)

    @property
    def optim(self) -> TorchOptim[Tensor]:
        """torch.optim, checked here against what the optimizers' torch_optimizer call."""
        return torch.optim

    @staticmethod
    def lstm(
        input: Tensor,
        hx: tuple[Tensor, Tensor],
        params: list[Tensor],
        has_biases: bool,
        num_layers: int,
        dropout: float,
        train: bool,
        bidirectional: bool,
        batch_first: bool,
        /,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """The overload of torch.lstm on a padded batch (not a packed sequence)."""
        return torch.lstm(
            input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first
        )

    @staticmethod
    def gru(
        input: Tensor,
        hx: Tensor,
        params: list[Tensor],
        has_biases: bool,
        num_layers: int,
        dropout: float,
        train: bool,
        bidirectional: bool,
        batch_first: bool,
        /,
    ) -> tuple[Tensor, Tensor]:
        """The overload of torch.gru on a padded batch (not a packed sequence)."""
        return torch.gru(
            input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first
        )


class _TorchKit:
    """What an op's torch_forward gets: the framework and the layout moves. The modules are
    returned as the kit's Protocols, so mypy checks torch's own signatures against what the
    ops call."""

    @property
    def torch(self) -> TorchOps[Tensor]:
        return _OPS

    @property
    def F(self) -> TorchFunctional[Tensor]:
        return F

    def channels_first(self, x: Tensor, /) -> Tensor:
        """(N, ..., C) -> (N, C, ...): a view; convolutions take it as channels_last memory."""
        return x.movedim(-1, 1)

    def channels_last(self, x: Tensor, /) -> Tensor:
        return x.movedim(1, -1)

    def conv_kernel(self, kernel: Tensor, /) -> Tensor:
        """Keras' [k.., in, out] -> [out, in, k..]. A 2-D kernel is copied once, into
        channels_last memory and, under autocast, autocast's dtype: otherwise autocast casts
        the permuted view and the convolution then copies that into the layout it reads (the
        layout of its channels_last input), two copies, and a step slower by a few percent
        of the convolution. The same values either way."""
        if kernel.ndim != 4:
            return kernel.permute(2, 1, 0)
        weight = kernel.permute(3, 2, 0, 1)
        device = weight.device.type
        autocast = torch.is_autocast_enabled(device) and weight.dtype == torch.float32
        dtype = torch.get_autocast_dtype(device) if autocast else weight.dtype
        return weight.to(dtype=dtype, memory_format=torch.channels_last)


_OPS = _TorchOps()
KIT: TorchKit[Tensor] = _TorchKit()


class OpModule(nn.Module):
    """One node: its variables (parameters, or buffers for moving statistics) and its op."""

    def __init__(self, node: BuiltNode) -> None:
        super().__init__()
        self.op = node.op
        self.names: list[str] = []
        for variable in node.variables():
            tensor = torch.zeros(variable.shape)
            if variable.trainable:
                self.register_parameter(variable.name, nn.Parameter(tensor))
            else:
                self.register_buffer(variable.name, tensor)
            self.names.append(variable.name)

    def forward(self, *xs: torch.Tensor) -> Any:
        weights = [getattr(self, name) for name in self.names]
        # A frozen node (its variables are buffers) computes as at inference, as Keras runs
        # a layer that is not trainable: batch norm keeps its moving statistics.
        training = self.training and self.op.trainable
        return self.op.torch_forward(KIT, weights, list(xs), training)


class GraphModule(nn.Module):
    """The whole graph, head included; takes samples as the data holds them."""

    def __init__(self, graph: BuiltGraph) -> None:
        super().__init__()
        self.input_shape = graph.input.shape
        self.wiring = [(node.name, node.inputs) for node in graph.nodes]
        self.nodes = nn.ModuleDict({node.name: OpModule(node) for node in graph.nodes})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        values = {INPUT: x.reshape(x.shape[0], *self.input_shape)}
        for name, inputs in self.wiring:
            values[name] = self.nodes[name](*(values[i] for i in inputs))
        return values[self.wiring[-1][0]]

    def variables(self) -> list[torch.Tensor]:
        """Every variable in the graph's order (worker.training.init's and model.onnx's)."""
        out = []
        for name, _ in self.wiring:
            module = cast(OpModule, self.nodes[name])
            out += [getattr(module, v) for v in module.names]
        return out


def parameter_groups(
    tensors: list[torch.Tensor], described: list[Variable]
) -> list[tuple[float, list[torch.Tensor]]]:
    """The trainable tensors (the graph's variables, as `described`) by lr_multiplier, each
    group in the graph's order: multiplier 1 first and alone when no node sets one, so the
    optimizer's state lays out as it always has."""
    groups: dict[float, list[torch.Tensor]] = {1.0: []}
    for tensor, variable in zip(tensors, described, strict=True):
        if variable.trainable:
            groups.setdefault(variable.lr_multiplier, []).append(tensor)
    return list(groups.items())
