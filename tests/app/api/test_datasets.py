"""Uploads over HTTP, in-process: good files round-trip, bad ones get a clear 4xx and leave
nothing behind; ownership; a job naming an upload is checked at submit; delete rules."""

from __future__ import annotations

import hashlib
import io
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.core.config import get_settings
from tests.conftest import make_key

Client = Callable[[str], TestClient]


@pytest.fixture
def clients(db_env: dict[str, str]) -> Iterator[Client]:
    """A TestClient per API key over one app (SQLite and PostgreSQL)."""
    from app.main import create_app

    app, opened = create_app(), []

    def client_for(key: str) -> TestClient:
        client = TestClient(app, raise_server_exceptions=False)
        client.__enter__()
        client.headers["Authorization"] = f"Bearer {key}"
        opened.append(client)
        return client

    yield client_for
    for client in opened:
        client.__exit__(None, None, None)


@pytest.fixture
def sqlite_client(sqlite_env: dict[str, str]) -> Iterator[TestClient]:
    """Validation needs no second database: these run on the embedded default only."""
    from app.main import create_app

    with TestClient(create_app(), raise_server_exceptions=False) as client:
        client.headers["Authorization"] = f"Bearer {make_key('uploader')}"
        yield client


def npz(**arrays: Any) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def images(n: int = 40, classes: int = 4, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "x": rng.integers(0, 256, (n, 6, 6), dtype=np.uint8),
        "y": np.arange(n) % classes,
        "x_test": rng.integers(0, 256, (10, 6, 6), dtype=np.uint8),
        "y_test": np.arange(10) % classes,
    }


def upload(client: TestClient, content: bytes, filename: str = "d.npz", **form: str) -> Any:
    return client.post("/v1/datasets", files={"file": (filename, content)}, data=form)


def stored_files() -> list[Path]:
    folder = get_settings().resolved_data_dir / "uploads"
    return sorted(folder.iterdir()) if folder.exists() else []


def test_npz_round_trips_with_its_summary_and_checksum(clients: Client) -> None:
    client = clients(make_key("owner"))
    arrays = images()
    content = npz(**arrays)
    response = upload(client, content, "my images.npz")
    assert response.status_code == 201, response.text
    ds = response.json()
    assert ds["name"] == "my images" and ds["format"] == "npz" and ds["task"] == "classification"
    assert (ds["shape"], ds["dtype"], ds["samples"], ds["test_samples"], ds["classes"]) == (
        [6, 6],
        "uint8",
        40,
        10,
        4,
    )
    assert ds["size_bytes"] == stored_files()[0].stat().st_size  # what is stored, not sent
    assert ds["checksum"] == hashlib.sha256(content).hexdigest()
    assert client.get(f"/v1/datasets/{ds['id']}").json() == ds
    assert client.get("/v1/datasets").json()["items"] == [ds]
    with np.load(stored_files()[0], allow_pickle=False) as stored:
        assert sorted(stored.files) == ["x", "x_test", "y", "y_test"]
        np.testing.assert_array_equal(stored["x"], arrays["x"])
        assert stored["y"].dtype == np.int64


def test_csv_with_a_named_label_column(sqlite_client: TestClient) -> None:
    content = b"f1,target,f2\n0.5,1.5,2\n1.5,2.5,3\n2.5,3.5,4\n"
    response = upload(
        sqlite_client, content, "t.csv", label_column="target", task="regression", name="tab"
    )
    assert response.status_code == 201, response.text
    ds = response.json()
    assert (ds["format"], ds["task"], ds["shape"], ds["samples"], ds["classes"]) == (
        "csv",
        "regression",
        [2],
        3,
        None,
    )
    with np.load(stored_files()[0], allow_pickle=False) as stored:
        np.testing.assert_array_equal(stored["x"], [[0.5, 2], [1.5, 3], [2.5, 4]])
        np.testing.assert_array_equal(stored["y"], [1.5, 2.5, 3.5])


def _bad_zip() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        archive.writestr("x.npy", b"not an npy file")
        archive.writestr("y.npy", b"nor this")
    return buf.getvalue()


good = images()
BAD: list[tuple[str, bytes, dict[str, str], int, str]] = [
    ("pickled", npz(x=np.array([{"a": 1}, 2], dtype=object), y=[0, 1]), {}, 422, "pickle"),
    ("nan", npz(x=np.array([[1.0], [np.nan], [2.0]]), y=[0, 1, 0]), {}, 422, "NaN"),
    ("too big for f32", npz(x=np.array([[1e300], [1.0]]), y=[0, 1]), {}, 422, "infinite"),
    ("lengths", npz(x=good["x"], y=good["y"][:-1]), {}, 422, "39 labels but x has 40"),
    ("test shape", npz(**{**good, "x_test": good["x_test"][:, :5]}), {}, 422, "x_test samples"),
    ("test alone", npz(x=good["x"], y=good["y"], x_test=good["x_test"]), {}, 422, "come together"),
    ("strings", npz(x=np.array([["a"], ["b"]]), y=[0, 1]), {}, 422, "numeric"),
    ("not integral", npz(x=good["x"], y=good["y"] + 0.5), {}, 422, "whole-number"),
    ("negative", npz(x=good["x"], y=good["y"] - 1), {}, 422, "class indices"),
    ("one class", npz(x=good["x"], y=np.zeros(40, int)), {}, 422, "at least 2"),
    ("unseen test", npz(**{**good, "y_test": good["y_test"] + 4}), {}, 422, "y_test has label"),
    ("no y", npz(x=good["x"]), {}, 422, "no array 'y'"),
    ("extra", npz(**good, z=np.zeros(3)), {}, 422, "unexpected entries ['z']"),
    ("1-d x", npz(x=np.arange(5.0), y=np.arange(5) % 2), {}, 422, "shape (samples, features)"),
    ("not npy inside", _bad_zip(), {}, 422, "not a valid .npz"),
    ("random bytes", b"\x89PNG\r\n\x1a\nrest", {}, 422, "neither an .npz"),
    ("csv label for npz", npz(**good), {"label_column": "y"}, 422, "CSV uploads only"),
    ("csv no label", b"a,b\n1,2\n", {}, 422, "needs label_column"),
    ("csv unknown label", b"a,b\n1,2\n", {"label_column": "c"}, 422, "exactly one column of: a, b"),
    ("csv text cell", b"a,b\n1,2\nx,3\n", {"label_column": "b"}, 422, "numeric below its header"),
    ("csv ragged", b"a,b\n1,2\n3\n", {"label_column": "b"}, 422, "numeric below its header"),
    # A header field over csv's field limit (128 KiB) is a 422, not a 500.
    ("csv huge header field", b"a" * 200_000 + b",y\n1,2\n", {"label_column": "y"}, 422,
     "field larger than field limit"),
    ("csv huge quoted header field", b'"' + b"a\n" * 70_000 + b'",y\n1,2\n',
     {"label_column": "y"}, 422, "field larger than field limit"),
    ("csv huge cell", b"a,y\n" + b"1" * 200_000 + b",2\n", {"label_column": "y"}, 422,
     "NaN or infinite value"),
    ("csv huge text cell", b"a,y\n" + b"x" * 200_000 + b",2\n", {"label_column": "y"}, 422,
     "numeric below its header"),
    ("csv header over 4 MiB", b"a," * (2 * 2**20 + 1) + b"y\n1,2\n", {"label_column": "y"},
     422, "header row is over"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("content", "form", "status", "words"), [b[1:] for b in BAD], ids=[b[0] for b in BAD]
)
def test_bad_files_get_a_clear_4xx_and_store_nothing(
    sqlite_client: TestClient, content: bytes, form: dict[str, str], status: int, words: str
) -> None:
    filename = "d.csv" if content[:2] != b"PK" and b"," in content else "d.npz"
    response = upload(sqlite_client, content, filename, **form)
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert words in response.json()["detail"]
    assert stored_files() == [] and sqlite_client.get("/v1/datasets").json()["items"] == []


def test_oversize_upload_is_413_and_stores_nothing(
    sqlite_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.main import create_app

    monkeypatch.setenv("EPOCHAL_MAX_UPLOAD_BYTES", "16384")
    monkeypatch.setenv("EPOCHAL_MAX_UPLOAD_ARRAY_BYTES", "65536")
    get_settings.cache_clear()
    with TestClient(create_app(), raise_server_exceptions=False) as client:
        client.headers["Authorization"] = f"Bearer {make_key('big')}"
        # Over the body limit: refused by the middleware while streaming.
        huge = upload(client, npz(x=np.zeros((1000, 100)), y=np.arange(1000) % 2))
        assert huge.status_code == 413 and "over" in huge.json()["detail"]
        # A small compressed file whose arrays would take 8 MB in memory (a zip bomb).
        buf = io.BytesIO()
        x, y = np.zeros((10_000, 100)), np.zeros(10_000, np.int8)
        np.savez_compressed(buf, x=x, y=y)
        assert len(buf.getvalue()) < 16384
        bomb = upload(client, buf.getvalue())
        assert bomb.status_code == 413, bomb.text
        # Counted in the dtypes they arrive in (x float64), which numpy would allocate.
        assert f"take {x.nbytes + y.nbytes} bytes as sent" in bomb.json()["detail"]
        assert stored_files() == [] and client.get("/v1/datasets").json()["items"] == []


def test_only_the_owner_or_an_admin_sees_an_upload(clients: Client) -> None:
    alice, bob, admin = (clients(make_key(n, admin=n == "admin")) for n in ("a", "b", "admin"))
    ds = upload(alice, npz(**images())).json()
    for path in (f"/v1/datasets/{ds['id']}",):
        assert bob.get(path).status_code == 404
        assert bob.delete(path).status_code == 404
    assert bob.get("/v1/datasets").json()["items"] == []
    assert [d["id"] for d in admin.get("/v1/datasets").json()["items"]] == [ds["id"]]
    assert admin.get(f"/v1/datasets/{ds['id']}").status_code == 200


def submit(client: TestClient, **spec: Any) -> Any:
    return client.post("/v1/jobs", json={"framework": "pytorch", **spec})


def test_a_job_naming_an_upload_is_checked_at_submit(clients: Client) -> None:
    alice, bob = clients(make_key("alice")), clients(make_key("bob"))
    image_set = upload(alice, npz(**images())).json()["id"]
    tabular = upload(
        alice, b"a,b,y\n1,2,0.5\n3,4,1.5\n", "t.csv", label_column="y", task="regression"
    )
    tabular_id = tabular.json()["id"]
    cases = [
        (bob, {"dataset": {"id": image_set}}, "no uploaded data set"),
        (alice, {"dataset": {"id": "missing"}}, "no uploaded data set"),
        (
            alice,
            {"dataset": {"id": image_set}, "task": "regression"},
            "uploaded for classification",
        ),
        (alice, {"dataset": {"id": tabular_id}}, "uploaded for regression"),
        (
            alice,
            {"dataset": {"id": tabular_id}, "task": "regression", "model": {"type": "cnn"}},
            "needs image samples",
        ),
        (
            alice,
            {"dataset": {"id": image_set}, "model": {"type": "cnn", "conv_channels": [8, 8, 8]}},
            "shrink 6x6",
        ),
    ]
    for client, spec, words in cases:
        response = submit(client, **spec)
        assert response.status_code == 422, (spec, response.text)
        assert response.json()["errors"][0]["field"] == "dataset.id"
        assert words in response.json()["detail"], response.text
    ok = submit(alice, dataset={"id": image_set}, model={"type": "cnn", "conv_channels": [8]})
    assert ok.status_code == 201, ok.text
    assert submit(alice, dataset={"id": tabular_id}, task="regression").status_code == 201


def test_delete_is_refused_while_an_unfinished_job_uses_the_upload(clients: Client) -> None:
    client = clients(make_key("owner"))
    ds = upload(client, npz(**images())).json()["id"]
    job = submit(client, dataset={"id": ds}).json()
    refused = client.delete(f"/v1/datasets/{ds}")
    assert refused.status_code == 409 and job["id"] in refused.json()["detail"]
    assert client.post(f"/v1/jobs/{job['id']}/cancel").json()["status"] == "cancelled"
    assert client.delete(f"/v1/datasets/{ds}").status_code == 204
    assert client.get(f"/v1/datasets/{ds}").status_code == 404 and stored_files() == []
    assert client.get(f"/v1/jobs/{job['id']}").status_code == 200  # the finished job stays
    assert submit(client, dataset={"id": ds}).status_code == 422


def tokens(n: int = 30, steps: int = 7, vocab: int = 12, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "x": rng.integers(0, vocab - 1, (n, steps), dtype=np.int64),
        "y": np.arange(n) % 3,
        "x_test": np.full((4, steps), vocab - 1, np.uint16),  # the highest id: only here
        "y_test": np.arange(4) % 3,
    }


def test_token_ids_are_stored_as_int32_with_their_vocabulary(sqlite_client: TestClient) -> None:
    arrays = tokens()
    response = upload(sqlite_client, npz(**arrays), kind="tokens")
    assert response.status_code == 201, response.text
    ds = response.json()
    assert (ds["kind"], ds["vocab"], ds["shape"], ds["dtype"]) == ("tokens", 12, [7], "int32")
    with np.load(stored_files()[0], allow_pickle=False) as stored:
        assert stored["x"].dtype == stored["x_test"].dtype == np.int32
        np.testing.assert_array_equal(stored["x"], arrays["x"])
    # the same integers without kind tokens are real values, as they always were
    values = upload(sqlite_client, npz(**arrays)).json()
    assert (values["kind"], values["vocab"], values["dtype"]) == ("values", None, "float32")


def test_float_sequences_are_values(sqlite_client: TestClient) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((20, 9, 3))
    ds = upload(sqlite_client, npz(x=x, y=np.arange(20) % 2)).json()
    assert (ds["kind"], ds["vocab"], ds["shape"], ds["dtype"]) == (
        "values",
        None,
        [9, 3],
        "float32",
    )


BAD_TOKENS: list[tuple[str, dict[str, Any], str]] = [
    ("floats", {"x": np.zeros((4, 3)), "y": [0, 1, 0, 1]}, "needs integer token ids"),
    ("3-d", {"x": np.zeros((4, 3, 2), int), "y": [0, 1, 0, 1]}, "(samples, steps)"),
    ("negative", {"x": -np.ones((4, 3), int), "y": [0, 1, 0, 1]}, "found -1 … -1"),
    ("huge id", {"x": np.full((4, 3), 10**6), "y": [0, 1, 0, 1]}, "token ids 0 … 999999"),
    (
        "float test",
        {**tokens(), "x_test": np.zeros((4, 7)), "y_test": [0, 1, 0, 1]},
        "x_test has dtype float64",
    ),
]


@pytest.mark.parametrize(
    ("arrays", "words"), [b[1:] for b in BAD_TOKENS], ids=[b[0] for b in BAD_TOKENS]
)
def test_bad_token_uploads_get_a_clear_422(
    sqlite_client: TestClient, arrays: dict[str, Any], words: str
) -> None:
    response = upload(sqlite_client, npz(**arrays), kind="tokens")
    assert response.status_code == 422, response.text
    assert words in response.json()["detail"]
    assert stored_files() == []


def test_tokens_come_in_an_npz_and_kind_is_checked(sqlite_client: TestClient) -> None:
    csv = upload(sqlite_client, b"a,y\n1,0\n2,1\n", "t.csv", label_column="y", kind="tokens")
    assert csv.status_code == 422 and "needs integer token ids (.npz)" in csv.json()["detail"]
    odd = upload(sqlite_client, npz(**tokens()), kind="words")
    assert odd.status_code == 422 and odd.json()["errors"][0]["field"] == "kind", odd.text
    assert stored_files() == []


def graph(*layers: dict[str, Any]) -> dict[str, Any]:
    return {"type": "graph", "layers": list(layers)}


EMBED = {"name": "emb", "op": "embedding", "vocab_size": 12, "dim": 4}
LSTM = {"name": "rnn", "op": "lstm", "units": 4}


def test_a_job_on_token_data_is_checked_against_its_vocabulary(clients: Client) -> None:
    client = clients(make_key("owner"))
    token_set = upload(client, npz(**tokens()), kind="tokens").json()["id"]
    value_set = upload(client, npz(**tokens())).json()["id"]
    small = {**EMBED, "vocab_size": 11}
    cases = [
        ({"id": value_set}, graph(EMBED, LSTM), "embedding 'emb': takes token ids; its input (7,)"),
        ({"id": token_set}, graph(small, LSTM), "holds ids up to 11; vocab_size 11 must be at"),
        ({"id": token_set}, {"hidden_units": [8]}, "its input (7,) token ids; put an embedding"),
        ({"id": token_set, "normalize": "standard"}, graph(EMBED, LSTM), "dataset.normalize"),
    ]
    for dataset, model, words in cases:
        response = submit(client, dataset=dataset, model=model)
        assert response.status_code == 422, (model, response.text)
        assert words in response.json()["detail"], response.text
    for model in (graph(EMBED, LSTM), graph(EMBED, {**LSTM, "op": "gru"})):
        ok = submit(client, dataset={"id": token_set}, model=model)
        assert ok.status_code == 201, ok.text


def test_token_ids_are_planned_as_stored_int32_not_as_sent(
    sqlite_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """uint8 ids take a byte each as sent and four once stored: the limit holds the stored."""
    from app.main import create_app

    monkeypatch.setenv("EPOCHAL_MAX_UPLOAD_ARRAY_BYTES", "65536")
    get_settings.cache_clear()
    x = np.random.default_rng(0).integers(0, 12, (1000, 30), dtype=np.uint8)
    y = np.arange(1000) % 2
    assert x.nbytes + y.nbytes < 65536 < 4 * x.nbytes
    with TestClient(create_app(), raise_server_exceptions=False) as client:
        client.headers["Authorization"] = f"Bearer {make_key('tokens')}"
        refused = upload(client, npz(x=x, y=y), kind="tokens")
        assert refused.status_code == 413, refused.text
        assert f"take {4 * x.nbytes + y.nbytes} bytes once stored" in refused.json()["detail"]
        assert stored_files() == []
        values = upload(client, npz(x=x, y=y))  # the same bytes as values stay uint8
        assert values.status_code == 201, values.text


def test_a_stored_upload_past_2_gib_is_recorded(pg_env: dict[str, str]) -> None:
    """size_bytes is 64-bit: an int4 column refused the row of a stored 5 GiB upload."""
    from app.core.db import session_scope
    from app.domain import datasets
    from app.domain.keys import create_key
    from app.domain.tables import Dataset

    size = 5 * 2**30
    with session_scope() as session:
        owner = create_key(session, "big")[0]
        session.add(
            Dataset(
                id="big-upload", name="big", owner_id=owner.id, format="npz",
                task="classification", shape=[30], dtype="int32", samples=10**7,
                size_bytes=size, checksum="0" * 64,
            )
        )  # fmt: skip
    with session_scope() as session:
        assert session.get(Dataset, "big-upload").size_bytes == size  # type: ignore[union-attr]
        assert datasets.stored_bytes(session, owner.id) >= size
