"""The two recipes a job could name before graphs, kept as templates that expand to a graph:
the same layers in the same order as before, so the same seed gives the same weights."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from app.schemas.graph.base import GraphError, TensorType
from app.schemas.graph.model import GraphSpec
from app.schemas.graph.ops.activation import Activation
from app.schemas.graph.ops.batch_norm import momentum_field
from app.schemas.strict import StrictModel


def _dense_stack(units: list[int], activation: str, dropout: float, bn: float | None) -> list[dict]:
    """(dense, [batch_norm], activation, [dropout]) per width; bn is the batch norm's
    momentum, None for none."""
    layers: list[dict[str, Any]] = []
    for i, width in enumerate(units):
        layers.append({"name": f"dense{i}", "op": "dense", "units": width})
        if bn is not None:
            layers.append({"name": f"bn{i}", "op": "batch_norm", "momentum": bn})
        layers.append({"name": f"act{i}", "op": "activation", "fn": activation})
        if dropout:
            layers.append({"name": f"drop{i}", "op": "dropout", "rate": dropout})
    return layers


def _flattened(x: TensorType) -> list[dict[str, Any]]:
    return [{"name": "flatten", "op": "flatten"}] if len(x.shape) > 1 else []


class MLPSpec(StrictModel):
    """A multilayer perceptron; image inputs are flattened first."""

    type: Literal["mlp"] = "mlp"
    hidden_units: list[Annotated[int, Field(ge=1, le=8192)]] = Field(
        default_factory=lambda: [128],
        max_length=16,
        description="widths of the hidden Dense layers, in order",
    )
    activation: Activation = Field("relu", description="after each hidden layer")
    dropout: float = Field(0.0, ge=0.0, le=0.9, description="dropout rate after each hidden layer")
    batch_norm: bool = Field(False, description="batch normalization after each hidden Dense layer")
    batch_norm_momentum: float = momentum_field("with batch_norm: ")

    def graph(self, x: TensorType) -> GraphSpec:
        """flatten, then (dense, [batch_norm], activation, [dropout]) per hidden layer."""
        bn = self.batch_norm_momentum if self.batch_norm else None
        body = _dense_stack(self.hidden_units, self.activation, self.dropout, bn)
        layers = _flattened(x) + body
        if not layers:  # no hidden layer on flat features: the head alone
            layers = [{"name": "flatten", "op": "flatten"}]
        return GraphSpec.model_validate({"layers": layers}, strict=False)


class CNNSpec(StrictModel):
    """Conv blocks (conv, activation, pool) then dense layers; for image data sets."""

    type: Literal["cnn"] = "cnn"
    conv_channels: list[Annotated[int, Field(ge=1, le=1024)]] = Field(
        default_factory=lambda: [32, 64],
        min_length=1,
        max_length=6,
        description="one conv block (conv, activation, pool) per entry",
    )
    kernel_size: int = Field(3, ge=1, le=11, description="square kernel, 'same' padding")
    pool: Literal["max", "avg", "none"] = Field(
        "max", description="2x2 pooling after each conv block"
    )
    dense_units: list[Annotated[int, Field(ge=1, le=8192)]] = Field(
        default_factory=lambda: [128],
        max_length=8,
        description="Dense layers after flattening",
    )
    activation: Activation = Field("relu", description="after each conv and Dense layer")
    dropout: float = Field(0.0, ge=0.0, le=0.9, description="dropout rate after each Dense layer")

    def graph(self, x: TensorType) -> GraphSpec:
        """(conv2d 'same', activation, pool) per entry, flatten, then the dense stack."""
        if len(x.shape) not in (2, 3) or x.tokens:
            raise GraphError(f"model cnn needs image samples; this data set has shape {x}")
        blocks = len(self.conv_channels) if self.pool != "none" else 0
        if min(x.shape[:2]) // 2**blocks < 1:
            raise GraphError(
                f"{len(self.conv_channels)} pooled conv blocks shrink {x.shape[0]}x{x.shape[1]} "
                "images to nothing; use fewer conv_channels or pool none"
            )
        layers: list[dict[str, Any]] = []
        if len(x.shape) == 2:  # (H, W) images: one channel
            layers.append({"name": "channels", "op": "reshape", "shape": [*x.shape, 1]})
        for i, channels in enumerate(self.conv_channels):
            layers += [
                {
                    "name": f"conv{i}",
                    "op": "conv2d",
                    "filters": channels,
                    "kernel_size": self.kernel_size,
                },
                {"name": f"conv_act{i}", "op": "activation", "fn": self.activation},
            ]
            if self.pool != "none":
                layers.append({"name": f"pool{i}", "op": f"{self.pool}_pool2d", "size": 2})
        layers.append({"name": "flatten", "op": "flatten"})
        layers += _dense_stack(self.dense_units, self.activation, self.dropout, bn=None)
        return GraphSpec.model_validate({"layers": layers}, strict=False)
