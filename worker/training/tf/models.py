"""Keras 3 builders for the spec's models: the same layers as the PyTorch back-end."""

from __future__ import annotations

import keras

from app.schemas.job_spec import CNNSpec, MLPSpec


def _dense_stack(
    units: list[int], activation: str, dropout: float, batch_norm: bool
) -> list[keras.Layer]:
    layers: list[keras.Layer] = []
    for width in units:
        layers.append(keras.layers.Dense(width))
        if batch_norm:
            layers.append(keras.layers.BatchNormalization())
        layers.append(keras.layers.Activation(activation))
        if dropout:
            layers.append(keras.layers.Dropout(dropout))
    return layers


def build_model(
    spec: MLPSpec | CNNSpec, input_shape: tuple[int, ...], outputs: int
) -> keras.Sequential:
    """Logits out (no softmax): the loss is computed from logits in both back-ends."""
    if isinstance(spec, MLPSpec):
        body = _dense_stack(spec.hidden_units, spec.activation, spec.dropout, spec.batch_norm)
        return keras.Sequential(
            [
                keras.Input(shape=input_shape),
                keras.layers.Flatten(),
                *body,
                keras.layers.Dense(outputs),
            ]
        )
    shape = input_shape if len(input_shape) == 3 else (*input_shape, 1)
    layers: list[keras.Layer] = [keras.Input(shape=shape)]
    for channels in spec.conv_channels:
        layers += [
            keras.layers.Conv2D(channels, spec.kernel_size, padding="same"),
            keras.layers.Activation(spec.activation),
        ]
        if spec.pool == "max":
            layers.append(keras.layers.MaxPooling2D(2))
        elif spec.pool == "avg":
            layers.append(keras.layers.AveragePooling2D(2))
    dense = _dense_stack(spec.dense_units, spec.activation, spec.dropout, batch_norm=False)
    return keras.Sequential([*layers, keras.layers.Flatten(), *dense, keras.layers.Dense(outputs)])
