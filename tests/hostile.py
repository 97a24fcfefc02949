"""What a hostile user with a valid key sends, built small here and scaled by the
caller: upload bombs, sweep spaces that cost the server, and a model whose rows cost GFLOPs.

Nothing here holds the expanded data in this process: bombs are streamed through the
compressor, and the model has few weights for the FLOPs a row costs.
"""

from __future__ import annotations

import io
import json
import struct
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from app.domain.job_files import JobFiles

MiB = 2**20
BASE = {"framework": "pytorch", "dataset": {"name": "digits"}, "training": {"epochs": 1}}


def _npy_header(descr: str, shape: tuple[int, ...]) -> bytes:
    buffer = io.BytesIO()
    header = {"descr": descr, "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_1_0(buffer, header)
    return buffer.getvalue()


def _labels(n: int) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.arange(n) % 2)
    return buffer.getvalue()


def member_bomb(
    method: int, expanded: int, descr: str = "|u1", shape: tuple[int, ...] = (4, 4)
) -> bytes:
    """An .npz whose x.npy header promises `shape` of `descr`, followed by `expanded` zero bytes
    compressed with `method` (bzip2 and LZMA: a few hundred bytes to KB for hundreds of MB)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", method) as archive:
        with archive.open("x.npy", "w", force_zip64=True) as f:
            f.write(_npy_header(descr, shape))
            block = bytes(MiB)
            for _ in range(expanded // MiB):
                f.write(block)
        archive.writestr("y.npy", _labels(shape[0]))
    return buffer.getvalue()


def void_bomb(item_bytes: int, items: int = 4) -> bytes:
    """x of dtype |V<item_bytes>: `items` values that load as items x item_bytes bytes, deflated
    (a stored-size estimate by the target dtype counts them as 4 bytes each)."""
    return member_bomb(zipfile.ZIP_DEFLATED, item_bytes * items, f"|V{item_bytes}", (items,))


def directory_flood(entries: int) -> bytes:
    """A zip of `entries` empty stored members, all named x.npy: parsing its central directory
    builds one Python object per entry (~0.35 KB and ~13 us each)."""
    name = b"x.npy"
    local = struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, 0, 0, 0, 0, 0, 0, len(name), 0) + name
    central = [
        struct.pack(
            "<4s6H3L5H2L",
            b"PK\x01\x02",
            20,
            20,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            len(name),
            0,
            0,
            0,
            0,
            0,
            i * len(local),
        )  # fmt: skip
        + name
        for i in range(entries)
    ]
    directory = b"".join(central)
    count = min(entries, 0xFFFF)
    end = struct.pack(
        "<4s4H2LH", b"PK\x05\x06", 0, 0, count, count, len(directory), entries * len(local), 0
    )
    return local * entries + directory + end


def grid_over(high: int) -> dict[str, Any]:
    """A grid sweep over one int range of `high` + 1 values (valid at both ends)."""
    space = {"training.seed": {"type": "int", "low": 0, "high": high}}
    return {"base": BASE, "parameters": space, "sampler": {"name": "grid"}, "max_trials": 1}


# Twelve parameters of two valid values each: 4,096 combinations, every one a valid job.
TWO_EACH: dict[str, Any] = {
    "training.epochs": {"type": "int", "low": 1, "high": 2},
    "training.batch_size": {"type": "categorical", "choices": [16, 32]},
    "training.seed": {"type": "categorical", "choices": [1, 2]},
    "training.shuffle": {"type": "categorical", "choices": [True, False]},
    "optimizer.learning_rate": {"type": "loguniform", "low": 0.001, "high": 0.01},
    "max_restarts": {"type": "int", "low": 0, "high": 1},
    "regularization.l2": {"type": "uniform", "low": 0.0, "high": 0.01},
    "model.dropout": {"type": "uniform", "low": 0.0, "high": 0.5},
    "model.batch_norm": {"type": "categorical", "choices": [True, False]},
    "model.activation": {"type": "categorical", "choices": ["relu", "tanh"]},
    "dataset.validation_split": {"type": "uniform", "low": 0.1, "high": 0.2},
    "checkpoint_every_epochs": {"type": "int", "low": 1, "high": 2},
}


def combinations_sweep() -> dict[str, Any]:
    return {"base": BASE, "parameters": TWO_EACH, "max_trials": 1, "max_parallel": 1}


def many_choices_sweep(parameters: int = 8, choices: int = 256) -> dict[str, Any]:
    """`parameters` x `choices` values, each a valid job alone (each one validated)."""
    paths = [
        "training.seed", "training.epochs", "training.batch_size", "max_runtime_seconds",
        "optimizer.learning_rate", "max_queue_seconds", "regularization.l2", "model.dropout",
    ][:parameters]  # fmt: skip
    values = {
        "optimizer.learning_rate": [1e-4 * (i + 1) for i in range(choices)],
        "max_queue_seconds": [60 + i for i in range(choices)],
        "regularization.l2": [i / 1000 for i in range(choices)],
        "model.dropout": [i / (2 * choices) for i in range(choices)],
        "max_runtime_seconds": [60 + i for i in range(choices)],
    }
    space = {
        p: {"type": "categorical", "choices": values.get(p, list(range(1, choices + 1)))}
        for p in paths
    }
    return {"base": BASE, "parameters": space, "max_trials": 1, "max_parallel": 1}


def image_upload(side: int = 32, samples: int = 20) -> bytes:
    """An .npz of `samples` side x side x 1 uint8 images in two classes (what a CNN reads)."""
    buffer = io.BytesIO()
    x = np.random.default_rng(0).integers(0, 256, (samples, side, side, 1), dtype=np.uint8)
    np.savez(buffer, x=x, y=np.arange(samples) % 2)
    return buffer.getvalue()


def heavy_cnn(dataset_id: str, filters: int = 256, convs: int = 4) -> dict[str, Any]:
    """A job spec whose CNN keeps each image at full size through `convs` 3x3 convolutions
    `filters` wide: ~1.8 M parameters, ~3.6 GFLOPs a 32 x 32 row (none pooled away)."""
    layers = [
        {"name": f"c{i}", "op": "conv2d", "filters": filters, "kernel_size": 3}
        for i in range(convs)
    ] + [{"name": "gap", "op": "global_avg_pool"}]
    return {**BASE, "dataset": {"id": dataset_id}, "model": {"type": "graph", "layers": layers}}


def concat_bomb(concats: int = 6, copies: int = 8) -> dict[str, Any]:
    """A job spec cheap to compute and huge to hold: 16 features reshaped to (16, 1), then
    `concats` concats of `copies` copies each, then pooled. Concat and reshape cost no FLOPs;
    the last concat alone holds 16 x copies**concats values a row."""
    layers: list[dict[str, Any]] = [{"name": "r", "op": "reshape", "shape": [16, 1]}]
    for i in range(concats):
        before = layers[-1]["name"]
        layers.append({"name": f"c{i}", "op": "concat", "inputs": [before] * copies})
    layers.append({"name": "gap", "op": "global_avg_pool"})
    dataset = {"name": "synthetic", "samples": 64, "features": 16}
    return {**BASE, "dataset": dataset, "model": {"type": "graph", "layers": layers}}


def export_random_weights(job_dir: Path, spec: dict[str, Any], row_shape: tuple[int, ...]) -> None:
    """model.onnx and model-card.json as the worker writes them for this spec (its exporter,
    the graph built for the rows), with random weights instead of trained ones."""
    from app.schemas.dataset_spec import model_input
    from app.schemas.job_spec import JobSpec
    from app.schemas.spec_graph import built_model
    from worker.training.onnx_export import build_onnx

    job = JobSpec.model_validate(spec)
    graph = built_model(job, model_input(job, row_shape), 2)
    rng = np.random.default_rng(0)
    weights = [
        rng.normal(0, 0.05, v.shape).astype(np.float32) for n in graph.nodes for v in n.variables()
    ]
    one = np.ones(1, np.float32)
    proto = build_onnx(job, weights, row_shape, 2, one * 255, one * 0)
    files = JobFiles(job_dir)
    files.model_dir.mkdir(parents=True, exist_ok=True)
    files.onnx.write_bytes(proto.SerializeToString())
    card = {
        "format_version": 1,
        "framework": "pytorch",
        "task": "classification",
        "input": {"name": "input", "dtype": "float32", "shape": [None, *row_shape]},
        "output": {"name": "logits", "shape": [None, 2]},
        "classes": [0, 1],
    }
    files.model_card.write_text(json.dumps(card))


def npy_rows(rows: int, row_shape: tuple[int, ...] = (32, 32, 1)) -> bytes:
    """`rows` uint8 rows as an .npy body (1 KiB a 32 x 32 row: 7 fit in 8 KiB)."""
    buffer = io.BytesIO()
    np.save(buffer, np.ones((rows, *row_shape), np.uint8))
    return buffer.getvalue()
