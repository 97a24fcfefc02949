"""Settings: every knob comes from an EPOCHAL_* environment variable (pydantic-settings).

The embedded default needs no server: SQLite and a Kombu filesystem broker, both under
EPOCHAL_HOME. Pointing EPOCHAL_DATABASE_URL at postgresql+psycopg://… and EPOCHAL_BROKER_URL at
redis://… gives the production setup with the same code.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

# A key's storage quota under EPOCHAL_PRODUCTION when EPOCHAL_MAX_STORAGE_BYTES_PER_KEY is unset:
# a few-KB compressed upload can be stored as 1 GB, so a server open to many keys needs one.
PRODUCTION_STORAGE_BYTES_PER_KEY = 100 * 10**9


class Settings(BaseSettings):
    """Service settings; the job's hyper-parameters never come from here, only from its spec."""

    model_config = SettingsConfigDict(env_prefix="EPOCHAL_", extra="ignore")

    home: Path = Field(Path(".epochal"), description="State directory of the embedded default.")
    database_url: str | None = Field(None, description="SQLAlchemy URL; default SQLite in home.")
    broker_url: str | None = Field(None, description="Celery broker; default filesystem in home.")
    production: bool = Field(
        False,
        description="The server verbs refuse SQLite, the filesystem broker and default passwords.",
    )
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    data_dir: Path | None = Field(None, description="Where data sets and uploads live.")
    artifacts_dir: Path | None = Field(None, description="Models, checkpoints and logs per job.")
    store_url: str | None = Field(
        None,
        pattern=r"^(file|s3)://",
        description="Where artifacts are stored: s3://bucket/prefix or file:///folder "
        "(default: the artifacts directory).",
    )
    store_endpoint: str | None = Field(
        None,
        pattern=r"^https?://",
        description="The S3 API's address for a store other than AWS (SeaweedFS, MinIO).",
    )
    store_presign_seconds: int = Field(
        0,
        ge=0,
        le=7 * 86_400,
        description="With an S3 store, > 0: model downloads answer 307 to a URL of the store "
        "signed for this many seconds, so the bytes do not pass through the API (clients must "
        "reach EPOCHAL_STORE_ENDPOINT); 0: the API streams them.",
    )
    store_wait_seconds: float = Field(
        300.0,
        gt=0,
        le=86_400,
        description="How long an attempt waits for a store that is down: at its start (to find "
        "the job's latest checkpoint) and at its end (to put the model); then it fails, retried.",
    )
    store_clean_grace_seconds: float = Field(
        3600.0,
        ge=60,
        description="The cleaner leaves checkpoint prefixes without a manifest and multipart "
        "uploads alone until this old: keep it above the time one checkpoint takes to upload.",
    )
    allow_download: bool = Field(False, description="May built-in data sets be downloaded?")
    download_mirror: str | None = Field(
        None,
        pattern=r"^https?://",
        description="Fetch built-in data sets from {mirror}/{name}/{file}.gz instead of the "
        "canonical mirrors (an in-house copy, or a local server in tests).",
    )

    # Worker side.
    worker_gpus: str | None = Field(
        None, description="GPU ids this worker owns (else CUDA_VISIBLE_DEVICES)."
    )
    worker_name: str | None = None
    warm_frameworks: str = Field(
        "pytorch,tensorflow",
        description="Frameworks whose next training process a worker starts ahead of time.",
    )
    pytorch_python: str | None = Field(
        None, description="Interpreter of PyTorch training processes (default: the worker's)."
    )
    tensorflow_python: str | None = Field(
        None, description="Interpreter of TensorFlow training processes (default: the worker's)."
    )
    worker_cpus: int | None = Field(
        None,
        ge=1,
        le=4096,
        description="CPU threads its training processes share (default: its CPUs less one).",
    )
    job_memory_limit: Literal["auto", "watchdog", "off"] = Field(
        "auto",
        description="Each training process's memory limit: auto (a cgroup where the worker may "
        "make one, else a resident-memory watchdog), watchdog, or off.",
    )
    job_memory_margin: float = Field(
        1.0,
        ge=0,
        le=100,
        description="The limit is the job's admitted memory estimate times 1 + this.",
    )
    job_memory_limit_bytes: int | None = Field(
        None,
        ge=2**20,
        description="A fixed limit for every training process instead (unset: from the estimate); "
        "a streaming reader then takes at most half of it.",
    )
    cache_dir: Path | None = Field(
        None,
        description="What a worker measures once per machine and keeps across restarts "
        "(TensorFlow's small-step threads); default: $XDG_CACHE_HOME/epochal, "
        "else ~/.cache/epochal.",
    )
    worker_address: str | None = Field(
        None,
        description="Address a multi-node job's other workers reach this one at (default: the "
        "interface that routes to the database).",
    )
    stream_ram_bytes: int = Field(
        1024**3,
        ge=16 * 1024**2,
        description="Memory a training process's streaming reader may hold for a sharded data "
        "set: whole shards and the batches in flight (a job's dataset.stream_ram_mb may lower it).",
    )
    ingest_shard_bytes: int = Field(
        64 * 1024**2,
        ge=4096,
        description="About how many bytes each shard an ingest writes holds (tens of MB: one "
        "ranged GET and one cache entry each; small ones make a small data set several shards).",
    )
    collective_timeout_seconds: float = Field(
        120.0,
        gt=0,
        le=3600,
        description="A collective (DDP or TensorFlow multi-worker) or PyTorch's rendezvous "
        "waiting longer fails the attempt.",
    )
    heartbeat_seconds: float = Field(5.0, gt=0, le=300)
    lease_seconds: float = Field(
        30.0, gt=0, le=3600, description="A job whose lease is this old is re-queued."
    )
    cancel_grace_seconds: float = Field(
        20.0, gt=0, le=3600, description="A child asked to stop gets this long, then SIGTERM."
    )
    kill_grace_seconds: float = Field(
        10.0, gt=0, le=600, description="After SIGTERM, this long until SIGKILL."
    )
    dispatch_retry_seconds: float = Field(
        60.0, gt=0, description="Re-send queued jobs not picked up for this long."
    )
    maintenance_seconds: float = Field(5.0, gt=0, le=600)

    # The scheduler (app.scheduler): fair share between keys and preemption.
    fair_share_window_seconds: float = Field(
        86_400.0, gt=0, description="Fair share compares keys' GPU-seconds over this window."
    )
    fair_share_tolerance: float = Field(
        0.25,
        ge=0,
        le=100,
        description="Keys whose usage is within this fraction of the least count as level: "
        "the one that started a job longest ago goes next.",
    )
    preempt_margin: int = Field(
        20,
        ge=1,
        le=100,
        description="A queued job preempts a running one whose priority is this much lower.",
    )

    # PostgreSQL connections (RELIABILITY.md §11): none of them may wait forever.
    db_connect_timeout_seconds: int = Field(
        10, ge=2, le=300, description="Give up opening a PostgreSQL connection after this."
    )
    db_statement_timeout_seconds: float = Field(
        30.0,
        gt=0,
        le=3600,
        description="The server ends a statement (or a transaction left idle) running longer.",
    )
    db_keepalive_seconds: int = Field(
        10, ge=1, le=600, description="TCP keepalive probe interval; 3 unanswered: dead."
    )

    # Limits at the door.
    max_body_bytes: int = Field(1_000_000, ge=1024)
    max_upload_bytes: int = Field(200_000_000, ge=1024)
    max_upload_array_bytes: int = Field(
        1_000_000_000,
        ge=1024,
        description="Arrays of one upload as stored (x as float32 or uint8, token ids as int32), "
        "CSV too.",
    )
    max_uploads_per_key: int = Field(
        2,
        ge=1,
        le=1000,
        description="Uploads one key may send at once to each API process; the next gets 429.",
    )
    max_storage_bytes_per_key: int | None = Field(
        None,
        ge=0,
        description="Uploads and job artifacts one key may keep in all (unset: "
        "PRODUCTION_STORAGE_BYTES_PER_KEY with EPOCHAL_PRODUCTION, else no quota; 0: no quota).",
    )

    dataset_upload_expiry_seconds: float = Field(
        86_400.0,
        ge=60,
        description="A resumable upload no part has reached for this long is aborted, its parts "
        "deleted.",
    )
    max_dataset_part_bytes: int = Field(
        64 * 2**20,
        ge=5 * 2**20,
        le=2**30,
        description="One part of a resumable upload, held in memory while it is stored.",
    )
    data_roots: Annotated[list[Path], NoDecode] = Field(
        default_factory=list,
        description="Directories whose files may be registered as data sets by reference "
        "(comma-separated); nothing outside them is ever read.",
    )

    store_data_prefix: str = Field(
        "data/",
        pattern=r"^([\w.\-]+/)+$",
        description="Where in the store data sets may be registered from by reference "
        "(s3://…); the service's own keys (jobs, data sets) are never readable that way.",
    )

    max_job_memory_bytes: int | None = Field(
        None,
        ge=2**20,
        description="Refuse a job whose estimated peak host memory exceeds this (default: "
        "the largest live worker's memory, else this machine's).",
    )

    max_active_jobs_per_key: int = Field(
        50, ge=0, description="Queued + running jobs one key may have (0: no limit)."
    )
    max_open_sweeps_per_key: int = Field(
        20,
        ge=0,
        description="Unfinished sweeps one key may have; the next is a 429 (0: no limit).",
    )
    api_key_file: Path | None = Field(None, description="Where `epochal up` puts the admin key.")

    metrics_token: str | None = Field(
        None, min_length=16, description="When set, /metrics needs Authorization: Bearer <it>."
    )

    # Retention: nothing is removed unless asked.
    retention_days: float | None = Field(
        None, gt=0, description="Prune checkpoints of jobs finished this long ago (off: unset)."
    )
    retention_delete_jobs: bool = Field(
        False, description="With EPOCHAL_RETENTION_DAYS: delete those jobs whole instead."
    )
    retention_interval_seconds: float = Field(
        3600, gt=0, description="How often each process applies the retention."
    )
    max_log_bytes: int = Field(
        50_000_000, ge=0, description="A job's log past this keeps its newest half (0: no cap)."
    )

    log_json: bool = Field(False, description="Log JSON lines (with the job id) instead of text.")
    max_streams_per_key: int = Field(
        32,
        ge=1,
        le=100_000,
        description="Live event streams one key may hold open in each API process; then 429.",
    )
    events_poll_seconds: float = Field(
        0.5, gt=0, le=60, description="How often each API process reads new job events for SSE."
    )

    # Predictions (POST /v1/jobs/{id}/predict), served from each job's model.onnx.
    max_predict_rows: int = Field(1024, ge=1, le=1_000_000, description="Rows per request.")
    predict_cache_sessions: int = Field(
        8, ge=1, le=1024, description="ONNX Runtime sessions each API process keeps loaded."
    )
    predict_threads: int = Field(
        1, ge=1, le=64, description="Intra-op threads of each session (one suits a small machine)."
    )
    predict_concurrency: int = Field(
        2, ge=1, le=256, description="Predictions each API process runs at once; then 503."
    )
    max_predict_flops: int = Field(
        20 * 10**9,
        ge=10**6,
        description="FLOPs one predict request may cost: rows x the model's FLOPs per row.",
    )
    max_predict_bytes: int = Field(
        256 * 2**20,
        ge=2**20,
        description="Memory one predict request may hold: rows x the model's activations per "
        "row (its input and every layer's output, float32), what ONNX Runtime may hold at once.",
    )

    @field_validator("data_roots", mode="before")
    @classmethod
    def _split_roots(cls, value: object) -> object:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @model_validator(mode="after")
    def _lease_outlives_heartbeats(self) -> Settings:
        # A lease shorter than two heartbeats would let the reaper re-queue healthy jobs.
        if self.lease_seconds < 2 * self.heartbeat_seconds:
            raise ValueError(
                f"EPOCHAL_LEASE_SECONDS ({self.lease_seconds}) must be at least twice "
                f"EPOCHAL_HEARTBEAT_SECONDS ({self.heartbeat_seconds})"
            )
        return self

    @property
    def storage_quota_bytes(self) -> int | None:
        """What one key may store in all; None: no quota (see max_storage_bytes_per_key)."""
        if self.max_storage_bytes_per_key is None:
            return PRODUCTION_STORAGE_BYTES_PER_KEY if self.production else None
        return self.max_storage_bytes_per_key or None

    @property
    def fixed_job_memory_limit(self) -> int | None:
        """EPOCHAL_JOB_MEMORY_LIMIT_BYTES where limits are on: every training process's
        limit, known before its job is (None: off, or each job's from its estimate)."""
        return None if self.job_memory_limit == "off" else self.job_memory_limit_bytes

    @property
    def resolved_home(self) -> Path:
        return self.home.expanduser().resolve()

    @property
    def sqlalchemy_url(self) -> str:
        return self.database_url or f"sqlite:///{self.resolved_home / 'epochal.db'}"

    @property
    def celery_broker_url(self) -> str:
        return self.broker_url or "filesystem://"

    @property
    def broker_folder(self) -> Path:
        """Folder of the filesystem broker (embedded default only)."""
        return self.resolved_home / "broker"

    @property
    def resolved_data_dir(self) -> Path:
        return (self.data_dir or self.resolved_home / "data").expanduser().resolve()

    @property
    def resolved_artifacts_dir(self) -> Path:
        return (self.artifacts_dir or self.resolved_home / "artifacts").expanduser().resolve()

    @property
    def resolved_store_url(self) -> str:
        return self.store_url or self.resolved_artifacts_dir.as_uri()

    @property
    def resolved_cache_dir(self) -> Path:
        """Shared by every worker and test run on the machine, unlike home: measured once each."""
        default = Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache") / "epochal"
        return (self.cache_dir or default).expanduser().resolve()

    def python_for(self, framework: str) -> str | None:
        """The interpreter that runs this framework's training processes (None: the worker's;
        the worker image gives each framework an environment of its own, see the Dockerfile)."""
        return {"pytorch": self.pytorch_python, "tensorflow": self.tensorflow_python}[framework]

    @property
    def worker_gpu_ids(self) -> list[str]:
        """GPUs this worker owns: EPOCHAL_WORKER_GPUS, else CUDA_VISIBLE_DEVICES."""
        raw = self.worker_gpus
        if raw is None:
            raw = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        return [g.strip() for g in raw.split(",") if g.strip() and g.strip() != "-1"]

    @property
    def resolved_api_key_file(self) -> Path:
        return (self.api_key_file or self.resolved_home / "api-key").expanduser().resolve()

    @property
    def up_pids_file(self) -> Path:
        """Where `epochal up` records the processes it started (app.core.children)."""
        return self.resolved_home / "up.pids.json"


@lru_cache
def get_settings() -> Settings:
    """The process-wide settings, read once from the environment."""
    return Settings()
