"""Built-in data sets are downloaded only when allowed, atomically, and checked.

The internet is not reachable here, so the "mirror" is a real HTTP server on 127.0.0.1 serving
copies of Debian's Fashion-MNIST IDX files. They are served under the `mnist` name, which has
no system copy on this machine, so the download path really runs (both data sets have the same
file names and shapes).
"""

from __future__ import annotations

import functools
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from app.core.config import get_settings
from worker.training.data import DataError
from worker.training.data.builtin import load_idx_dataset
from worker.training.data.idx import read_idx

DEBIAN = Path("/usr/share/datasets/fashion-mnist")
pytestmark = pytest.mark.skipif(
    Path("/usr/share/datasets/mnist").exists(), reason="a system MNIST copy would be used instead"
)


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@contextmanager
def serving(root: Path) -> Iterator[str]:
    """A real HTTP server for `root` on a free port of 127.0.0.1."""
    server = ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(root))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def mirror(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("mirror")
    (root / "mnist").mkdir()
    for path in DEBIAN.glob("*.gz"):
        shutil.copyfile(path, root / "mnist" / path.name)
    return root


def allow(monkeypatch: pytest.MonkeyPatch, mirror_url: str | None) -> None:
    monkeypatch.setenv("EPOCHAL_ALLOW_DOWNLOAD", "1")
    if mirror_url:
        monkeypatch.setenv("EPOCHAL_DOWNLOAD_MIRROR", mirror_url)
    get_settings.cache_clear()


def test_without_the_setting_the_error_says_where_to_put_the_files(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="dataset-mnist or copy them there.*EPOCHAL_ALLOW_DOWNLOAD"):
        load_idx_dataset("mnist", tmp_path)
    assert not (tmp_path / "mnist").exists()


def test_download_from_the_mirror_then_reuse_the_files(
    tmp_path: Path, mirror: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with serving(mirror) as url:
        allow(monkeypatch, url)
        raw = load_idx_dataset("mnist", tmp_path)
    assert raw.x.shape == (60000, 28, 28) and raw.x_test is not None
    assert raw.x_test.shape == (10000, 28, 28)
    np.testing.assert_array_equal(raw.y, read_idx(DEBIAN / "train-labels-idx1-ubyte.gz"))
    names = sorted(p.name for p in (tmp_path / "mnist").iterdir())
    assert names == sorted(p.name for p in DEBIAN.glob("*.gz"))  # no temporary file left
    again = load_idx_dataset("mnist", tmp_path)  # the server is gone: read from data_dir
    np.testing.assert_array_equal(again.x[:100], raw.x[:100])


@pytest.mark.parametrize(("damage", "words"), [("truncate", "ended"), ("remove", "404")])
def test_a_bad_mirror_leaves_no_partial_file(
    tmp_path: Path, mirror: Path, monkeypatch: pytest.MonkeyPatch, damage: str, words: str
) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(mirror, broken)
    bad = broken / "mnist" / "t10k-images-idx3-ubyte.gz"  # the third file fetched
    if damage == "truncate":
        bad.write_bytes(bad.read_bytes()[:100_000])
    else:
        bad.unlink()
    data_dir = tmp_path / "data"
    with serving(broken) as url:
        allow(monkeypatch, url)
        with pytest.raises(DataError, match=f"could not download t10k-images.*{words}"):
            load_idx_dataset("mnist", data_dir)
    names = sorted(p.name for p in (data_dir / "mnist").iterdir())
    assert names == ["train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"]
