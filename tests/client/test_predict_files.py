"""`epochal predict`'s input files, offline: each format's rows, headers, and clear refusals."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from epochal_client.predict_files import batches, merge, read_rows
from epochal_client.types import Predictions


def test_each_format_gives_the_same_rows(tmp_path: Path) -> None:
    rows = np.arange(12).reshape(3, 4)
    np.save(tmp_path / "a.npy", rows)
    np.savez(tmp_path / "a.npz", x=rows, y=np.zeros(3))
    (tmp_path / "a.json").write_text(json.dumps(rows.tolist()))
    (tmp_path / "b.json").write_text(json.dumps({"inputs": rows.tolist()}))
    (tmp_path / "a.csv").write_text("a,b,c,d\n" + "\n".join(",".join(map(str, r)) for r in rows))
    (tmp_path / "b.csv").write_text("\n".join(",".join(map(str, r)) for r in rows) + "\n\n")
    for name in ("a.npy", "a.npz", "a.json", "b.json", "a.csv", "b.csv"):
        assert np.asarray(read_rows(tmp_path / name)).tolist() == rows.tolist(), name


def test_bad_files_say_what_is_wrong(tmp_path: Path) -> None:
    np.savez(tmp_path / "no-x.npz", inputs=np.zeros((2, 2)))
    (tmp_path / "bad.csv").write_text("1,2\n3,x\n")
    (tmp_path / "bad.json").write_text('{"rows": []}')
    np.save(tmp_path / "objects.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    for name, message in (
        ("no-x.npz", "has no array x"),
        ("bad.csv", "line 2 is not all numbers"),
        ("bad.json", "list of rows"),
        ("rows.txt", "use one of .npy"),
        ("objects.npy", "allow_pickle=False"),  # never unpickled
    ):
        with pytest.raises(ValueError, match=message):
            read_rows(tmp_path / name)


def test_batches_and_merge_keep_the_order() -> None:
    parts = [list(b) for b in batches(list(range(7)), 3)]
    assert parts == [[0, 1, 2], [3, 4, 5], [6]]
    answers = [Predictions([0, 1], [[0.9, 0.1], [0.2, 0.8]]), Predictions([1], [[0.3, 0.7]])]
    merged = merge(answers)
    assert merged.predictions == [0, 1, 1] and merged.probabilities == [
        [0.9, 0.1],
        [0.2, 0.8],
        [0.3, 0.7],
    ]
    assert merge([Predictions([1.5]), Predictions([2.5])]) == Predictions([1.5, 2.5])


def test_images_become_rows_of_the_models_input_shape(tmp_path: Path) -> None:
    from epochal_client.predict_images import image_rows
    from tests.shard_data import image_bytes

    pixels = np.random.default_rng(0).integers(0, 256, (4, 4, 3), dtype=np.uint8)
    (tmp_path / "a.png").write_bytes(image_bytes(pixels))
    wide = np.zeros((8, 24), dtype=np.uint8)
    wide[:, 8:16] = 200  # the middle third: what a centre crop to 8x8 keeps
    (tmp_path / "b.png").write_bytes(image_bytes(wide))
    rgb = image_rows([tmp_path / "a.png"], [4, 4, 3])
    assert rgb.dtype == np.float32 and np.array_equal(rgb[0], pixels)
    grey = image_rows([tmp_path / "b.png", tmp_path / "b.png"], [8, 8])
    assert grey.shape == (2, 8, 8) and (grey == 200).all()
    (tmp_path / "c.jpg").write_bytes(b"no jpeg")
    with pytest.raises(ValueError, match="c.jpg: not a readable JPEG or PNG image"):
        image_rows([tmp_path / "c.jpg"], [8, 8])
    with pytest.raises(ValueError, match=r"rows of shape \(10,\), not images"):
        image_rows([tmp_path / "a.png"], [10])
