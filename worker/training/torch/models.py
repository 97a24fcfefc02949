"""nn.Module builders for the spec's models, and their weights in Keras layout."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from app.schemas.job_spec import CNNSpec, MLPSpec

ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh, "gelu": nn.GELU, "sigmoid": nn.Sigmoid}


class ChannelsLastFlatten(nn.Module):
    """Flatten NCHW feature maps in NHWC order, so dense weights match Keras' Flatten."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.permute(0, 2, 3, 1).flatten(1)


def _dense_stack(
    widths: list[int], activation: str, dropout: float, batch_norm: bool
) -> list[nn.Module]:
    layers: list[nn.Module] = []
    for fan_in, fan_out in zip(widths, widths[1:], strict=False):
        layers.append(nn.Linear(fan_in, fan_out))
        if batch_norm:  # Keras' defaults: epsilon 1e-3, momentum 0.99 (torch counts 1 - 0.99)
            layers.append(nn.BatchNorm1d(fan_out, eps=1e-3, momentum=0.01))
        layers.append(ACTIVATIONS[activation]())
        if dropout:
            layers.append(nn.Dropout(dropout))
    return layers


def build_model(
    spec: MLPSpec | CNNSpec, input_shape: tuple[int, ...], outputs: int
) -> nn.Sequential:
    """The same architecture as the TensorFlow back-end builds, layer for layer."""
    if isinstance(spec, MLPSpec):
        widths = [int(np.prod(input_shape)), *spec.hidden_units]
        body = _dense_stack(widths, spec.activation, spec.dropout, spec.batch_norm)
        return nn.Sequential(nn.Flatten(), *body, nn.Linear(widths[-1], outputs))
    channels = input_shape[2] if len(input_shape) > 2 else 1
    height, width = input_shape[:2]
    layers: list[nn.Module] = []
    for out in spec.conv_channels:
        layers += [
            nn.Conv2d(channels, out, spec.kernel_size, padding="same"),
            ACTIVATIONS[spec.activation](),
        ]
        if spec.pool != "none":
            layers.append(nn.MaxPool2d(2) if spec.pool == "max" else nn.AvgPool2d(2))
            height, width = height // 2, width // 2
        channels = out
    widths = [height * width * channels, *spec.dense_units]
    dense = _dense_stack(widths, spec.activation, spec.dropout, batch_norm=False)
    return nn.Sequential(*layers, ChannelsLastFlatten(), *dense, nn.Linear(widths[-1], outputs))


def to_keras_layout(module: nn.Module) -> list[tuple[torch.Tensor, str, str]]:
    """(tensor, role, how) per variable in Keras' order; role as Keras names it, how the
    transpose between the layouts."""
    out: list[tuple[torch.Tensor, str, str]] = []
    for layer in module.modules():
        if isinstance(layer, nn.Linear):
            out += [(layer.weight, "kernel", "linear"), (layer.bias, "bias", "same")]
        elif isinstance(layer, nn.Conv2d):
            out += [(layer.weight, "kernel", "conv"), (layer.bias, "bias", "same")]
        elif isinstance(layer, nn.BatchNorm1d):
            assert layer.running_mean is not None and layer.running_var is not None
            out += [
                (layer.weight, "gamma", "same"),
                (layer.bias, "beta", "same"),
                (layer.running_mean, "moving_mean", "same"),
                (layer.running_var, "moving_variance", "same"),
            ]
    return out


def export_array(tensor: torch.Tensor, how: str) -> np.ndarray:
    value = tensor.detach().float().cpu()
    if how == "linear":
        value = value.T
    elif how == "conv":
        value = value.permute(2, 3, 1, 0)
    return value.contiguous().numpy().copy()


def import_array(array: np.ndarray, how: str) -> torch.Tensor:
    value = torch.from_numpy(np.ascontiguousarray(array))
    if how == "linear":
        value = value.T
    elif how == "conv":
        value = value.permute(3, 2, 0, 1)
    return value.contiguous()
