"""The scheduler's decision time per free slot: which of 10,000 queued jobs a free worker runs.

In-process against PostgreSQL: 10,000 queued jobs over 20 keys and 101 priorities (or all at
one priority, where fair share decides among every key), a day of finished runs per key in
the fair-share window; each decision is app.scheduler.claim.next_job in its own transaction,
rolled back so the queue stays the same, and the claim (pick + UPDATE + transition) likewise.
"""

from __future__ import annotations

import random
import statistics
import time
from datetime import timedelta
from typing import Any

from sqlalchemy import insert
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from app.core.config import Settings
from app.domain.tables import ApiKey, Job, UsageSpan, utcnow
from app.scheduler.claim import claim_next, next_job
from benchmarks.service.seed import job_rows
from benchmarks.service.stack import bench_env, engine_for

KEYS = 20


def seed(engine: Engine, queued: int, priorities: int) -> None:
    """The keys, `queued` jobs at `priorities` levels, and 50 finished runs per key."""
    rng, now = random.Random(7), utcnow()
    keys = [f"{k:012x}" for k in range(KEYS)]
    rows = job_rows(queued, 0, status="queued")
    for row in rows:
        row |= {"owner_id": rng.choice(keys), "priority": rng.randrange(priorities), "attempt": 0}
    runs = [
        {
            "job_id": f"run-{k}-{i}",
            "owner_id": key,
            "slots": 1,
            "started": (now - timedelta(minutes=30 * i + 20)).timestamp(),
            "ended": (now - timedelta(minutes=30 * i)).timestamp(),
        }
        for k, key in enumerate(keys)
        for i in range(50)
    ]
    with engine.begin() as conn:
        conn.execute(insert(ApiKey), [{"id": k, "name": k, "secret_hash": "x"} for k in keys])
        conn.execute(insert(UsageSpan), runs)
        for begin in range(0, len(rows), 5000):
            conn.execute(insert(Job), rows[begin : begin + 5000])
        conn.exec_driver_sql("ANALYZE")


def timed(make: sessionmaker[Session], step: Any, repeat: int) -> dict[str, float]:
    """p50 and p99 milliseconds of `step(session)`, each in a transaction rolled back."""
    times = []
    for _ in range(repeat):
        with make() as session:
            started = time.perf_counter()
            assert step(session) is not None
            times.append((time.perf_counter() - started) * 1000)
            session.rollback()
    times.sort()
    return {"p50_ms": statistics.median(times), "p99_ms": times[int(len(times) * 0.99) - 1]}


def measure(queued: int = 10_000, repeat: int = 300) -> dict[str, dict[str, float]]:
    """Decision and claim times with jobs over 101 priorities and with all at one."""
    out = {}
    for label, priorities in (("spread", 101), ("one_priority", 1)):
        with bench_env("postgres") as env:
            engine = engine_for(env)
            seed(engine, queued, priorities)
            out |= _measure_one(
                engine, Settings(database_url=env["EPOCHAL_DATABASE_URL"]), label, repeat
            )
            engine.dispose()
    return out


def _measure_one(
    engine: Engine, settings: Settings, label: str, repeat: int
) -> dict[str, dict[str, float]]:
    make = sessionmaker(engine)

    def decide(session: Session) -> str | None:
        return next_job(session, 0, settings, utcnow())

    def claim(session: Session) -> Any:
        return claim_next(session, "bench", 0, settings)

    return {
        f"decide_{label}": timed(make, decide, repeat),
        f"claim_{label}": timed(make, claim, repeat),
    }
