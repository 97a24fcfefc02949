"""`make bench-gpu` and `make gpu-smoke` on a machine without a GPU say so and exit 0; the
smoke run's plan and result table, which need no GPU."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from app.schemas.job_spec import JobSpec
from benchmarks.gpu_smoke import (
    HEADER,
    SmokeJob,
    all_succeeded,
    format_table,
    plan,
    result_row,
    run_jobs,
)
from tests.helpers import run_module


def test_gpu_benchmark_without_a_gpu_exits_0_saying_so() -> None:
    out = run_module(
        "benchmarks.gpu", env={"CUDA_VISIBLE_DEVICES": ""}, timeout=300
    )  # hidden where installed
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("machine: ") and "torch" in lines[0]  # both frameworks probed
    assert lines[-1] == "no GPU visible to PyTorch or TensorFlow here: nothing to measure (exit 0)"
    assert "BENCH" not in out.stdout  # no number is made up


def test_gpu_smoke_without_a_gpu_exits_0_saying_so() -> None:
    out = run_module("benchmarks.gpu_smoke", env={"CUDA_VISIBLE_DEVICES": ""}, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("machine: ")
    assert lines[-1] in (
        "no GPU here (nvidia-smi is not installed): nothing to smoke-test (exit 0)",
        "no GPU here (CUDA_VISIBLE_DEVICES hides every GPU): nothing to smoke-test (exit 0)",
    )
    assert len(lines) == 2  # no service started, no table


def test_gpu_smoke_asks_pytorch_when_nvidia_smi_is_there(tmp_path: Path) -> None:
    """An nvidia-smi on PATH is not a GPU: PyTorch, probed in its own process, decides. The ids
    "none" hide any real GPU from CUDA while passing the cheap check."""
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    env = {"PATH": f"{tmp_path}:{os.environ['PATH']}", "CUDA_VISIBLE_DEVICES": "none"}
    out = run_module("benchmarks.gpu_smoke", env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    last = out.stdout.splitlines()[-1]
    assert last == "no GPU here (PyTorch sees no CUDA device): nothing to smoke-test (exit 0)"


def test_the_smoke_plan_covers_each_framework_precision_and_every_gpu() -> None:
    one, four = plan(1), plan(4)
    assert [(j.framework, j.gpus, j.precision) for j in one] == [
        (f, 1, p) for f in ("pytorch", "tensorflow") for p in ("fp32", "bf16", "fp16")
    ]
    assert four[:6] == one and [(j.framework, j.gpus) for j in four[6:]] == [
        ("pytorch", 4),
        ("tensorflow", 4),
    ]
    for job in plan(3):  # the service's own validation: fp16 needs a GPU, batch / replicas
        spec = JobSpec.model_validate(job.spec())
        assert spec.resources.replica_count == job.gpus and spec.max_restarts == 0
        assert spec.resources.precision == job.precision
        assert spec.training.batch_size == 64 * job.gpus
    assert len({j.name for j in plan(4)}) == 8
    blind_tensorflow = plan(2, ("pytorch",))  # TensorFlow sees no GPU: none of its jobs
    assert [(j.gpus, j.precision) for j in blind_tensorflow] == [
        (1, "fp32"), (1, "bf16"), (1, "fp16"), (2, "fp32")
    ] and {j.framework for j in blind_tensorflow} == {"pytorch"}  # fmt: skip


def job_body(**fields: Any) -> dict[str, Any]:
    """A GET /v1/jobs/{id} body, only the fields the table reads."""
    return {"error_code": None, "result": None, "started_at": None, "finished_at": None} | fields


def test_the_result_table_says_what_each_job_did() -> None:
    ok, broken, slow, refused = SmokeJob("pytorch", 1, "bf16"), *plan(2)[4:6], plan(2)[6]
    jobs = {
        ok: job_body(
            status="succeeded", current_epoch=2, epochs=2,
            started_at="2026-12-01T10:00:00+00:00", finished_at="2026-12-01T10:00:12.5+00:00",
            result={"evaluated_on": "test", "test_accuracy": 0.96111, "replicas": 1,
                    "strategy": "single"},
        ),
        broken: job_body(status="failed", error_code="child_crashed", current_epoch=0, epochs=2),
        slow: job_body(status="running", current_epoch=1, epochs=2),
        refused: None,
    }  # fmt: skip
    rows = [result_row(smoke, job) for smoke, job in jobs.items()]
    assert rows == [
        ["pytorch-1gpu-bf16", "succeeded", "2/2", "test_accuracy 0.9611", "1 single", "12.5"],
        ["tensorflow-1gpu-bf16", "failed (child_crashed)", "0/2", "-", "-", "-"],
        ["tensorflow-1gpu-fp16", "running at the deadline", "1/2", "-", "-", "-"],
        ["pytorch-2gpu-fp32", "not submitted", "-", "-", "-", "-"],
    ]
    lines = format_table(rows).splitlines()
    assert lines[0].split() == "job status epochs final metric replicas wall s".split()
    assert len(lines) == 2 + len(rows)
    column = lines[0].index("epochs")  # every row's epochs start under the header's
    assert [line[column:].split()[0] for line in lines[2:]] == ["2/2", "0/2", "1/2", "-"]
    assert len(HEADER) == len(rows[0])
    assert not all_succeeded(jobs) and all_succeeded({ok: jobs[ok]})


@pytest.mark.e2e
def test_the_smoke_run_drives_the_real_service() -> None:
    """The part of `make gpu-smoke` a GPU does not change, on CPU: a fresh embedded service, a
    job submitted, waited for and put in the table."""
    cpu = SmokeJob("pytorch", 0, "fp32")
    results = run_jobs([cpu], worker_gpus="")
    row = result_row(cpu, results[cpu])
    assert row[1:3] == ["succeeded", "2/2"] and row[3].startswith("val_accuracy ")
    assert row[4] == "1 single" and float(row[5]) > 0
