"""dataset.augment in numpy: each op against a hand-computed case, the shapes and dtypes it
makes, and randomness that depends on (seed, epoch, sample id) alone."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from pydantic import TypeAdapter

from app.schemas.augment import AugmentStep, augmented_shape
from worker.training.data.augment import augment_batch

STEPS = TypeAdapter(list[AugmentStep])


def steps(*given: dict[str, Any]) -> list[Any]:
    return STEPS.validate_python(list(given))


def run(x: np.ndarray, *given: dict[str, Any], ids: Any = None, epoch: int = 0) -> np.ndarray:
    ids = np.arange(len(x)) if ids is None else np.asarray(ids)
    return augment_batch(x, ids, epoch, 7, steps(*given))


def test_center_crop_takes_the_middle() -> None:
    x = np.arange(25, dtype=np.uint8).reshape(1, 5, 5)
    out = run(x, {"op": "center_crop", "size": 2})
    assert out.dtype == np.uint8 and out.tolist() == [[[6, 7], [11, 12]]]
    out = run(x, {"op": "center_crop", "size": [3, 1]})
    assert out.tolist() == [[[7], [12], [17]]]


def test_resize_is_bilinear_at_pixel_centres() -> None:
    x = np.array([[[0, 4], [8, 12]]], dtype=np.uint8)
    up = run(x, {"op": "resize", "size": 4})
    expected = [[0, 1, 3, 4], [2, 3, 5, 6], [6, 7, 9, 10], [8, 9, 11, 12]]
    assert up.dtype == np.float32 and np.allclose(up[0], expected)
    down = run(np.asarray(expected, dtype=np.float32)[None], {"op": "resize", "size": [2, 2]})
    assert np.allclose(down[0], [[1.5, 4.5], [7.5, 10.5]])  # each the mean of a 2x2 block's centre
    wide = run(np.zeros((2, 4, 8, 3)), {"op": "resize", "size": 2})
    assert wide.shape == (2, 2, 4, 3)  # the shorter side to 2, the aspect kept


def test_resize_agrees_with_torch_interpolate() -> None:
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(0).normal(size=(3, 9, 13, 2)).astype(np.float32)
    for size in ([4, 6], [20, 17], [9, 26]):
        ours = run(x, {"op": "resize", "size": size})
        theirs = torch.nn.functional.interpolate(
            torch.from_numpy(x).permute(0, 3, 1, 2), size=size, mode="bilinear",
            align_corners=False, antialias=False,
        ).permute(0, 2, 3, 1).numpy()  # fmt: skip
        assert np.allclose(ours, theirs, atol=1e-5), size


def test_normalize_per_channel() -> None:
    x = np.array([[[[3, 6], [1, 2]]]], dtype=np.uint8)  # one image, 1 x 2 pixels, 2 channels
    out = run(x, {"op": "normalize", "mean": [1, 2], "std": [2, 4]})
    assert out.dtype == np.float32 and out.tolist() == [[[[1, 1], [0, 0]]]]


def test_random_crop_pads_with_zeros_and_covers_every_place() -> None:
    x = np.array([[[1, 2], [3, 4]]], dtype=np.uint8)
    whole = run(x, {"op": "random_crop", "size": 4, "padding": 1})
    assert whole.tolist() == [[[0, 0, 0, 0], [0, 1, 2, 0], [0, 3, 4, 0], [0, 0, 0, 0]]]
    many = np.repeat(x, 900, axis=0)
    out = run(many, {"op": "random_crop", "size": 2, "padding": 1})
    padded = whole[0]
    windows = {(t, left): padded[t : t + 2, left : left + 2] for t in range(3) for left in range(3)}
    seen = [next(k for k, w in windows.items() if np.array_equal(w, o)) for o in out]
    counts = np.bincount([t * 3 + left for t, left in seen], minlength=9)
    assert counts.min() > 60  # all nine places, each about a ninth of the time


def test_flip_horizontal_mirrors_with_probability_p() -> None:
    x = np.arange(6, dtype=np.float32).reshape(1, 2, 3, 1).repeat(1000, axis=0)
    assert np.array_equal(run(x, {"op": "flip_horizontal", "p": 1}), x[:, :, ::-1])
    assert np.array_equal(run(x, {"op": "flip_horizontal", "p": 0}), x)
    out = run(x, {"op": "flip_horizontal"})
    flipped = (out != x).any(axis=(1, 2, 3))
    assert np.array_equal(out[flipped], x[flipped][:, :, ::-1])
    assert 400 < flipped.sum() < 600


PIPELINE = (
    {"op": "resize", "size": 12},
    {"op": "random_crop", "size": 10, "padding": 2},
    {"op": "flip_horizontal"},
    {"op": "center_crop", "size": [9, 8]},
    {"op": "normalize", "mean": [0.5], "std": [0.25]},
)


def test_the_pixels_depend_on_seed_epoch_and_sample_id_only() -> None:
    x = np.random.default_rng(1).integers(0, 256, (16, 28, 28), dtype=np.uint8)
    ids = np.arange(100, 116)
    first = augment_batch(x, ids, 3, 11, steps(*PIPELINE))
    assert np.array_equal(first, augment_batch(x, ids, 3, 11, steps(*PIPELINE)))
    assert first.shape == (16, 9, 8) and first.dtype == np.float32
    assert first.shape[1:] == augmented_shape(steps(*PIPELINE), (28, 28))
    # Another batch, order or rank holding the same sample: the same pixels.
    order = np.random.default_rng(2).permutation(16)
    shuffled = augment_batch(x[order], ids[order], 3, 11, steps(*PIPELINE))
    assert np.array_equal(shuffled, first[order])
    alone = augment_batch(x[5:6], ids[5:6], 3, 11, steps(*PIPELINE))
    assert np.array_equal(alone[0], first[5])
    for epoch, seed in ((4, 11), (3, 12)):
        other = augment_batch(x, ids, epoch, seed, steps(*PIPELINE))
        assert not np.array_equal(other, first)
    assert not np.array_equal(augment_batch(x, ids + 1, 3, 11, steps(*PIPELINE)), first)


def test_shapes_and_the_input_left_alone() -> None:
    x = np.random.default_rng(3).integers(0, 256, (4, 8, 6, 3), dtype=np.uint8)
    kept = x.copy()
    out = run(x, {"op": "random_crop", "size": [5, 4]}, {"op": "flip_horizontal", "p": 1})
    assert out.shape == (4, 5, 4, 3) and out.dtype == np.uint8
    assert np.array_equal(x, kept)
    assert run(x) is x  # no steps: the batch as it is
    with pytest.raises(ValueError, match="3 sample ids for a batch of 4"):
        augment_batch(x, np.arange(3), 0, 0, steps({"op": "flip_horizontal"}))
    with pytest.raises(ValueError, match="needs images"):
        augment_batch(np.zeros((4, 10)), np.arange(4), 0, 0, steps({"op": "flip_horizontal"}))
