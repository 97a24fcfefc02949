"""THE job spec (v1): the one contract between the API, the database and the worker.

Pure Pydantic and the standard library, so the worker and the training child can import it
without the web layer. Every number is bounded, unknown fields are rejected, and a field the
engine cannot honour is rejected here with a message that says so, never silently ignored.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import (
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from app.schemas.augment import (
    IN_MEMORY,
    AugmentStep,
    augmented_shape,
    image_shape,
)
from app.schemas.graph import (
    BuiltGraph,
    CNNSpec,
    GraphError,
    GraphSpec,
    MLPSpec,
    TensorType,
    build,
)
from app.schemas.monitor import Mode
from app.schemas.optimizers import DEFAULT as DEFAULT_OPTIMIZER
from app.schemas.optimizers import OPTIMIZERS, OptimizerSpec
from app.schemas.priority import PRIORITY_DEFAULT, PRIORITY_MAX, PRIORITY_MIN
from app.schemas.schedules import LRSchedulerSpec
from app.schemas.strict import StrictModel
from app.schemas.warm_start import ContinuesField, InitSpec

Framework = Literal["pytorch", "tensorflow"]
FRAMEWORKS: tuple[str, ...] = get_args(Framework)  # the back-ends, for code outside the spec
Task = Literal["classification", "regression"]
BuiltinDataset = Literal["fashion_mnist", "mnist", "digits", "synthetic"]

# (input shape, classes) of the built-in data sets; synthetic is sized by its own fields.
BUILTIN_SHAPES: dict[str, tuple[tuple[int, ...], int]] = {
    "fashion_mnist": ((28, 28), 10),
    "mnist": ((28, 28), 10),
    "digits": ((8, 8), 10),
}
# The names of the built-in data sets' classes, by index (the others' classes are their digits).
CLASS_NAMES: dict[str, tuple[str, ...]] = {
    "fashion_mnist": (
        "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
        "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
    ),
}  # fmt: skip
MAX_PARAMETERS = 50_000_000
MAX_FLOPS_PER_SAMPLE = 200_000_000_000
MAX_NODES = 16  # workers one job may span (a gang)


class DatasetSpec(StrictModel):
    """Which data, how it is split and normalized."""

    name: BuiltinDataset | None = Field(None, description="A built-in data set; or give `id`.")
    id: str | None = Field(
        None,
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9-]+$",
        description="An uploaded data set (POST /v1/datasets).",
    )
    version: str | None = Field(
        None,
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9]+$",
        description="With `id`: the data set's version (its content hash) the job must train "
        "on; a job naming another is refused.",
    )
    validation_split: float = Field(0.1, ge=0.0, le=0.5, description="Fraction held out, by seed.")
    normalize: Literal["unit", "standard", "none"] = Field(
        "unit", description="unit: /255 (or /16 for digits); standard: train mean/std; none."
    )
    limit: int | None = Field(None, ge=10, le=10_000_000, description="Use the first N samples.")
    stream_ram_mb: int | None = Field(
        None,
        ge=16,
        le=1_048_576,
        description="a sharded data set: at most this much reader memory (MiB) below the "
        "worker's EPOCHAL_STREAM_RAM_BYTES",
    )
    samples: int | None = Field(None, ge=10, le=2_000_000, description="synthetic only")
    features: int | None = Field(None, ge=1, le=4096, description="synthetic only")
    classes: int | None = Field(None, ge=2, le=1000, description="synthetic only")
    augment: list[AugmentStep] = Field(
        default_factory=list,
        max_length=16,
        description="Image augmentation steps, in order, on each training batch (by `op`).",
    )

    @model_validator(mode="after")
    def _one_source(self) -> DatasetSpec:
        if (self.name is None) == (self.id is None):
            raise ValueError("give exactly one of dataset.name (built-in) or dataset.id (upload)")
        if self.version is not None and self.id is None:
            raise ValueError("dataset.version applies to a data set named by dataset.id")
        synthetic_fields = [f for f in ("samples", "features", "classes") if getattr(self, f)]
        if synthetic_fields and self.name != "synthetic":
            raise ValueError(f"{', '.join(synthetic_fields)} only apply to the synthetic data set")
        if self.augment and self.name == "synthetic":
            image_shape((self.features or 32,))  # refused: rows of features are no images
        if self.augment and self.name in BUILTIN_SHAPES:
            shape = BUILTIN_SHAPES[self.name][0]
            augmented_shape(self.augment, shape)  # the sizes first: the most precise error
            raise ValueError(IN_MEMORY.format(what=self.name))
        return self


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


class TrainingSpec(StrictModel):
    """How long and in what batches; batch_size is the global batch over all replicas."""

    epochs: int = Field(10, ge=1, le=1000, description="passes over the training split")
    batch_size: int = Field(32, ge=1, le=65536, description="the global batch, over all replicas")
    seed: int = Field(
        42,
        ge=0,
        le=2**31 - 1,
        description="weights, validation split, sample order and dropout all follow it",
    )
    shuffle: bool = Field(True, description="Reshuffle the samples (not batches) every epoch.")


class RegularizationSpec(StrictModel):
    """An explicit loss term l2 * sum(w**2) over kernel weights (not biases), both frameworks."""

    l2: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        allow_inf_nan=False,
        description="weight of l2 * sum(w**2) over kernels, added to the loss",
    )


class EarlyStoppingSpec(StrictModel):
    """Keras' EarlyStopping: stop after `patience` epochs without a min_delta improvement."""

    monitor: str = Field(
        "val_loss", max_length=32, description="the metric watched, e.g. val_loss or val_accuracy"
    )
    mode: Mode = Field("auto", description="min, max, or auto (max for accuracy-like names)")
    patience: int = Field(
        2, ge=0, le=1000, description="epochs without improvement before stopping"
    )
    min_delta: float = Field(
        0.0, ge=0.0, le=1e6, description="smallest change that counts as improvement"
    )
    restore_best_weights: bool = Field(False, description="end with the best epoch's weights")
    baseline: float | None = Field(
        None, allow_inf_nan=False, description="the wait only resets once the monitor beats this"
    )
    start_from_epoch: int = Field(0, ge=0, le=1000, description="epochs of warm-up not watched")


class ResourcesSpec(StrictModel):
    """Devices: gpus the worker must own, replicas (data parallel), strategy, precision and
    CPU threads."""

    gpus: int = Field(0, ge=0, le=64, description="GPUs the worker must own; 0 trains on CPU")
    replicas: int | None = Field(None, ge=1, le=64, description="default max(gpus, 1)")
    nodes: int = Field(
        1,
        ge=1,
        le=MAX_NODES,
        description="workers the job runs on at once (a gang), each with gpus and replicas; "
        "> 1: on CPU only, for now (TensorFlow: one replica per node)",
    )
    strategy: Literal["auto", "single", "mirrored", "ddp"] = Field(
        "auto", description="auto: mirrored (TensorFlow) or ddp (PyTorch) when replicas > 1"
    )
    precision: Literal["fp32", "bf16", "fp16"] = Field(
        "fp32", description="mixed precision; fp16 needs a GPU"
    )
    cpu_threads: int | None = Field(
        None,
        ge=1,
        le=1024,
        description="CPU threads to train on, split among DDP ranks; default and ceiling: "
        "the worker's EPOCHAL_WORKER_CPUS",
    )

    @property
    def replica_count(self) -> int:
        """Replicas on each node."""
        return self.replicas or max(self.gpus, 1)

    @property
    def world_size(self) -> int:
        """Replicas over all nodes: the global batch is split over these."""
        return self.nodes * self.replica_count


SPEC_EXAMPLE: dict[str, Any] = {
    "name": "fashion-dnn-l2",
    "framework": "tensorflow",
    "task": "classification",
    "dataset": {"name": "fashion_mnist", "validation_split": 0.1},
    "model": {"type": "mlp", "hidden_units": [128, 64], "activation": "relu"},
    "training": {"epochs": 10, "batch_size": 32, "seed": 42},
    "optimizer": {"name": "adam", "learning_rate": 0.001},
    "regularization": {"l2": 0.001},
    "early_stopping": {"monitor": "val_loss", "patience": 2, "restore_best_weights": True},
    "tags": {"team": "vision"},
}


class JobSpec(StrictModel):
    """A training job: data, model and recipe; the same meaning in both frameworks."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, strict=True, json_schema_extra={"examples": [SPEC_EXAMPLE]}
    )

    name: str = Field(
        "job",
        min_length=1,
        max_length=128,
        pattern=r"^[\w.\- ]+$",
        description="a label for people",
    )
    framework: Framework = Field(description="which back-end trains the model")
    task: Task = Field(
        "classification",
        description="classification: cross-entropy, accuracy; regression: MSE, MAE",
    )
    dataset: DatasetSpec = Field(description="the data, its split and normalization")
    model: ModelSpec = Field(
        default_factory=MLPSpec,
        description="graph (named layers), or the mlp or cnn template; type defaults to mlp",
    )
    training: TrainingSpec = Field(
        default_factory=TrainingSpec, description="epochs, batch, seed, shuffling"
    )
    optimizer: OptimizerSpec = Field(
        default_factory=OPTIMIZERS[DEFAULT_OPTIMIZER],
        description=f"optimizer and base learning rate; name defaults to {DEFAULT_OPTIMIZER}",
    )
    regularization: RegularizationSpec = Field(
        default_factory=RegularizationSpec, description="an explicit L2 loss term"
    )
    lr_scheduler: LRSchedulerSpec | None = Field(
        None, description="how the rate changes from epoch to epoch"
    )
    early_stopping: EarlyStoppingSpec | None = Field(
        None, description="Keras' EarlyStopping rule; null trains all epochs"
    )
    init: InitSpec | None = Field(
        None, description="start from a succeeded job's weights (warm start); null: fresh"
    )
    continues: str | None = ContinuesField
    resources: ResourcesSpec = Field(
        default_factory=ResourcesSpec, description="devices and replicas"
    )
    checkpoint_every_epochs: int = Field(
        1, ge=1, le=1000, description="a restarted attempt resumes from the last checkpoint"
    )
    checkpoint_every_steps: int | None = Field(
        None,
        ge=1,
        le=10_000_000,
        description="a sharded data set: also checkpoint every N optimizer steps, mid-epoch; "
        "a resumed attempt continues at the next sample",
    )
    max_runtime_seconds: int = Field(
        86_400,
        ge=1,
        le=30 * 86_400,
        description="from the first start, over all attempts: then stop (timeout)",
    )
    max_queue_seconds: int | None = Field(
        None, ge=1, le=30 * 86_400, description="fail (queue_timeout) if not started within this"
    )
    max_restarts: int = Field(
        2, ge=0, le=10, description="new attempts after a lost worker or infrastructure error"
    )
    priority: int = Field(
        PRIORITY_DEFAULT,
        ge=PRIORITY_MIN,
        le=PRIORITY_MAX,
        description="a free worker runs the highest-priority queued job first (a key may be "
        "capped)",
    )
    preemptible: bool = Field(
        True,
        description="may a higher-priority job stop it at an epoch and re-queue it (false: "
        "admin keys only)",
    )
    tags: dict[
        Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[\w.\-/]+$")],
        Annotated[str, Field(max_length=256)],
    ] = Field(default_factory=dict, max_length=32, description="free-form labels")
    _builds: Builds = PrivateAttr(default_factory=lambda: Builds())

    @field_validator("tags")
    @classmethod
    def _tags_are_plain(cls, tags: dict[str, str]) -> dict[str, str]:
        return dict(sorted(tags.items()))

    @model_validator(mode="after")
    def _consistent(self) -> JobSpec:
        _check_task_and_data(self)
        _check_monitors(self)
        _check_resources(self)
        _check_model_fits(self)
        return self


def _check_task_and_data(spec: JobSpec) -> None:
    ds = spec.dataset
    if spec.task == "regression" and ds.name not in (None, "synthetic"):
        raise ValueError(f"task regression needs a synthetic or uploaded data set, not {ds.name}")
    if spec.task == "regression" and ds.classes:
        raise ValueError("dataset.classes does not apply to task regression")
    if spec.checkpoint_every_steps is not None and ds.name is not None:
        raise ValueError(
            "checkpoint_every_steps applies to sharded data sets (dataset.id); a built-in data "
            "set checkpoints at epoch ends (checkpoint_every_epochs)"
        )


def class_labels(spec: JobSpec, classes: int) -> list[Any]:
    """Each class's label, by index: its name when the data set names them, else the index."""
    names = CLASS_NAMES.get(spec.dataset.name or "", ())
    return list(names) if len(names) == classes else list(range(classes))


def monitor_names(spec: JobSpec) -> set[str]:
    """The metric names a monitor may watch for this spec."""
    metric = "accuracy" if spec.task == "classification" else "mae"
    train = {"loss", metric}
    if spec.dataset.validation_split > 0:
        return train | {f"val_{m}" for m in train}
    return train


def _check_monitors(spec: JobSpec) -> None:
    allowed = monitor_names(spec)
    watchers = [("early_stopping", spec.early_stopping), ("lr_scheduler", spec.lr_scheduler)]
    for field, watcher in watchers:
        monitor = getattr(watcher, "monitor", None)
        if monitor is not None and monitor not in allowed:
            raise ValueError(
                f"{field}.monitor {monitor!r} is not recorded for this job; "
                f"choose one of {sorted(allowed)}"
            )


def _check_resources(spec: JobSpec) -> None:
    res = spec.resources
    replicas = res.replica_count
    if res.gpus and replicas != res.gpus:
        raise ValueError("with gpus > 0, replicas must equal gpus (one replica per GPU)")
    if res.strategy == "single" and replicas > 1:
        raise ValueError("strategy single runs one replica; set replicas to 1 or pick a strategy")
    if res.strategy == "mirrored" and spec.framework != "tensorflow":
        raise ValueError("strategy mirrored is TensorFlow's; PyTorch uses ddp")
    if res.strategy == "ddp" and spec.framework != "pytorch":
        raise ValueError("strategy ddp is PyTorch's; TensorFlow uses mirrored")
    _check_nodes(spec)
    if spec.training.batch_size % res.world_size:
        raise ValueError(
            f"training.batch_size {spec.training.batch_size} (the global batch) must divide "
            f"by the replica count {res.world_size} (nodes × replicas)"
        )
    if res.precision == "fp16" and res.gpus == 0:
        raise ValueError("precision fp16 needs a GPU; on CPU use fp32 or bf16")


def _check_nodes(spec: JobSpec) -> None:
    """What a gang cannot run yet is refused at the door, not at the workers."""
    res = spec.resources
    if res.nodes == 1:
        return
    if res.gpus:
        raise ValueError(
            "resources.nodes > 1 with gpus > 0 is not supported yet (NCCL across workers is "
            "untested); multi-node jobs train on CPU (gpus 0, gloo)"
        )
    if res.strategy == "single":
        raise ValueError(
            "strategy single runs one replica; a multi-node job uses ddp (PyTorch) or mirrored "
            "(TensorFlow)"
        )
    if spec.framework == "tensorflow" and res.replica_count > 1:
        raise ValueError(
            "resources.replicas > 1 with resources.nodes > 1 is not supported for TensorFlow "
            "(MultiWorkerMirroredStrategy has one CPU replica per worker); use replicas 1 "
            "and more nodes"
        )


def input_shape_and_classes(spec: JobSpec) -> tuple[tuple[int, ...], int] | None:
    """Shape of one sample and the class count, when known without reading the data."""
    ds = spec.dataset
    if ds.name in BUILTIN_SHAPES:
        return BUILTIN_SHAPES[ds.name]
    if ds.name == "synthetic":
        classes = 1 if spec.task == "regression" else (ds.classes or 10)
        return (ds.features or 32,), classes
    return None


def model_input(
    spec: JobSpec, sample_shape: tuple[int, ...], tokens: bool = False, vocab: int | None = None
) -> TensorType:
    """What the model's graph reads: one sample, channels last. The built-in image data sets
    (stored as (H, W)) enter as (H, W, 1); every other data set as it is stored."""
    if spec.dataset.name in BUILTIN_SHAPES and len(sample_shape) == 2:
        sample_shape = (*sample_shape, 1)
    return TensorType(tuple(sample_shape), tokens, vocab)


class Builds:
    """The graphs built for one spec object, by input and output width, each with the model
    it was built from: the validator's build serves the data-set check, admission and the
    stored summary of the same request. Not part of the spec's value: any two compare equal
    (pydantic compares private attributes). Bounded by the inputs one spec is built for."""

    def __init__(self) -> None:
        self.graphs: dict[tuple[TensorType, int], tuple[object, BuiltGraph]] = {}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Builds)


def built_model(spec: JobSpec, x: TensorType, outputs: int) -> BuiltGraph:
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


def _check_model_fits(spec: JobSpec) -> None:
    """A model that does not fit its built-in data is an error at `model` (naming the node)."""
    known = input_shape_and_classes(spec)
    if known is None:
        return
    shape, classes = known
    shape = augmented_shape(spec.dataset.augment, shape)  # what the model is given
    try:
        check_model_for_data(spec, model_input(spec, shape), classes)
    except ValueError as exc:
        message = str(exc).removeprefix("model: ")
        error = PydanticCustomError("value_error", "{message}", {"message": message})
        details = [InitErrorDetails(type=error, loc=("model",), input=None)]
        raise ValidationError.from_exception_data("JobSpec", details) from None


def check_model_for_data(spec: JobSpec, x: TensorType, outputs: int) -> BuiltGraph:
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
