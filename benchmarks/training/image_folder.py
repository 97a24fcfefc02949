"""Fashion-MNIST written out as image folders of PNG files, for the image-folder benchmarks:
`python -m benchmarks.training.image_folder OUT [--limit N]` writes OUT/train and OUT/test,
each one subfolder per class of 28x28 grayscale PNGs, from the IDX files (Debian's
dataset-fashion-mnist, see worker.training.data.idx).

The folders are named `<label>-<class name>` so their sorted order (the order an image-folder
ingest numbers classes in) is the labels' own.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import numpy as np
from PIL import Image

from app.schemas.dataset_spec import CLASS_NAMES
from benchmarks.training.common import DATA_DIR
from worker.training.data.idx import find_idx, read_idx


def folder_names(names: tuple[str, ...]) -> list[str]:
    """`<label>-<name>`, the name made a plain folder name; labels of one digit sort right."""
    if len(names) > 10:
        raise ValueError("folder names sort as labels for up to 10 classes")
    return [
        f"{n}-{re.sub(r'[^a-z0-9]+', '-', name.lower()).strip('-')}" for n, name in enumerate(names)
    ]


def write_image_folder(
    x: np.ndarray, y: np.ndarray, names: list[str], root: Path, suffix: str = ".png"
) -> int:
    """Each image x[i] (H, W) uint8 as root/<names[y[i]]>/<i><suffix> (.png, or .jpg at
    JPEG quality 90); how many were written."""
    options = {"quality": 90} if suffix == ".jpg" else {"optimize": False}
    for name in names:
        (root / name).mkdir(parents=True, exist_ok=True)
    for i, (image, label) in enumerate(zip(x, y, strict=True)):
        Image.fromarray(image).save(root / names[int(label)] / f"{i:05d}{suffix}", **options)
    return len(x)


def write_fashion_mnist(
    out: Path, limit: int | None = None, suffix: str = ".png"
) -> dict[str, int]:
    """OUT/train and OUT/test from the IDX files (the first `limit` images of each), as
    `suffix` files; the number of images each holds."""
    files = find_idx("fashion_mnist", DATA_DIR)
    names = folder_names(CLASS_NAMES["fashion_mnist"])
    written = {}
    for split, prefix in (("train", "train"), ("test", "t10k")):
        x = read_idx(files[f"{split}/{prefix}-images-idx3-ubyte"])[:limit]
        y = read_idx(files[f"{split}/{prefix}-labels-idx1-ubyte"])[:limit]
        written[split] = write_image_folder(x, y, names, out / split, suffix)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.training.image_folder")
    parser.add_argument("out", type=Path, help="the folder to write train/ and test/ into")
    parser.add_argument("--limit", type=int, default=None, help="the first N images of each")
    args = parser.parse_args()
    written = write_fashion_mnist(args.out, args.limit)
    print(", ".join(f"{split}: {n} images" for split, n in written.items()))


if __name__ == "__main__":
    main()
