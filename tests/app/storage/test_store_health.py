"""The store's state in /healthz, /readyz and /metrics: a real SeaweedFS that answers, an
endpoint where nothing listens, and a bucket that does not exist."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from app.storage.health import StoreWatch, probe
from app.storage.registry import open_store
from tests.helpers import clear_caches, free_port, scaled, wait_until
from tests.storage_server import BUCKET, SeaweedServer


def test_probe_tells_ok_down_and_refused_apart(
    seaweed: SeaweedServer, s3_env: None, tmp_path: Path
) -> None:
    assert probe(open_store((tmp_path / "none-yet").as_uri(), quick=True)).status == "ok"
    assert probe(open_store(f"s3://{BUCKET}/p", seaweed.endpoint, quick=True)).status == "ok"
    missing = open_store("s3://no-such-bucket-here/p", seaweed.endpoint, quick=True)
    assert probe(missing).status == "error"
    nobody = f"http://127.0.0.1:{free_port()}"
    began = time.monotonic()
    down = probe(open_store(f"s3://{BUCKET}/p", nobody, quick=True))
    assert down.status == "unavailable"
    # One try, not the service's retries: a refused connection shows at once.
    assert time.monotonic() - began < scaled(10) and down.seconds <= time.monotonic() - began


def test_a_watch_probes_at_most_once_per_period(tmp_path: Path) -> None:
    counted = CountingStore(open_store(tmp_path.as_uri()))
    watch = StoreWatch(counted, every=3600)  # type: ignore[arg-type]
    assert watch.state.status == "unknown"
    for _ in range(5):
        assert watch.refresh().status == "ok"
    assert counted.listings == 1
    watch.every = 0.0  # stale at once: the next read probes again
    watch.refresh()
    assert counted.listings == 2


def test_healthz_never_waits_and_shows_the_last_probe(tmp_path: Path) -> None:
    counted = CountingStore(open_store(tmp_path.as_uri()))
    watch = StoreWatch(counted, every=3600)  # type: ignore[arg-type]
    assert watch.last().status == "unknown"  # answered at once; a probe starts behind it
    wait_until(lambda: watch.last().status == "ok", scaled(10), "the background probe")
    assert counted.listings == 1


@pytest.mark.parametrize("where", ["answers", "nobody"])
def test_probes_and_metrics_show_the_store(
    where: str,
    seaweed: SeaweedServer,
    s3_env: None,
    sqlite_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from app.main import create_app

    endpoint = seaweed.endpoint if where == "answers" else f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("EPOCHAL_STORE_URL", f"s3://{BUCKET}/health")
    monkeypatch.setenv("EPOCHAL_STORE_ENDPOINT", endpoint)
    clear_caches()
    expected = "ok" if where == "answers" else "unavailable"
    with TestClient(create_app(), raise_server_exceptions=False) as client:
        ready = client.get("/readyz")
        # The store is shown, never required: the API serves without it.
        assert ready.status_code == 200, ready.text
        assert ready.json()["store"] == expected
        assert client.get("/healthz").json() == {"status": "ok", "store": expected}
        families = {f.name: f for f in text_string_to_metric_families(client.get("/metrics").text)}
    assert families["epochal_store_up"].samples[0].value == (1.0 if expected == "ok" else 0.0)
    states = {s.labels["state"]: s.value for s in families["epochal_store_state"].samples}
    assert states[expected] == 1.0 and sum(states.values()) == 1.0
    assert families["epochal_store_probe_seconds"].samples[0].value >= 0.0


class CountingStore:
    """A real store that counts its listings (what a probe does)."""

    def __init__(self, inner: object) -> None:
        self.inner, self.listings = inner, 0

    def list_objects(self, prefix: str = "") -> object:
        self.listings += 1
        return self.inner.list_objects(prefix)  # type: ignore[attr-defined]
