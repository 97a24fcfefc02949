"""SQLAlchemy 2 tables; Alembic migrations under migrations/ are the only way they change."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy import true as sa_true
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from app.domain.states import JobStatus, SweepStatus
from app.schemas.ids import new_id
from app.schemas.metric_row import METRIC_FIELDS
from app.schemas.priority import PRIORITY_DEFAULT

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every backend (SQLite stores them naive)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("naive datetime; use app.domain.tables.utcnow()")
        return value.astimezone(UTC) if value is not None else None

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map = {datetime: UTCDateTime, dict[str, Any]: JSON}


class Job(Base):
    """One training job; the row is the source of truth for status, attempt and lease."""

    __tablename__ = "job"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(128))
    framework: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16), default=JobStatus.queued)
    spec: Mapped[dict[str, Any]]
    queue: Mapped[str] = mapped_column(String(64))
    gpus: Mapped[int] = mapped_column(Integer, default=0)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    max_restarts: Mapped[int] = mapped_column(Integer, default=2)
    current_epoch: Mapped[int] = mapped_column(Integer, default=0)
    best_epoch: Mapped[int | None] = mapped_column(Integer)
    best_metric: Mapped[float | None] = mapped_column(Float)
    stop_reason: Mapped[str | None] = mapped_column(String(32))
    error_code: Mapped[str | None] = mapped_column(String(32))
    error: Mapped[str | None] = mapped_column(Text)
    result: Mapped[dict[str, Any] | None]
    worker_name: Mapped[str | None] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    dispatched_at: Mapped[datetime | None]
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    lease_expires_at: Mapped[datetime | None]
    cancel_requested_at: Mapped[datetime | None]
    owner_id: Mapped[str | None] = mapped_column(ForeignKey("api_key.id"), index=True)
    idempotency_key: Mapped[str | None] = mapped_column(String(255))
    request_hash: Mapped[str | None] = mapped_column(String(64))
    # A sweep's trial (app.services.sweeps): its sweep and Optuna trial number.
    sweep_id: Mapped[str | None] = mapped_column(ForeignKey("sweep.id"), index=True)
    sweep_trial: Mapped[int | None] = mapped_column(Integer)
    # Its artifacts in its key's storage quota: the estimate reserved at submit, then what its
    # directory holds once an attempt ends (migration 0006).
    disk_bytes: Mapped[int | None] = mapped_column(BigInteger)
    # Its estimated peak host memory as admitted (app.domain.cost; migration 0017): the claim
    # gives it only to a worker with that much, whose training process is limited from it.
    # Null while its data is unknown (a missing upload), and for jobs stored before.
    memory_bytes: Mapped[int | None] = mapped_column(BigInteger)
    # The built model's summary (parameters, FLOPs, layers with shapes), from its spec and its
    # data's sample shape at submit; null for jobs stored before migration 0007.
    model_summary: Mapped[dict[str, Any] | None]
    # The scheduler (app.scheduler, migration 0010): which queued job a free worker runs.
    priority: Mapped[int] = mapped_column(
        Integer, default=PRIORITY_DEFAULT, server_default=str(PRIORITY_DEFAULT)
    )
    preemptible: Mapped[bool] = mapped_column(Boolean, default=True, server_default=sa_true())
    # Set while a preemption of this job is asked and until it resumes: the job that asked.
    # The claim that resumes a preempted job keeps its attempt (and clears this).
    preempted_by: Mapped[str | None] = mapped_column(String(36))
    # The epoch in progress by steps (app.schemas.api.StepProgress), as the supervisor last
    # passed it on from its training child; null unless an attempt trains (migration 0011).
    step_progress: Mapped[dict[str, Any] | None]
    # Workers the job runs on at once (migration 0012): > 1 is a gang (app.scheduler.gang).
    nodes: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    # The newest checkpoint set whose manifest is in the store (its name under the job's
    # checkpoints, app.storage.checkpoint_sets), set by the attempt that wrote it once the
    # manifest landed; null before the first and once the retention removed them (migration
    # 0024). Never a set still being written.
    latest_checkpoint: Mapped[str | None] = mapped_column(String(64))

    __table_args__ = (
        Index("ix_job_created", "created_at", "id"),
        Index("ix_job_status_created", "status", "created_at"),
        Index("ix_job_queue", "status", "priority", "owner_id", "created_at"),
        UniqueConstraint("owner_id", "idempotency_key", name="uq_job_owner_idempotency_key"),
    )


class Sweep(Base):
    """A hyperparameter search; its trials are jobs, its sampling state is Optuna's tables."""

    __tablename__ = "sweep"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(128))
    owner_id: Mapped[str | None] = mapped_column(ForeignKey("api_key.id"), index=True)
    status: Mapped[str] = mapped_column(String(16), default=SweepStatus.running)
    spec: Mapped[dict[str, Any]]
    trials_launched: Mapped[int] = mapped_column(Integer, default=0)
    trials_ended: Mapped[int] = mapped_column(Integer, default=0)  # told to Optuna
    # Why no trial is launched now though one may be: the owner's limits (app.services.sweeps).
    wait_reason: Mapped[str | None] = mapped_column(Text)
    # Why it failed by itself: too many failed trials, or a top-up that raised (migration 0016).
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(index=True)

    __table_args__ = (Index("ix_sweep_created", "created_at", "id"),)


class JobTransition(Base):
    """Every status change of a job, with when and why."""

    __tablename__ = "job_transition"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("job.id", ondelete="CASCADE"), index=True)
    from_status: Mapped[str | None] = mapped_column(String(16))
    to_status: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text)
    attempt: Mapped[int] = mapped_column(Integer)
    at: Mapped[datetime] = mapped_column(default=utcnow)


class EpochMetric(Base):
    """One row per (job, epoch); an upsert, so a resumed attempt replaces, never doubles.

    Beside its keys, one nullable float column per app.schemas.metric_row.METRIC_FIELDS name,
    added below the class (getattr(EpochMetric, name) reads one)."""

    __tablename__ = "epoch_metric"

    job_id: Mapped[str] = mapped_column(ForeignKey("job.id", ondelete="CASCADE"), primary_key=True)
    epoch: Mapped[int] = mapped_column(Integer, primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer)
    recorded_at: Mapped[datetime] = mapped_column(default=utcnow)


for _name in METRIC_FIELDS:
    setattr(EpochMetric, _name, mapped_column(_name, Float, nullable=True))


class ApiKey(Base):
    """A client's key: only a SHA-256 of its secret is stored."""

    __tablename__ = "api_key"

    id: Mapped[str] = mapped_column(String(16), primary_key=True)
    name: Mapped[str] = mapped_column(String(128))
    secret_hash: Mapped[str] = mapped_column(String(64))
    is_admin: Mapped[bool] = mapped_column(default=False)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    revoked_at: Mapped[datetime | None]
    # Set by an admin (`epochal keys set-weight`, `set-max-priority`; migration 0010): the
    # key's share of the workers against other keys, and the highest priority it may ask.
    share_weight: Mapped[float] = mapped_column(Float, default=1.0, server_default="1.0")
    max_priority: Mapped[int | None] = mapped_column(Integer)


class UsageSpan(Base):
    """One attempt's time on a worker (open while it runs): fair share sums these per key."""

    __tablename__ = "job_run"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(String(36))  # no foreign key: usage outlives a job
    owner_id: Mapped[str | None] = mapped_column(String(16))
    slots: Mapped[int] = mapped_column(Integer)  # GPUs, or 1 for a CPU job (worker-seconds)
    # Unix seconds, so a key's usage is summed by the database on every backend.
    started: Mapped[float] = mapped_column(Float)
    ended: Mapped[float | None] = mapped_column(Float)

    __table_args__ = (
        Index("ix_job_run_owner_ended", "owner_id", "ended"),
        Index("ix_job_run_job_ended", "job_id", "ended"),
    )


class Dataset(Base):
    """A data set: one upload validated in its request and stored as .npz under the data dir
    (storage npz), or shards with an index in the store (storage shards), written by the
    ingest task from a resumable upload or a reference (`source`)."""

    __tablename__ = "dataset"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(128))
    owner_id: Mapped[str | None] = mapped_column(ForeignKey("api_key.id"), index=True)
    format: Mapped[str] = mapped_column(String(32))
    task: Mapped[str] = mapped_column(String(16))
    shape: Mapped[list[Any]] = mapped_column(JSON)
    dtype: Mapped[str] = mapped_column(String(16))
    samples: Mapped[int] = mapped_column(Integer)
    test_samples: Mapped[int | None] = mapped_column(Integer)
    classes: Mapped[int | None] = mapped_column(Integer)
    # Token data sets (x holds token ids, stored as int32): max id + 1; NULL for real values.
    vocab: Mapped[int | None] = mapped_column(Integer)
    size_bytes: Mapped[int] = mapped_column(BigInteger)  # a stored upload may pass 2 GiB
    checksum: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # ingesting, ready or failed; a data set stored in its upload request is ready at once.
    status: Mapped[str] = mapped_column(String(16), default="ready", server_default="ready")
    error: Mapped[str | None] = mapped_column(Text)  # failed: the file and the record
    storage: Mapped[str] = mapped_column(String(8), default="npz", server_default="npz")
    version: Mapped[str | None] = mapped_column(String(64))  # shards: the index's content hash
    source: Mapped[str | None] = mapped_column(Text)  # what the ingest reads
    label_column: Mapped[str | None] = mapped_column(String(256))  # CSV
    progress: Mapped[float | None] = mapped_column(Float)  # ingesting: the fraction read
    ingest_sent_at: Mapped[datetime | None]  # the ingest's message last published
    ingest_lease_at: Mapped[datetime | None]  # renewed while a worker ingests it

    @property
    def kind(self) -> str:
        """tokens (x holds token ids) or values (real values: features, images, sequences)."""
        return "values" if self.vocab is None else "tokens"


class DatasetUpload(Base):
    """A resumable upload in progress: a multipart upload in the store, one part a request.
    Completing it makes a Dataset and deletes this row; an expired one is aborted."""

    __tablename__ = "dataset_upload"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    owner_id: Mapped[str | None] = mapped_column(ForeignKey("api_key.id"), index=True)
    name: Mapped[str] = mapped_column(String(128))
    task: Mapped[str] = mapped_column(String(16))
    format: Mapped[str | None] = mapped_column(String(32))
    label_column: Mapped[str | None] = mapped_column(String(256))
    filename: Mapped[str] = mapped_column(String(128))
    total_bytes: Mapped[int] = mapped_column(BigInteger)
    sha256: Mapped[str] = mapped_column(String(64))
    store_key: Mapped[str] = mapped_column(Text)
    store_upload_id: Mapped[str] = mapped_column(Text)
    parts: Mapped[list[Any]] = mapped_column(JSON)  # [[number, etag, size], ...] in order
    received_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)


class EpochStat(Base):
    """Finished epochs per framework and duration bucket (app.domain.epoch_stats keeps them)."""

    __tablename__ = "epoch_stat"

    framework: Mapped[str] = mapped_column(String(16), primary_key=True)
    bucket: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    epochs: Mapped[int] = mapped_column(BigInteger)
    seconds_sum: Mapped[float] = mapped_column(Float)
    # Streamed epochs' input measures, summed (app.domain.epoch_stats.INPUT_SUMS): time
    # waiting for input (data_wait_seconds), bytes read, shard cache hits and misses.
    data_wait_sum: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    data_read_bytes_sum: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    data_cache_hits_sum: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    data_cache_misses_sum: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")


class SchedulerStat(Base):
    """Running totals of the scheduler per series and bucket (app.domain.scheduler_stats)."""

    __tablename__ = "scheduler_stat"

    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    bucket: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    count: Mapped[int] = mapped_column(BigInteger)
    seconds_sum: Mapped[float] = mapped_column(Float)


class Worker(Base):
    """A live Celery worker as its heartbeats describe it."""

    __tablename__ = "worker"

    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    hostname: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    gpus: Mapped[int] = mapped_column(Integer, default=0)
    devices: Mapped[list[Any]] = mapped_column(JSON)
    queues: Mapped[list[Any]] = mapped_column(JSON)
    started_at: Mapped[datetime] = mapped_column(default=utcnow)
    heartbeat_at: Mapped[datetime] = mapped_column(default=utcnow)
    current_job_id: Mapped[str | None] = mapped_column(String(36))
    # What the worker can give one job (admission compares a job's estimated cost with these).
    memory_bytes: Mapped[int | None] = mapped_column(BigInteger)
    disk_free_bytes: Mapped[int | None] = mapped_column(BigInteger)


class GangSeat(Base):
    """A worker's seat in a multi-node job's gang (app.scheduler.gang): forming while the job
    is queued, running once all `nodes` seats are held; each seat has a lease of its own."""

    __tablename__ = "gang_member"

    job_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    worker: Mapped[str] = mapped_column(String(255), primary_key=True)
    rank: Mapped[int] = mapped_column(Integer)  # the node's rank: 0 hosts the rendezvous
    attempt: Mapped[int | None] = mapped_column(Integer)  # set when the gang forms
    # The attempt's secret, set when the gang forms: every rank proves it to the rendezvous
    # store (worker.training.torch.gang_store). Workers read it; no route shows it.
    secret: Mapped[str | None] = mapped_column(String(64))
    address: Mapped[str | None] = mapped_column(String(255))  # offered; rank 0's: rendezvous
    port: Mapped[int | None] = mapped_column(Integer)
    # Where its worker runs (app.scheduler.gang_reach.machine_netns); the column keeps its name.
    machine_netns: Mapped[str | None] = mapped_column("host", String(255))
    local_only: Mapped[str | None] = mapped_column(String(32))  # reached from its machine only
    joined_at: Mapped[datetime] = mapped_column(default=utcnow)
    lease_expires_at: Mapped[datetime]
    # seated, done (its training process ended cleanly) or lost (it died, or failed)
    state: Mapped[str] = mapped_column(String(8), default="seated")

    __table_args__ = (UniqueConstraint("job_id", "rank", name="uq_gang_member_job_rank"),)


class RankLogLine(Base):
    """A line of a gang rank's job log (app.domain.rank_log says which ranks ship): each keeps
    its log in its own home, so its supervisor ships the lines here, where
    GET /v1/jobs/{id}/logs?rank=N reads them."""

    # The table and its rank column keep the names their migration gave them.
    __tablename__ = "member_log_line"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("job.id", ondelete="CASCADE"))
    rank: Mapped[int] = mapped_column("member", Integer)  # the node's rank
    line: Mapped[str] = mapped_column(Text)

    __table_args__ = (Index("ix_member_log_line_job_member", "job_id", "member", "id"),)


class StoredStanding(Base):
    """A queued job's standing as the scheduler last worked it out (app.scheduler.standings):
    the reads look it up here instead of working it out per request."""

    __tablename__ = "queue_standing"

    job_id: Mapped[str] = mapped_column(ForeignKey("job.id", ondelete="CASCADE"), primary_key=True)
    position: Mapped[int] = mapped_column(Integer)
    reason: Mapped[str] = mapped_column(Text)
    wait_reason: Mapped[str] = mapped_column(Text)
    estimated_start: Mapped[datetime | None]
    computed_at: Mapped[datetime]
