"""The unauthenticated probes cannot degrade the service: /metrics and /readyz have their own
small bound on concurrent work, /metrics reads running totals (never epoch_metric), and
EPOCHAL_METRICS_TOKEN makes /metrics require a bearer token."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from app.api.probes import PROBE_SLOTS
from app.core.config import get_settings
from app.core.db import session_scope
from app.domain import crud, epoch_rows
from app.domain.tables import EpochMetric
from app.schemas.job_spec import JobSpec
from tests.helpers import wait_until

TOKEN = "s3cret-scraper-token"


@pytest.fixture
def client(db_env: dict[str, str]) -> Iterator[TestClient]:
    from app.main import create_app

    with TestClient(create_app(), raise_server_exceptions=False) as test_client:
        yield test_client


def series(text: str, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    raise AssertionError(f"no sample {name} {labels}")


def test_epoch_series_come_from_totals_not_a_scan(client: TestClient) -> None:
    spec = JobSpec.model_validate({"framework": "pytorch", "dataset": {"name": "digits"}})
    with session_scope() as session:
        job = crud.create_job(session, spec, "gpus-0")
    with session_scope() as session:
        assert crud.claim_job(session, job.id, "w1", lease_seconds=30) is not None
    with session_scope() as session:
        for epoch, seconds, wait, read in (
            (1, 0.05, 0.01, 3000.0),
            (2, 0.7, 0.25, 0.0),
            (3, None, None, None),
        ):
            logs = {"train_loss": 1.0, "epoch_seconds": seconds, "data_wait_seconds": wait}
            hits, misses = (None, None) if read is None else (epoch - 1.0, 2.0 - epoch)
            logs |= {"data_read_bytes": read, "data_cache_hits": hits, "data_cache_misses": misses}
            assert epoch_rows.record_epoch(session, job.id, 1, epoch, logs)
    with session_scope() as session:  # the totals stand on their own: no epoch row is read
        session.execute(sa.delete(EpochMetric))
    text = client.get("/metrics").text
    pytorch = {"framework": "pytorch"}
    assert series(text, "epochal_epochs_finished_total", **pytorch) == 3
    assert series(text, "epochal_epoch_duration_seconds_count", **pytorch) == 2  # two timed
    assert series(text, "epochal_epoch_duration_seconds_bucket", le="0.1", **pytorch) == 1
    assert series(text, "epochal_epoch_duration_seconds_bucket", le="1.0", **pytorch) == 2
    assert series(text, "epochal_epoch_duration_seconds_sum", **pytorch) == pytest.approx(0.75)
    assert series(text, "epochal_epochs_finished_total", framework="tensorflow") == 0
    # a streamed epoch's input wait, summed (an in-memory epoch's is null: none)
    assert series(text, "epochal_epoch_data_wait_seconds_total", **pytorch) == pytest.approx(0.26)
    assert series(text, "epochal_epoch_data_read_bytes_total", **pytorch) == 3000
    assert series(text, "epochal_epoch_data_cache_hits_total", **pytorch) == 1
    assert series(text, "epochal_epoch_data_cache_misses_total", **pytorch) == 1
    assert series(text, "epochal_epoch_data_read_bytes_total", framework="tensorflow") == 0


def test_the_metrics_token_is_required_when_set(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert client.get("/metrics").status_code == 200
    monkeypatch.setenv("EPOCHAL_METRICS_TOKEN", TOKEN)
    get_settings.cache_clear()
    assert client.get("/metrics").status_code == 401
    wrong = client.get("/metrics", headers={"Authorization": "Bearer not-the-token-at-all"})
    assert wrong.status_code == 401 and wrong.headers["content-type"] == "application/problem+json"
    good = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert good.status_code == 200 and "epochal_jobs" in good.text
    assert client.get("/readyz").status_code == 200  # a load balancer needs no token


def test_excess_concurrent_probes_get_503_while_others_are_served(pg_env: dict[str, str]) -> None:
    from app.main import create_app

    blocker = sa.create_engine(pg_env["EPOCHAL_DATABASE_URL"])
    with TestClient(create_app(), raise_server_exceptions=False) as client:
        # Hold a lock every probe query waits on, so the probes in flight stay in flight.
        with blocker.connect() as conn:
            conn.execute(sa.text("LOCK TABLE job IN ACCESS EXCLUSIVE MODE"))
            answers: list[int] = []
            probes = [
                threading.Thread(target=lambda: answers.append(client.get("/metrics").status_code))
                for _ in range(PROBE_SLOTS)
            ]
            for probe in probes:
                probe.start()
            wait_until(
                lambda: waiting(blocker) >= PROBE_SLOTS, 30, "the probes blocked on the lock"
            )
            for path in ("/metrics", "/readyz"):  # one bound for both
                extra = client.get(path)
                assert extra.status_code == 503 and extra.headers["retry-after"] == "1"
            assert client.get("/healthz").status_code == 200
            conn.commit()
        for probe in probes:
            probe.join()
    blocker.dispose()
    assert answers == [200] * PROBE_SLOTS


def waiting(engine: sa.Engine) -> int:
    """Sessions of this database waiting for a lock (a fresh transaction: pg_stat_activity is
    a snapshot per transaction)."""
    query = sa.text(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND wait_event_type = 'Lock'"
    )
    with engine.connect() as conn:
        return int(conn.execute(query).scalar_one())
