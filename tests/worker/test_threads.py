"""Threads chosen, not defaulted: the worker's CPU budget, a spec's lower ask, DDP ranks sharing
it, and a real training child (cold or warm, each framework) running on what was chosen."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from app.core.config import Settings, get_settings
from app.core.db import session_scope
from app.domain import crud
from app.schemas.job_spec import JobSpec
from worker.protocol import Assignment, Threads, child_argv
from worker.supervisor import threads
from worker.supervisor.threads import SERVICE_CPUS, cpu_budget, cpu_quota, threads_for

# A step of about 2**29.1 forward FLOPs (8.7 M a sample, 64 samples): TensorFlow shares one
# this size among its intra-op threads (worker.training.tf.strategy.SHARED_STEP_FLOPS).
LARGE_STEP = [2048, 2048]


def spec(framework: str = "pytorch", units: list[int] | None = None, **resources: Any) -> JobSpec:
    return JobSpec.model_validate(
        {
            "framework": framework,
            "dataset": {"name": "digits", "limit": 400},
            "model": {"type": "mlp", "hidden_units": units or [8]},
            "training": {"epochs": 1, "batch_size": 64},
            "resources": resources,
        }
    )


def test_the_budget_is_the_setting_or_the_cpus_less_the_services_share(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert cpu_budget(Settings(worker_cpus=3)) == 3
    monkeypatch.delenv("EPOCHAL_WORKER_CPUS", raising=False)  # tests/helpers.py may set it
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1, 2, 3})
    monkeypatch.setattr(threads, "cpu_quota", lambda *_: None)
    assert cpu_budget(Settings()) == 4 - SERVICE_CPUS
    monkeypatch.setattr(threads, "cpu_quota", lambda *_: 2)  # a container's `cpus: 2`
    assert cpu_budget(Settings()) == 2  # a small box: a reserved core would be half of it
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0})
    assert cpu_budget(Settings()) == 1  # never none


def test_the_next_import_waits_unless_the_job_leaves_a_cpu_free(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(threads, "usable_cpus", lambda: 2)
    assert not threads.spare_cpu(spec(), Threads(2, 1))
    assert threads.spare_cpu(spec(), Threads(1, 1))
    assert not threads.spare_cpu(spec(replicas=2), Threads(1, 1))  # two DDP ranks, a core each
    assert threads.spare_cpu(spec("tensorflow", replicas=2), Threads(1, 3))  # one process


@pytest.mark.parametrize(
    ("membership", "files", "cpus"),
    [
        ("0::/box\n", {"box/cpu.max": "150000 100000\n"}, 2),  # v2: 1.5 CPUs, rounded up
        ("0::/\n", {"cpu.max": "max 100000\n"}, None),
        (
            "4:memory:/x\n2:cpu,cpuacct:/box\n",
            {
                "cpu,cpuacct/box/cpu.cfs_quota_us": "300000",
                "cpu,cpuacct/box/cpu.cfs_period_us": "100000",
            },
            3,
        ),  # v1
        ("1:cpu:/\n", {"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000"}, None),
        ("0::/gone\n", {}, None),
    ],
    ids=["v2-quota", "v2-none", "v1-quota", "v1-none", "unreadable"],
)
def test_a_cgroup_cpu_quota_caps_the_default_budget(
    tmp_path: Path, membership: str, files: dict[str, str], cpus: int | None
) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    (tmp_path / "self-cgroup").write_text(membership)
    assert cpu_quota(tmp_path, tmp_path / "self-cgroup") == cpus


def test_a_spec_may_lower_its_threads_and_is_clamped_to_the_budget() -> None:
    assert threads_for(spec(), 4) == Threads(4, 1)
    assert threads_for(spec(cpu_threads=2), 4) == Threads(2, 1)
    assert threads_for(spec(cpu_threads=16), 4) == Threads(4, 1)  # the worker's budget wins


def test_replicas_share_the_budget() -> None:
    assert threads_for(spec(replicas=2), 4) == Threads(2, 1)  # each DDP rank: half
    assert threads_for(spec(replicas=4), 2) == Threads(1, 1)  # never below one
    # One TensorFlow process holds every replica: the whole budget, an inter-op thread each.
    assert threads_for(spec("tensorflow", replicas=2), 4) == Threads(4, 3)
    assert threads_for(spec("tensorflow"), 1) == Threads(1, 2)


def test_cpu_threads_must_be_at_least_one() -> None:
    with pytest.raises(ValidationError, match="cpu_threads"):
        spec(cpu_threads=0)


def test_threads_travel_on_the_command_line_and_in_the_hand_over() -> None:
    argv = child_argv("job", 2, threads=Threads(3, 1))
    assert argv[-2:] == ["--threads", "3,1"]
    sent = Assignment("job", 2, 12.5, Threads(3, 1))
    assert Assignment.decode(sent.encode()) == sent
    assert Assignment.decode(Assignment("job", 2, 12.5).encode()).threads is None
    with pytest.raises(ValueError):
        Threads.decode("0,1")


def run_to_end(settings: Settings, job_spec: JobSpec) -> dict[str, Any]:
    from worker.supervisor import runner

    with session_scope() as session:
        job_id = crud.create_job(session, job_spec, "gpus-0").id
    runner.run_job(job_id, "w1")
    with session_scope() as session:
        job = crud.get_job(session, job_id)
        assert job is not None
        assert job.status == "succeeded", job.error
        assert job.result is not None
        return job.result


@pytest.mark.parametrize(
    ("framework", "warm", "resources", "expected"),
    [
        ("pytorch", False, {}, (3, 1)),
        ("pytorch", True, {"cpu_threads": 2}, (2, 1)),
        ("tensorflow", False, {"units": LARGE_STEP}, (3, 2)),
        ("tensorflow", True, {"units": LARGE_STEP, "cpu_threads": 2}, (2, 2)),
        ("tensorflow", False, {}, (1, 2)),  # a step too small to share: one thread runs it
        ("pytorch", False, {"replicas": 2}, (1, 1)),  # rank 0 reports; each rank has 3 // 2
        ("tensorflow", False, {"replicas": 2}, (3, 3)),  # the collectives need their threads
    ],
    ids=[
        "pytorch-cold",
        "pytorch-warm",
        "tensorflow-cold",
        "tensorflow-warm",
        "tensorflow-small-step",
        "pytorch-ddp",
        "tensorflow-mirrored",
    ],
)
def test_the_training_child_runs_on_the_chosen_threads(
    sqlite_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    framework: str,
    warm: bool,
    resources: dict[str, Any],
    expected: tuple[int, int],
) -> None:
    # A budget no framework would pick by itself on this box (it counts its cores), and no
    # thread variable that could set it instead.
    for name in ("OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("EPOCHAL_WORKER_CPUS", "3")
    monkeypatch.setenv("EPOCHAL_WARM_FRAMEWORKS", framework if warm else "")
    monkeypatch.setenv("EPOCHAL_CACHE_DIR", str(tmp_path))  # this box not measured: the rule
    get_settings.cache_clear()
    from worker.supervisor.standby import POOL, warm_up

    settings = get_settings()
    try:
        if warm:
            warm_up(settings, [framework])
            assert framework in POOL._waiting  # the job goes to this child
        result = run_to_end(settings, spec(framework, **resources))
    finally:
        POOL.close()
    assert (result["intra_op_threads"], result["inter_op_threads"]) == expected


def test_a_small_tensorflow_step_runs_on_the_count_measured_for_the_box(
    sqlite_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The training child reads the box's answer (worker.calibration): all three here."""
    from worker.calibration import record

    for name in ("OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("EPOCHAL_WORKER_CPUS", "3")
    monkeypatch.setenv("EPOCHAL_WARM_FRAMEWORKS", "")
    monkeypatch.setenv("EPOCHAL_CACHE_DIR", str(tmp_path))
    record(tmp_path, 3, 3, {1: 0.011, 3: 0.009})
    get_settings.cache_clear()
    result = run_to_end(get_settings(), spec("tensorflow"))
    assert (result["intra_op_threads"], result["inter_op_threads"]) == (3, 2)


@pytest.mark.parametrize(("cpus", "during"), [(1, False), (2, True)], ids=["every-core", "spare"])
def test_the_next_warm_child_starts_beside_the_job_only_on_a_spare_cpu(
    sqlite_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, cpus: int, during: bool
) -> None:
    """A real job on one thread: with one usable CPU the next child starts once it has ended;
    with two it starts beside it (and the refill at the end finds it there)."""
    from worker.supervisor import runner
    from worker.supervisor.standby import POOL

    monkeypatch.setenv("EPOCHAL_WORKER_CPUS", "1")
    monkeypatch.setenv("EPOCHAL_WARM_FRAMEWORKS", "pytorch")
    get_settings.cache_clear()
    monkeypatch.setattr(threads, "usable_cpus", lambda: cpus)
    events: list[str] = []
    warm_up, record_end = runner.warm_up, runner.record_end

    def warm_up_seen(*args: Any) -> None:
        events.append("warm_up")
        warm_up(*args)

    def record_end_seen(*args: Any) -> None:
        events.append("record_end")
        record_end(*args)

    monkeypatch.setattr(runner, "warm_up", warm_up_seen)
    monkeypatch.setattr(runner, "record_end", record_end_seen)
    try:
        run_to_end(get_settings(), spec())
        assert "pytorch" in POOL._waiting  # the next job starts warm either way
    finally:
        POOL.close()
    started_beside = events.index("warm_up") < events.index("record_end")
    assert started_beside == during, events
