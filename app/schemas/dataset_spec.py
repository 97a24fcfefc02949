"""The job spec's data set: which data, its split, normalization and augmentation, and what
is known of a data set without reading it (its sample shape, classes and their names).

Pure Pydantic and the standard library, like the job spec that holds it.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from pydantic import Field, model_validator

from app.schemas.augment import (
    IN_MEMORY,
    AugmentStep,
    augmented_shape,
    image_shape,
)
from app.schemas.graph import TensorType
from app.schemas.strict import StrictModel

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


class SpecData(Protocol):
    """What the data helpers read of a job spec (a JobSpec is one)."""

    @property
    def task(self) -> str: ...

    @property
    def dataset(self) -> DatasetSpec: ...


def class_labels(spec: SpecData, classes: int) -> list[Any]:
    """Each class's label, by index: its name when the data set names them, else the index."""
    names = CLASS_NAMES.get(spec.dataset.name or "", ())
    return list(names) if len(names) == classes else list(range(classes))


def input_shape_and_classes(spec: SpecData) -> tuple[tuple[int, ...], int] | None:
    """Shape of one sample and the class count, when known without reading the data."""
    ds = spec.dataset
    if ds.name in BUILTIN_SHAPES:
        return BUILTIN_SHAPES[ds.name]
    if ds.name == "synthetic":
        classes = 1 if spec.task == "regression" else (ds.classes or 10)
        return (ds.features or 32,), classes
    return None


def model_input(
    spec: SpecData, sample_shape: tuple[int, ...], tokens: bool = False, vocab: int | None = None
) -> TensorType:
    """What the model's graph reads: one sample, channels last. The built-in image data sets
    (stored as (H, W)) enter as (H, W, 1); every other data set as it is stored."""
    if spec.dataset.name in BUILTIN_SHAPES and len(sample_shape) == 2:
        sample_shape = (*sample_shape, 1)
    return TensorType(tuple(sample_shape), tokens, vocab)
