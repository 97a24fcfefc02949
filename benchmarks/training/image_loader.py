"""The streaming loader against the model it feeds, from a folder of JPEG files.

Fashion-MNIST's training images are written as an image folder of JPEG files (one subfolder
per class), ingested by the service's own code (app.shards.ingest, format image_folder) into
a directory store, then read as a job reads them: the streaming reader (ShardStream) and the
batch preparation (normalization and the augmentation below). Measured:

- the loader's delivery: samples/s of prepared batches, nothing training;
- the model's consumption: samples/s of training steps of the residual CNN of `examples/` on
  batches of the same size, PyTorch, its input ready on the device (goal: loader >= 2x);
- the time from opening the data set to the first prepared batch, for the set and for one
  10x bigger (goal: <= 10 s, and about the same for both);
- the input wait (`data_wait_seconds`) as a share of the epoch time after the first epoch,
  of a real short training run through the worker's attempt code (goal: <= 5 %).

The shards are made small (SHARD_BYTES), so the sets span many shards and windows, as a data
set a thousand times larger does with the default shard size.

`python -m benchmarks.training.image_loader [--tiny]` prints a table and `BENCH` lines.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import TYPE_CHECKING

import numpy as np
import yaml

from benchmarks.training.common import DATA_DIR, bench_parser, fashion_arrays, print_aligned
from benchmarks.training.image_folder import folder_names, write_image_folder
from benchmarks.training.suite import bench

if TYPE_CHECKING:
    from app.schemas.job_spec import JobSpec
    from app.storage.base import Store

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "residual-fashion-mnist.yaml"
AUGMENT = [{"op": "random_crop", "size": 28, "padding": 4}, {"op": "flip_horizontal"}]
SHARD_BYTES = 1024 * 1024  # 1,337 images of 28x28 a shard
BIGGER = 10  # the second data set for the first batch: this many times the first's images
BARS = {"ratio": 2.0, "first_batch": 10.0, "wait_share": 0.05}
TRIES = 3  # first batches of each data set, interleaved: their median


@dataclass(frozen=True)
class Sizes:
    images: int  # the data set's training images (the bigger one has BIGGER times as many)
    loader_epochs: int
    model_steps: int
    train_epochs: int
    train_rows: int  # dataset.limit of the training run


FULL = Sizes(images=4_000, loader_epochs=3, model_steps=12, train_epochs=3, train_rows=1_280)
TINY = Sizes(images=300, loader_epochs=2, model_steps=3, train_epochs=2, train_rows=300)


def write_and_ingest(root: Path, dataset: str, images: int) -> float:
    """A seeded sample of `images` training images as JPEG files under root/<dataset>/,
    ingested into the directory store at root/store as the data set `dataset`; the seconds
    the ingest took."""
    from app.schemas.dataset_spec import CLASS_NAMES

    (x, y), _ = fashion_arrays()
    rows = np.sort(np.random.default_rng(7).permutation(len(x))[:images])
    folder = root / dataset
    write_image_folder(x[rows], y[rows], folder_names(CLASS_NAMES["fashion_mnist"]), folder, ".jpg")
    return ingest_folder(root / "store", dataset, "train", folder, SHARD_BYTES)


def ingest_folder(
    store_root: Path, dataset: str, part: str, folder: Path, shard_bytes: int = 0
) -> float:
    """The image folder ingested by the service's own code (app.shards.ingest, format
    image_folder) into the directory store at store_root, as part `part` (train or test) of
    the data set `dataset`, in shards of shard_bytes (0: the default); the seconds it took."""
    from app.shards import dataset_prefix
    from app.shards.ingest import ingest_file
    from app.shards.writer import DEFAULT_SHARD_BYTES
    from app.storage.directory import DirectoryStore

    store = DirectoryStore(store_root)
    began = time.perf_counter()
    ingest_file(
        store, dataset_prefix(dataset, part), folder, "classification",
        format="image_folder", shard_bytes=shard_bytes or DEFAULT_SHARD_BYTES,
    )  # fmt: skip
    return time.perf_counter() - began


def spec_of(dataset: str, epochs: int, limit: int | None = None) -> JobSpec:
    """The residual CNN of examples/ on the data set, with augmentation; no held-out split
    (the folder's order is by class, so the last ids would all be one class)."""
    from app.schemas.job_spec import JobSpec

    body = yaml.safe_load(EXAMPLE.read_text())
    body["dataset"] = {"id": dataset, "validation_split": 0.0, "augment": AUGMENT, "limit": limit}
    body["training"]["epochs"] = epochs
    return JobSpec.model_validate(body)


def loader_rate(store: Store, dataset: str, epochs: int) -> float:
    """Prepared training batches per second, times the batch size, over the epochs after the
    first: the stream's batches normalized, augmented and made tensors, as a step takes them."""
    import torch

    from worker.training.data.stream import Position
    from worker.training.data.streamed import open_streamed, prepare_batch

    data = open_streamed(spec_of(dataset, epochs), store)
    assert data is not None
    samples, began = 0, 0.0
    with data.train_stream(1, 0, 1) as stream:
        for batch in stream.iterate(Position(0, 0), epochs):
            if batch.epoch == 1 and not began:
                began = time.perf_counter()
            torch.from_numpy(prepare_batch(batch, data))
            samples += len(batch.ids) if began else 0
    data.close()
    return samples / (time.perf_counter() - began)


def model_rate(store: Store, dataset: str, steps: int) -> float:
    """Training steps of the example's network per second, times the batch size: one
    prepared batch, stepped on again and again (the input costs nothing)."""
    import torch

    from worker.training.backend import Placement, create_backend
    from worker.training.data import load_splits

    spec = spec_of(dataset, 1)
    splits = load_splits(spec, DATA_DIR, store)
    backend = create_backend(spec, splits, Placement())
    n = spec.training.batch_size
    x = torch.from_numpy(np.resize(splits.x_train, (n, *splits.x_train.shape[1:])))
    y = torch.from_numpy(np.resize(splits.y_train, n))
    for _ in range(3):  # warm-up: the first steps allocate
        backend._step(x, y)  # type: ignore[attr-defined]
    began = time.perf_counter()
    for _ in range(steps):
        backend._step(x, y)  # type: ignore[attr-defined]
    seconds = time.perf_counter() - began
    backend.close()
    return steps * n / seconds


def first_batch_seconds(store: Store, dataset: str) -> float:
    """From opening the data set (its index, the normalization's statistics) to the first
    prepared training batch."""
    from worker.training.data.stream import Position
    from worker.training.data.streamed import open_streamed, prepare_batch

    began = time.perf_counter()
    data = open_streamed(spec_of(dataset, 1), store)
    assert data is not None
    with data.train_stream(1, 0, 1) as stream:
        for batch in stream.iterate(Position(0, 0), 1):  # leaving the loop stops the stream
            prepare_batch(batch, data)
            break
        seconds = time.perf_counter() - began
    data.close()
    return seconds


def training_run(store: Store, dataset: str, epochs: int, rows: int) -> dict[str, float]:
    """A short real run (run_attempt): samples/s and the input wait's share of the epoch,
    medians over the epochs after the first."""
    from worker.child.train_attempt import run_attempt
    from worker.training.backend import Placement, create_backend
    from worker.training.callbacks import EpochLog, TrainState
    from worker.training.data import load_splits

    spec = spec_of(dataset, epochs, rows)
    splits = load_splits(spec, DATA_DIR, store)
    backend = create_backend(spec, splits, Placement())
    log = EpochLog()
    with tempfile.TemporaryDirectory() as workdir:
        state = TrainState(epochs=epochs, learning_rate=spec.optimizer.learning_rate)
        run_attempt(spec, Path(workdir), backend, splits, state, [log])
    backend.close()
    steady = log.rows[1:] or log.rows
    return {
        "samples_per_second": median(r["samples_per_second"] for r in steady),
        "wait_share": median(r["data_wait_seconds"] / r["epoch_seconds"] for r in steady),
    }


def run(sizes: Sizes) -> list[list[str]]:
    from app.storage.directory import DirectoryStore

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ingest = write_and_ingest(root, "jpeg-small", sizes.images)
        write_and_ingest(root, "jpeg-bigger", sizes.images * BIGGER)
        store = DirectoryStore(root / "store")
        loader = loader_rate(store, "jpeg-bigger", sizes.loader_epochs)
        model = model_rate(store, "jpeg-small", sizes.model_steps)
        tries = [
            [first_batch_seconds(store, name) for name in ("jpeg-small", "jpeg-bigger")]
            for _ in range(TRIES)
        ]
        first = [median(seconds) for seconds in zip(*tries, strict=True)]
        trained = training_run(store, "jpeg-small", sizes.train_epochs, sizes.train_rows)
    return _report(sizes, ingest, loader, model, first, trained)


def _report(
    sizes: Sizes,
    ingest: float,
    loader: float,
    model: float,
    first: list[float],
    trained: dict[str, float],
) -> list[list[str]]:
    ratio, wait = loader / model, trained["wait_share"]
    bench("image_loader_ingest_images_per_s", sizes.images / ingest, "images/s")
    bench("image_loader_samples_per_s", loader, "samples/s")
    bench("image_loader_model_samples_per_s", model, "samples/s")
    bench("image_loader_vs_model_x", ratio, "x")
    bench("image_loader_first_batch_s", first[0], "s")
    bench("image_loader_first_batch_bigger_s", first[1], "s")
    bench("image_loader_train_samples_per_s", trained["samples_per_second"], "samples/s")
    bench("image_loader_wait_share", wait, "fraction")
    bigger = sizes.images * BIGGER

    def verdict(ok: bool) -> str:
        return "pass" if ok else "FAIL"

    return [
        ["ingest, JPEG folder to shards", f"{sizes.images / ingest:,.0f} images/s", "", ""],
        ["loader (stream + augment)", f"{loader:,.0f} samples/s", "", ""],
        ["residual CNN's steps (PyTorch)", f"{model:,.0f} samples/s", "", ""],
        ["loader / model", f"{ratio:.2f}x", ">= 2x", verdict(ratio >= BARS["ratio"])],
        [f"first batch, {sizes.images:,} images", f"{first[0]:.2f} s", "<= 10 s",
         verdict(first[0] <= BARS["first_batch"])],
        [f"first batch, {bigger:,} images", f"{first[1]:.2f} s", "<= 10 s",
         verdict(first[1] <= BARS["first_batch"])],
        ["training run", f"{trained['samples_per_second']:,.0f} samples/s", "", ""],
        ["input wait after epoch 1", f"{wait:.1%} of the epoch", "<= 5 %",
         verdict(wait <= BARS["wait_share"])],
    ]  # fmt: skip


def print_table(rows: list[list[str]], sizes: Sizes) -> None:
    title = (
        f"image loader: Fashion-MNIST as JPEG files, {sizes.images:,} and "
        f"{sizes.images * BIGGER:,} images, batch 128, augmented"
    )
    print_aligned(title, ["figure", "value", "goal", ""], rows, right={1})


def main() -> None:
    parser = bench_parser(
        "python -m benchmarks.training.image_loader", tiny="a few hundred images: a smoke run"
    )
    sizes = TINY if parser.parse_args().tiny else FULL
    print_table(run(sizes), sizes)


if __name__ == "__main__":
    main()
