"""`epochal predict JOB a.jpg b.png`: image files as the rows a job's model takes.

Each image is decoded with Pillow (the client's `images` extra), made grayscale or RGB as the
model's input has 1 or 3 channels, and brought to its height and width as an image-folder
ingest does: resized (bilinear) so it covers the size, its shorter side fitting, then
centre-cropped. The pixels go as they are (0..255): the model normalizes its own input.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")


def is_image(path: Path) -> bool:
    return path.suffix.lower() in IMAGE_SUFFIXES


def image_rows(paths: Sequence[Path], shape: Sequence[int]) -> Any:
    """float32 rows (N, *shape) from the images; `shape` is the model card's input shape
    without its batch axis: (H, W) grayscale, or (H, W, C) with C 1 or 3."""
    try:
        import numpy as np
        from PIL import Image
    except ImportError:
        raise ValueError(
            "reading images needs Pillow and numpy (pip install 'epochal-client[images]')"
        ) from None
    if len(shape) not in (2, 3) or (len(shape) == 3 and shape[2] not in (1, 3)):
        raise ValueError(f"the model takes rows of shape {tuple(shape)}, not images")
    height, width = int(shape[0]), int(shape[1])
    mode = "RGB" if len(shape) == 3 and shape[2] == 3 else "L"
    rows = []
    for path in paths:
        try:
            with Image.open(path) as image:
                image.load()
                fitted = fit(image.convert(mode), height, width)
        except (OSError, SyntaxError, ValueError) as exc:
            raise ValueError(f"{path}: not a readable JPEG or PNG image: {exc}") from None
        rows.append(np.asarray(fitted, dtype=np.float32).reshape(tuple(shape)))
    return np.stack(rows)


def fit(image: Any, height: int, width: int) -> Any:
    """The image scaled to cover height x width, then its centre that size."""
    w0, h0 = image.size
    if (h0, w0) == (height, width):
        return image
    scale = max(height / h0, width / w0)
    new_w, new_h = max(width, round(w0 * scale)), max(height, round(h0 * scale))
    if (new_w, new_h) != (w0, h0):
        image = image.resize((new_w, new_h), 2)  # 2: Pillow's BILINEAR, in every version
    left, top = (new_w - width) // 2, (new_h - height) // 2
    return image.crop((left, top, left + width, top + height))
