"""The example graphs written by hand as plain nn.Modules, the way a PyTorch user would:
torch.nn layers in PyTorch's own layouts, the CNN in channels_last memory.

Each takes a batch of Fashion-MNIST images (N, 28, 28) and returns the 10 class logits, as
the service's graph model (head included) does; batch norm uses the graph's epsilon and
momentum. They are what benchmarks.training.hand_written measures the graph model against.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from app.schemas.graph.ops.batch_norm import EPSILON, MOMENTUM

CLASSES = 10


def batch_norm(channels: int) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(channels, eps=EPSILON, momentum=1 - MOMENTUM)


def conv(channels_in: int, channels_out: int, kernel: int = 3) -> nn.Conv2d:
    return nn.Conv2d(channels_in, channels_out, kernel, padding=kernel // 2)


class ResidualCNN(nn.Module):
    """examples/residual-fashion-mnist.yaml: stem, two residual stages, global average pool."""

    def __init__(self) -> None:
        super().__init__()
        self.stem, self.bn0 = conv(1, 32), batch_norm(32)
        self.s1c1, self.s1bn1 = conv(32, 32), batch_norm(32)
        self.s1c2, self.s1bn2 = conv(32, 32), batch_norm(32)
        self.s2c1, self.s2bn1 = conv(32, 64), batch_norm(64)
        self.s2c2, self.s2bn2 = conv(64, 64), batch_norm(64)
        self.s2proj = conv(32, 64, kernel=1)
        self.drop = nn.Dropout(0.2)
        self.head = nn.Linear(64, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.reshape(x.shape[0], 1, 28, 28).contiguous(memory_format=torch.channels_last)
        x = F.max_pool2d(F.relu(self.bn0(self.stem(x))), 2)
        y = F.relu(self.s1bn1(self.s1c1(x)))
        x = F.max_pool2d(F.relu(self.s1bn2(self.s1c2(y)) + x), 2)
        y = F.relu(self.s2bn1(self.s2c1(x)))
        x = F.relu(self.s2bn2(self.s2c2(y)) + self.s2proj(x))
        return self.head(self.drop(x.mean(dim=(2, 3))))


class MLP(nn.Module):
    """examples/graph-mlp-fashion.yaml: flatten, dense 128, relu."""

    def __init__(self) -> None:
        super().__init__()
        self.dense0 = nn.Linear(28 * 28, 128)
        self.head = nn.Linear(128, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(F.relu(self.dense0(x.flatten(1))))


class RowLSTM(nn.Module):
    """examples/lstm-rows-fashion-mnist.yaml: 28 rows of 28 pixels, an LSTM of 128 units (its
    last output), dense 64, relu. nn.LSTM keeps two bias vectors where the graph (as Keras)
    keeps one: 512 more parameters, the same computation."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(28, 128, batch_first=True)
        self.fc = nn.Linear(128, 64)
        self.head = nn.Linear(64, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(x.reshape(x.shape[0], 28, 28))
        return self.head(F.relu(self.fc(out[:, -1])))


class RowGRU(nn.Module):
    """The row-LSTM's graph with a GRU of 128 units in the LSTM's place. nn.GRU's two bias
    vectors are the graph's (Keras' reset_after GRU keeps both too)."""

    def __init__(self) -> None:
        super().__init__()
        self.gru = nn.GRU(28, 128, batch_first=True)
        self.fc = nn.Linear(128, 64)
        self.head = nn.Linear(64, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.gru(x.reshape(x.shape[0], 28, 28))
        return self.head(F.relu(self.fc(out[:, -1])))


def hand_network(name: str) -> nn.Module:
    """The hand-written network of benchmarks.training.hand_written's NETWORKS."""
    networks = {"resnet": ResidualCNN, "mlp": MLP, "row_lstm": RowLSTM, "row_gru": RowGRU}
    model = networks[name]()
    if name == "resnet":  # the stubs know no memory_format for Module.to; PyTorch takes it
        model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    return model
