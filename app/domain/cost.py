"""What a job costs before it runs: peak host memory and disk, from its spec alone (pure).

The estimate follows what the training child really holds at its peak, so an honest spec that
fits passes and one that cannot fit is refused at the door instead of OOM-ing on a worker:
- the data set as loaded, in its source dtype, plus the float32 copy the loop trains on
  (synthetic data is generated in float64, then converted), train and test split together;
  a sharded data set is streamed instead, so only what a process holds of it
  (app.domain.stream_memory: the reader's budget and the normalization's sample);
- weights, gradients and optimizer state (the slots the optimizer's module names: adam and
  adamw keep two moments, rmsprop one (two with momentum), sgd one with momentum),
  all float32;
- activations of one per-replica batch, forward and backward: what each op keeps for the
  backward pass (Op.kept: its output, a recurrence's per-step states, a transformer's
  feed-forward and, in TensorFlow, its attention scores) and then its gradient;
- a fixed allowance for the framework runtime itself;
- times the replica count where each replica is its own process (PyTorch DDP); TensorFlow's
  mirrored strategy shares one process and one copy of the data.
Disk: the two checkpoints kept (weights and optimizer state), the model file and model.onnx.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from app.schemas.augment import augmented_shape
from app.schemas.dataset_spec import BUILTIN_SHAPES, model_input
from app.schemas.graph import BuiltGraph
from app.schemas.job_spec import JobSpec
from app.schemas.spec_graph import built_model

FLOAT32 = 4
RUNTIME_BYTES = 512 * 2**20  # the framework's own libraries and allocator, per process
CHECKPOINTS_KEPT = 2
# (train samples, test samples, bytes per stored value) of the built-in data sets as loaded.
BUILTIN_SIZES: dict[str, tuple[int, int, int]] = {
    "fashion_mnist": (60_000, 10_000, 1),
    "mnist": (60_000, 10_000, 1),
    "digits": (1_797, 0, 8),
}
SYNTHETIC_SAMPLES, SYNTHETIC_FEATURES, SYNTHETIC_TEST_FRACTION = 10_000, 32, 5


@dataclass(frozen=True)
class DataShape:
    """The data a job loads: samples in both splits, one sample's shape, its stored dtype size."""

    samples: int
    test_samples: int
    sample_shape: tuple[int, ...]
    itemsize: int
    outputs: int
    vocab: int | None = None  # token data: max id + 1 (app.domain.uploads); None for values
    held_bytes: int | None = None  # streamed (shards): what a process holds of it at most


@dataclass(frozen=True)
class Cost:
    """A job's estimated peak host memory and disk, with the parts that make them up."""

    data_bytes: int
    model_bytes: int
    activation_bytes: int
    processes: int
    disk_bytes: int
    parameters: int  # trainable, as the job's model_summary counts them

    @property
    def memory_bytes(self) -> int:
        per_process = self.data_bytes + self.model_bytes + self.activation_bytes
        return per_process * self.processes + RUNTIME_BYTES * self.processes

    def largest_part(self) -> str:
        """data, model or activations: what to change first to make the job fit."""
        parts = {
            "data": self.data_bytes,
            "model": self.model_bytes,
            "activations": self.activation_bytes,
        }
        return max(parts, key=lambda k: parts[k])


def builtin_data(spec: JobSpec) -> DataShape | None:
    """The data of a built-in or synthetic data set, or None for an upload."""
    ds = spec.dataset
    if ds.name == "synthetic":
        samples = ds.samples or SYNTHETIC_SAMPLES
        outputs = 1 if spec.task == "regression" else (ds.classes or 10)
        features = ds.features or SYNTHETIC_FEATURES
        test = samples // SYNTHETIC_TEST_FRACTION
        return DataShape(samples, test, (features,), 8, outputs)  # generated in float64
    if ds.name in BUILTIN_SIZES:
        train, test, itemsize = BUILTIN_SIZES[ds.name]
        shape, classes = BUILTIN_SHAPES[ds.name]
        return DataShape(train, test, shape, itemsize, classes)
    return None


def graph_of(spec: JobSpec, data: DataShape) -> BuiltGraph:
    """The job's model built for its data (head included): what the estimate costs and what
    the job resource summarizes (GraphError when it does not fit). The model reads samples
    after dataset.augment's steps (a resize or a crop changes their shape)."""
    shape = augmented_shape(spec.dataset.augment, data.sample_shape)
    x = model_input(spec, shape, data.vocab is not None, data.vocab)
    return built_model(spec, x, data.outputs)


def estimate(spec: JobSpec, data: DataShape, graph: BuiltGraph | None = None) -> Cost:
    """Peak host memory and disk of the job `spec` over `data` (`graph`: its model, built)."""
    values = (data.samples + data.test_samples) * math.prod(data.sample_shape)
    labels = (data.samples + data.test_samples) * 8  # int64 classes or float targets
    data_bytes = values * (data.itemsize + FLOAT32) + labels  # token ids: an int32 copy
    if data.held_bytes is not None:
        data_bytes = data.held_bytes
    graph = graph or graph_of(spec, data)
    params = graph.parameters
    held = params + graph.frozen_parameters  # frozen weights are held and saved, not trained
    state = params * len(spec.optimizer.slots()) * FLOAT32  # float32 tensors per parameter
    model_bytes = (held + params) * FLOAT32 + state  # weights and gradients, then the state
    replicas = spec.resources.replica_count
    batch = spec.training.batch_size // replicas
    # what every node keeps for the backward pass (Op.kept), and its gradient
    activation_bytes = 2 * batch * graph.kept_per_sample(spec.framework) * FLOAT32
    ddp = spec.framework == "pytorch" and replicas > 1
    if not ddp:  # one process holds every replica's model and batch
        model_bytes, activation_bytes = model_bytes * replicas, activation_bytes * replicas
    checkpoint = held * FLOAT32 + state
    # + the model, model.onnx and weights.npz (worker.training.warm_start)
    disk = CHECKPOINTS_KEPT * checkpoint + 3 * held * FLOAT32
    processes = replicas if ddp else 1
    return Cost(data_bytes, model_bytes, activation_bytes, processes, disk, params)


def memory_fields(spec: JobSpec, cost: Cost) -> list[str]:
    """The spec fields that drive the memory estimate, most decisive first."""
    ds = spec.dataset
    data_fields = (
        ["dataset.samples", "dataset.features"]
        if ds.name == "synthetic"
        else ["dataset.id" if ds.id else "dataset.name"]
    )
    by_part = {
        "data": data_fields,
        "model": ["model"],
        "activations": ["training.batch_size"],
    }
    fields = by_part[cost.largest_part()]
    if spec.resources.replica_count > 1:
        fields.append("resources.replicas")
    return fields


def host_memory_bytes() -> int | None:
    """Memory this process may use: the cgroup limit where one is set, else physical RAM."""
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return None
    limits = [physical]
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            limits.append(int(text))
    return min(limits)


def gigabytes(n: int) -> str:
    """Bytes as people read them in an error message."""
    return f"{n / 1e9:.1f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


def itemsize_of(dtype: str) -> int:
    """Bytes per value of a numpy dtype name as stored on a data set row ("uint8", "float64")."""
    bits = "".join(ch for ch in dtype if ch.isdigit())
    return max(1, int(bits) // 8) if bits else 1
