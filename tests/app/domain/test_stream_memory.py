"""What a training process holds of a sharded data set (pure): the reader's budget, cut to
half of a fixed per-process memory limit; the normalization's sample, bounded in bytes."""

from __future__ import annotations

from app.core.config import Settings
from app.domain.stream_memory import (
    STAT_BYTES,
    STAT_ROWS,
    held_bytes,
    reader_bytes,
    statistics_rows,
)

MIB = 2**20


def settings(**values: object) -> Settings:
    return Settings.model_validate(values)


def test_the_reader_takes_the_setting_the_spec_and_half_a_fixed_limit_whichever_is_least() -> None:
    assert reader_bytes(settings(stream_ram_bytes=1024 * MIB), None) == 1024 * MIB
    assert reader_bytes(settings(stream_ram_bytes=1024 * MIB), 300) == 300 * MIB
    fixed = settings(stream_ram_bytes=1024 * MIB, job_memory_limit_bytes=1152 * MIB)
    assert reader_bytes(fixed, None) == 576 * MIB
    assert reader_bytes(fixed, 300) == 300 * MIB
    # Limits off: nothing holds the process to the figure, so it cuts nothing.
    off = settings(job_memory_limit="off", job_memory_limit_bytes=1152 * MIB)
    assert reader_bytes(off, None) == off.stream_ram_bytes


def test_the_statistics_sample_is_every_row_of_small_samples_and_fewer_of_large_ones() -> None:
    assert statistics_rows(784) == STAT_ROWS  # Fashion-MNIST: 31 MB as float32
    assert statistics_rows(4096) == STAT_BYTES // (4096 * 4) < STAT_ROWS
    assert statistics_rows(224 * 224 * 3) * 224 * 224 * 3 * 4 <= STAT_BYTES
    assert statistics_rows(10**9) == 1


def test_a_process_holds_the_reader_and_the_sample_as_stored_and_as_float32() -> None:
    fixed = settings(job_memory_limit_bytes=1152 * MIB)
    rows = statistics_rows(4096)
    assert held_bytes(fixed, None, 4096, 1) == 576 * MIB + rows * 4096 * (1 + 4)
