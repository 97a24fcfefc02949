"""JPEG and PNG into fixed-size records, shared by the image formats: decoded with Pillow,
made RGB (H, W, 3) or grayscale (H, W, 1) uint8, and brought to one size: an image of another
size is resized so its shorter side fits (bilinear), then centre-cropped."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image

from app.shards.ingest.base import Color, IngestError
from epochal_client.predict_images import fit

IMAGE_FORMATS = ("JPEG", "PNG")
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
MAX_SIDE = 2048  # a record's height or width, at most; a larger image needs `image_size`
GRAY_MODES = {"1", "L", "LA", "I", "I;16", "I;16B", "I;16L", "F"}


class ImageFitter:
    """Decode one image after another into records of one shape: the given size and colour,
    or the first image's."""

    def __init__(self, size: tuple[int, int] | None, color: Color | None) -> None:
        if size is not None and not all(1 <= n <= MAX_SIDE for n in size):
            raise ValueError(f"image_size {size} is not sizes of 1 .. {MAX_SIDE}")
        self.size, self.color = size, color

    @property
    def shape(self) -> tuple[int, int, int]:
        assert self.size is not None and self.color is not None
        return (*self.size, 3 if self.color == "rgb" else 1)

    def __call__(self, data: bytes, name: str, record: int) -> np.ndarray:
        """The image in `data` as a record (H, W, C) uint8; IngestError naming it if it is not
        a whole JPEG or PNG."""
        try:
            with Image.open(io.BytesIO(data)) as image:
                if image.format not in IMAGE_FORMATS:
                    raise IngestError(name, f"a {image.format} image; JPEG or PNG only", record)
                image.load()
                return self._fit(image, name, record)
        except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
            raise IngestError(name, f"not a readable JPEG or PNG image: {exc}", record) from exc

    def _fit(self, image: Image.Image, name: str, record: int) -> np.ndarray:
        if self.color is None:
            self.color = "grayscale" if image.mode in GRAY_MODES else "rgb"
        if self.size is None:
            width, height = image.size
            if max(width, height) > MAX_SIDE:
                raise IngestError(
                    name, f"{width}x{height} is larger than {MAX_SIDE}; give image_size", record
                )
            self.size = (height, width)
        image = image.convert("L" if self.color == "grayscale" else "RGB")
        image = fit(image, *self.size)  # as `epochal predict` fits an image file
        return np.asarray(image, dtype=np.uint8).reshape(self.shape)


def read_bytes(path: Path, name: str, record: int) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise IngestError(name, f"cannot be read: {exc}", record) from exc
