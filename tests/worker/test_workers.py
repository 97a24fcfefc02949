"""A worker's GPUs as nvidia-smi describes them.

Mocked: there is no GPU and no nvidia-smi here, so a fake `nvidia-smi` script on PATH prints
what the real one prints for `--query-gpu=... --format=csv,noheader,nounits`. The code under
test runs unchanged (shutil.which and subprocess.run find and start the script).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from worker.supervisor.heartbeat import describe_gpus

H100 = (
    "0, GPU-5f1e6a2b, NVIDIA H100 80GB HBM3, 81559\n1, GPU-9c0d7e44, NVIDIA H100 80GB HBM3, 81559\n"
)


def fake_nvidia_smi(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, output: str, code: int = 0
) -> Path:
    """Put an `nvidia-smi` printing `output` (exiting `code`) first on PATH; its argv file."""
    bin_dir, argv = tmp_path / "bin", tmp_path / "argv"
    bin_dir.mkdir()
    script = bin_dir / "nvidia-smi"
    script.write_text(
        f'#!/bin/sh\nprintf "%s\\n" "$@" > {argv}\ncat <<"EOF"\n{output}EOF\nexit {code}\n'
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return argv


def test_names_and_memory_by_index_or_uuid(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    argv = fake_nvidia_smi(tmp_path, monkeypatch, H100)
    devices = describe_gpus(["1", "GPU-5f1e6a2b"])
    assert devices == [
        {"id": "1", "name": "NVIDIA H100 80GB HBM3", "memory_mb": 81559},
        {"id": "GPU-5f1e6a2b", "name": "NVIDIA H100 80GB HBM3", "memory_mb": 81559},
    ]
    assert argv.read_text().split() == [
        "--query-gpu=index,uuid,name,memory.total",
        "--format=csv,noheader,nounits",
    ]


def test_odd_rows_and_unknown_memory_do_not_break_the_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    output = (
        "Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error\n"
        "1, GPU-9c0d7e44, NVIDIA GB10, [N/A]\n"
    )
    fake_nvidia_smi(tmp_path, monkeypatch, output)
    assert describe_gpus(["0", "1"]) == [
        {"id": "0", "name": None, "memory_mb": None},
        {"id": "1", "name": "NVIDIA GB10", "memory_mb": None},
    ]


def test_without_a_working_nvidia_smi_the_ids_are_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    unknown = [{"id": "0", "name": None, "memory_mb": None}]
    fake_nvidia_smi(tmp_path, monkeypatch, "NVIDIA-SMI has failed\n", code=9)
    assert describe_gpus(["0"]) == unknown
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))  # not installed at all
    assert describe_gpus(["0"]) == unknown
    assert describe_gpus([]) == []
