"""The two seed loops epochal started from, re-implemented faithfully as baselines.

Each function trains on the Fashion-MNIST training set exactly as its seed does and returns
per-epoch training seconds plus the test accuracy reached, so speed is never bought with
accuracy. torchvision is not installed here: ToTensor + Normalize are re-implemented as the
per-sample work a torchvision Dataset does in __getitem__ (minus the PIL round trip, which only
makes the seed faster, i.e. the ratio against it conservative).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from benchmarks.training.common import EpochTimes, fashion_arrays


def pytorch_seed(epochs: int) -> EpochTimes:
    """The PyTorch seed: DataLoader(batch 64, shuffle) over per-sample transforms, 784-128-10."""
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, Dataset

    (x_train, y_train), (x_test, y_test) = fashion_arrays()

    class FashionMNIST(Dataset[tuple[torch.Tensor, int]]):
        def __init__(self, images: np.ndarray, labels: np.ndarray) -> None:
            self.data, self.targets = torch.from_numpy(images), torch.from_numpy(labels)

        def __len__(self) -> int:
            return len(self.data)

        def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
            img, target = self.data[index], int(self.targets[index])
            img = img.unsqueeze(0).contiguous().to(torch.float32).div(255)  # ToTensor
            return img.sub_(0.5).div_(0.5), target  # Normalize((0.5,), (0.5,))

    class SimpleNN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(28 * 28, 128), nn.Linear(128, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = x.view(-1, 28 * 28)
            return self.fc2(torch.relu(self.fc1(x)))

    torch.manual_seed(0)
    loader = DataLoader(dataset=FashionMNIST(x_train, y_train), batch_size=64, shuffle=True)
    model, criterion = SimpleNN(), nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.001)
    seconds = []
    for _epoch in range(epochs):
        started = time.perf_counter()
        for i, (images, labels) in enumerate(loader):
            outputs = model(images)
            loss = criterion(outputs, labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if (i + 1) % 100 == 0:
                loss.item()  # the seed prints the loss every 100 batches: a host sync
        seconds.append(time.perf_counter() - started)
    with torch.no_grad():
        x = (torch.from_numpy(x_test).float() / 255 - 0.5) / 0.5
        accuracy = (model(x).argmax(1) == torch.from_numpy(y_test)).float().mean().item()
    return EpochTimes(seconds, len(x_train), accuracy)


def _tensorflow_seed_model() -> Any:
    """build_dnn_with_regularization: Flatten, 128 relu, 64 relu (both L2 0.001), 10 softmax."""
    import tensorflow as tf
    from tensorflow.keras import layers, models  # type: ignore[import-untyped]

    tf.keras.utils.set_random_seed(0)
    l2_reg = tf.keras.regularizers.l2(0.001)
    return models.Sequential(
        [
            tf.keras.Input(shape=(28, 28, 1)),  # the seed's Flatten(input_shape=...), Keras 3
            layers.Flatten(),
            layers.Dense(128, activation="relu", kernel_regularizer=l2_reg),
            layers.Dense(64, activation="relu", kernel_regularizer=l2_reg),
            layers.Dense(10, activation="softmax"),
        ]
    )


def tensorflow_seed(epochs: int) -> EpochTimes:
    """The TensorFlow seed: batch(32).shuffle(10000), 128-64-10 with L2, tf.function step."""
    import tensorflow as tf

    (x_train, y_train), (x_test, y_test) = fashion_arrays()
    x_train, x_test = x_train / 255.0, x_test / 255.0  # float64, as the seed's numpy division
    x_train, x_test = x_train[..., tf.newaxis], x_test[..., tf.newaxis]
    train_dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train)).batch(32).shuffle(10000)
    model = _tensorflow_seed_model()
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy()
    optimizer = tf.keras.optimizers.Adam(learning_rate=0.001)

    @tf.function
    def train_step_with_reg(images: Any, labels: Any) -> Any:
        with tf.GradientTape() as tape:
            predictions = model(images, training=True)
            main_loss = loss_fn(labels, predictions)
            reg_loss = tf.add_n(model.losses)
            total_loss = main_loss + reg_loss
        gradients = tape.gradient(total_loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))
        return total_loss

    seconds = []
    for _epoch in range(epochs):
        started = time.perf_counter()
        train_loss = 0.0
        for images, labels in train_dataset:
            train_loss += train_step_with_reg(images, labels)
        float(train_loss) / len(train_dataset)  # the seed prints the mean loss: a host sync
        seconds.append(time.perf_counter() - started)
    return EpochTimes(seconds, len(x_train), _keras_accuracy(model, x_test, y_test))


def keras_fit(epochs: int) -> EpochTimes:
    """A reference, not a seed: the TF seed's model under Keras' own fastest `fit` settings."""
    import keras
    import tensorflow as tf

    (x_train, y_train), (x_test, y_test) = fashion_arrays()
    x_train = (x_train / 255.0).astype("float32")[..., None]
    x_test = (x_test / 255.0).astype("float32")[..., None]
    model = _tensorflow_seed_model()
    model.compile(
        optimizer=tf.keras.optimizers.Adam(learning_rate=0.001),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(),
        steps_per_execution=64,
        jit_compile=True,
    )
    seconds: list[float] = []
    begun: list[float] = []
    timer = keras.callbacks.LambdaCallback(
        on_epoch_begin=lambda *_: begun.append(time.perf_counter()),
        on_epoch_end=lambda *_: seconds.append(time.perf_counter() - begun[-1]),
    )
    model.fit(x_train, y_train, batch_size=32, epochs=epochs, verbose=0, callbacks=[timer])
    return EpochTimes(seconds, len(x_train), _keras_accuracy(model, x_test, y_test))


def _keras_accuracy(model: Any, x_test: np.ndarray, y_test: np.ndarray) -> float:
    predictions = model.predict(x_test, batch_size=1024, verbose=0)
    return float(np.mean(np.argmax(predictions, axis=1) == y_test))
