"""What a training process holds of a sharded data set, which it streams instead of loading:
its streaming reader's budget and the sample its normalization is measured on. The cost
estimate (app.domain.cost) counts these, not the whole data set, so a data set larger than
any worker's memory is admitted; the reader (worker.training.data.streamed) keeps to them.

The reader's budget is EPOCHAL_STREAM_RAM_BYTES, lowered by the spec's dataset.stream_ram_mb,
and, where every training process has the same fixed memory limit
(EPOCHAL_JOB_MEMORY_LIMIT_BYTES), by READER_SHARE of it: the rest is the framework's, the
model's, the batches' and the statistics sample's. A limit set from the job's estimate needs
no such cut, since the estimate counts the budget.
"""

from __future__ import annotations

from app.core.config import Settings

MIB = 2**20
READER_SHARE = 0.5  # of a fixed per-process memory limit
# The normalization's sample: at most STAT_ROWS rows and STAT_BYTES of them as float32, so
# data sets of large samples (images) measure on fewer rows instead of more memory.
STAT_ROWS, STAT_BYTES = 10_000, 64 * MIB
FLOAT32 = 4


def reader_bytes(settings: Settings, stream_ram_mb: int | None) -> int:
    """The streaming reader's budget in bytes."""
    budget = settings.stream_ram_bytes
    if stream_ram_mb:
        budget = min(budget, stream_ram_mb * MIB)
    fixed = settings.fixed_job_memory_limit
    return budget if fixed is None else min(budget, int(fixed * READER_SHARE))


def statistics_rows(values_per_sample: int) -> int:
    """How many training rows the normalization's statistics are measured on, at most."""
    return max(1, min(STAT_ROWS, STAT_BYTES // max(1, values_per_sample * FLOAT32)))


def held_bytes(
    settings: Settings, stream_ram_mb: int | None, values_per_sample: int, itemsize: int
) -> int:
    """The most a training process holds of a sharded data set: the reader's budget and the
    statistics sample, as stored and as float32."""
    sample = statistics_rows(values_per_sample) * values_per_sample * (itemsize + FLOAT32)
    return reader_bytes(settings, stream_ram_mb) + sample
