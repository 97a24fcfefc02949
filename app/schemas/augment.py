"""`dataset.augment`: typed image augmentation steps, applied in order to each training batch.

Steps act on images (H, W, C), channels last; a data set of (H, W) samples is one channel. The
random steps (random_crop, flip_horizontal) draw from the job's seed, the epoch and the sample's
id only (worker.training.data.augment), so a resumed run and either framework see the same
pixels. The deterministic steps (resize, center_crop, normalize) are also what evaluation
applies and what model.onnx repeats on the raw rows it is given (`eval_steps`). Each step says
what it makes of an image's shape, so a spec whose sizes do not fit its data is refused at
POST, naming the step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from app.schemas.strict import StrictModel

MAX_SIDE = 4096
MAX_STEPS = 16
MAX_CHANNELS = 4
Side = Annotated[int, Field(ge=1, le=MAX_SIDE)]
Size = Side | Annotated[list[Side], Field(min_length=2, max_length=2)]
Shape = tuple[int, int, int]  # (height, width, channels)


def pair(size: int | list[int]) -> tuple[int, int]:
    """(height, width) of a size: one side for both, or [height, width]."""
    return (size, size) if isinstance(size, int) else (size[0], size[1])


class Step(StrictModel):
    """One augmentation step: its op, whether it draws random numbers, and its output shape."""

    op: str
    random: ClassVar[bool] = False

    def output(self, shape: Shape) -> Shape:
        """The shape this step makes of images of `shape`; ValueError when they do not fit."""
        return shape


def _fits(
    what: str, size: tuple[int, int], h: int, w: int, h0: int, w0: int, padded: str = ""
) -> None:
    """ValueError unless `size` fits inside h x w (images of h0 x w0, as the message says)."""
    if size[0] > h or size[1] > w:
        raise ValueError(f"{what} {size[0]}x{size[1]} does not fit {h0}x{w0} images{padded}")


class RandomCrop(Step):
    """A crop of `size` at a random place, from the image padded with `padding` zeros a side."""

    op: Literal["random_crop"] = "random_crop"
    size: Size = Field(description="the crop: one side, or [height, width]")
    padding: int = Field(0, ge=0, le=MAX_SIDE, description="zeros added on each side first")
    random: ClassVar[bool] = True

    def output(self, shape: Shape) -> Shape:
        h, w, c = shape
        p = self.padding
        padded = f" padded by {p} ({h + 2 * p}x{w + 2 * p})" if p else ""
        _fits("random_crop", pair(self.size), h + 2 * p, w + 2 * p, h, w, padded)
        return (*pair(self.size), c)


class FlipHorizontal(Step):
    """Each image mirrored left to right with probability `p`."""

    op: Literal["flip_horizontal"] = "flip_horizontal"
    p: float = Field(0.5, ge=0.0, le=1.0, description="the probability of a flip")
    random: ClassVar[bool] = True


class Resize(Step):
    """Bilinear resize: one number scales the shorter side to it (the aspect kept, the longer
    side rounded down), [height, width] sets both."""

    op: Literal["resize"] = "resize"
    size: Size = Field(description="the shorter side (aspect kept), or [height, width]")

    def output(self, shape: Shape) -> Shape:
        h, w, c = shape
        if isinstance(self.size, list):
            return (self.size[0], self.size[1], c)
        short, long = min(h, w), max(h, w)
        other = max(1, self.size * long // short)
        if other > MAX_SIDE:
            raise ValueError(f"resizing {h}x{w} images to {self.size} makes a side of {other}")
        return (self.size, other, c) if h <= w else (other, self.size, c)


class CenterCrop(Step):
    """The centre `size` of each image (the extra row or column, if odd, off the bottom/right)."""

    op: Literal["center_crop"] = "center_crop"
    size: Size = Field(description="the crop: one side, or [height, width]")

    def output(self, shape: Shape) -> Shape:
        h, w, c = shape
        _fits("center_crop", pair(self.size), h, w, h, w)
        return (*pair(self.size), c)


class Normalize(Step):
    """(x - mean[c]) / std[c] per channel, in the units the pixels reach it in (0..1 after
    dataset.normalize unit); the output is float32."""

    op: Literal["normalize"] = "normalize"
    mean: list[float] = Field(min_length=1, max_length=MAX_CHANNELS, description="one per channel")
    std: list[Annotated[float, Field(gt=0.0)]] = Field(
        min_length=1, max_length=MAX_CHANNELS, description="one per channel, each > 0"
    )

    @model_validator(mode="after")
    def _one_each(self) -> Normalize:
        if len(self.mean) != len(self.std):
            raise ValueError(f"normalize has {len(self.mean)} means but {len(self.std)} stds")
        return self

    def output(self, shape: Shape) -> Shape:
        if len(self.mean) != shape[2]:
            channels = "1 channel" if shape[2] == 1 else f"{shape[2]} channels"
            raise ValueError(
                f"normalize has {len(self.mean)} means and stds; the images have {channels}"
            )
        return shape


AugmentStep = Annotated[
    RandomCrop | FlipHorizontal | Resize | CenterCrop | Normalize, Field(discriminator="op")
]
STEPS: dict[str, type[Step]] = {
    kind.model_fields["op"].default: kind
    for kind in (RandomCrop, FlipHorizontal, Resize, CenterCrop, Normalize)
}


def image_shape(sample_shape: Sequence[int]) -> Shape:
    """(H, W, C) of samples shaped (H, W) or (H, W, C); ValueError for any other shape."""
    shape = tuple(sample_shape)
    if len(shape) == 2:
        return (shape[0], shape[1], 1)
    if len(shape) == 3 and 1 <= shape[2] <= MAX_CHANNELS:
        return (shape[0], shape[1], shape[2])
    raise ValueError(
        f"dataset.augment needs images: samples of shape (H, W) or (H, W, C) with 1 to "
        f"{MAX_CHANNELS} channels, not {shape}"
    )


def augmented_shape(steps: Sequence[Step], sample_shape: Sequence[int]) -> tuple[int, ...]:
    """The shape of a sample after the steps, as many dimensions as it came with; ValueError
    naming the first step whose sizes do not fit."""
    if not steps:
        return tuple(sample_shape)
    shape = image_shape(sample_shape)
    for at, step in enumerate(steps):
        try:
            shape = step.output(shape)
        except ValueError as exc:
            raise ValueError(f"dataset.augment[{at}] ({step.op}): {exc}") from None
    return shape[:2] if len(sample_shape) == 2 and shape[2] == 1 else shape


def split_steps(steps: Sequence[Step]) -> tuple[list[Step], list[Step]]:
    """(train-only steps, deterministic steps), each in the spec's order."""
    return [s for s in steps if s.random], [s for s in steps if not s.random]


def eval_steps(steps: Sequence[Step], sample_shape: Sequence[int]) -> list[Step]:
    """What evaluation and prediction apply: the deterministic steps, and for a random crop
    that changes the shape a centre crop of its size, so the model sees what it trained on.
    model.onnx carries these as its first nodes after the normalization, and the model card
    lists them (`preprocess`)."""
    if not steps:
        return []
    kept: list[Step] = []
    shape = image_shape(sample_shape)
    for step in steps:
        out = step.output(shape)
        if isinstance(step, RandomCrop):
            if out[:2] != shape[:2]:
                kept.append(CenterCrop(size=list(out[:2])))
        elif not step.random:
            kept.append(step)
        shape = out
    return kept


def augment_problem(
    steps: Sequence[Step], sample_shape: Sequence[int], tokens: bool = False
) -> str | None:
    """Why a data set whose samples are `sample_shape` cannot take the steps, or None: for a
    data set whose shape is known only once it is looked up (an upload, a sharded one)."""
    if not steps:
        return None
    if tokens:
        return "dataset.augment needs images; this data set holds token ids"
    try:
        augmented_shape(steps, sample_shape)
    except ValueError as exc:
        return str(exc)
    return None


IN_MEMORY = (
    "dataset.augment applies to sharded data sets (`epochal datasets add`, or `datasets "
    "upload --resumable`); {what} is held in memory, where training batches are not augmented"
)
