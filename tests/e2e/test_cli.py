"""The `epochal` client commands as a user runs them, against a live service (embedded default,
JSON logs on), including Ctrl-C in a real terminal (a pty)."""

from __future__ import annotations

import csv
import io
import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.domain.job_files import JobFiles
from epochal_client.client import Client
from tests.helpers import (
    ROOT,
    Service,
    as_background_job,
    migrate_in_subprocess,
    running_service,
    scaled,
    wait_until,
)

pytestmark = pytest.mark.e2e
# A job that runs until cancelled, in short epochs (~200 steps): the first is soon on screen.
LONG = ["--set", "dataset.samples=4000", "--set", "training.epochs=1000", "--set",
        "training.batch_size=16"]  # fmt: skip


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    env = {"EPOCHAL_HOME": str(tmp_path_factory.mktemp("cli") / "home")}
    migrate_in_subprocess(env)
    with running_service(env, EPOCHAL_LOG_JSON="1") as svc:
        yield svc


def cli_env(service: Service) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHAL_")}
    return {**env, "EPOCHAL_URL": service.url, "EPOCHAL_API_KEY": service.api_key}


def epochal(service: Service, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "app.cli", *args]
    return subprocess.run(
        argv, cwd=ROOT, env=cli_env(service), capture_output=True, text=True, timeout=scaled(240)
    )


def test_submit_follow_then_metrics_as_csv_and_plot(service: Service, tmp_path: Path) -> None:
    run = epochal(
        service,
        "submit",
        "examples/pytorch-simplenn-steplr.yaml",
        "--follow",
        "--set",
        "training.epochs=3",
        "--set",
        "dataset.limit=3000",
    )
    assert run.returncode == 0, run.stdout + run.stderr
    job_id = run.stdout.splitlines()[0].strip()
    assert "queued → running" in run.stdout and "3/3 epochs" in run.stdout
    # the progress line: throughput of the latest epoch and the time left
    assert re.search(r"ETA +\d+:\d\d:\d\d +[\d,]+ samples/s", run.stdout), run.stdout
    assert f"job {job_id} succeeded (completed)" in run.stdout

    table = epochal(service, "metrics", job_id, "--csv")
    rows = list(csv.DictReader(io.StringIO(table.stdout)))
    assert [int(r["epoch"]) for r in rows] == [1, 2, 3]
    # The example's StepLR(step_size=1, gamma=0.1), as the worker recorded it.
    assert [float(r["learning_rate"]) for r in rows] == pytest.approx([1e-3, 1e-4, 1e-5])
    assert all(0 < float(r["val_accuracy"]) <= 1 for r in rows)

    png = tmp_path / "curves.png"
    plotted = epochal(service, "metrics", job_id, "--plot", str(png))
    assert plotted.returncode == 0 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image

    height, width = matplotlib.image.imread(png).shape[:2]
    assert width > 1000 and height > 400
    listed = epochal(service, "jobs", "--status", "succeeded")
    assert job_id in listed.stdout and "fashion-simplenn-steplr" in listed.stdout
    shown = epochal(service, "show", job_id)
    assert "succeeded" in shown.stdout and "running → succeeded" in shown.stdout
    check_json_logs(service, job_id)


def check_json_logs(service: Service, job_id: str) -> None:
    """API, worker and training child: JSON lines, and each line about the job carries its id."""
    home = Path(service.env["EPOCHAL_HOME"])
    child = JobFiles.of(home / "artifacts", job_id).log.read_text().splitlines()
    records = [json.loads(line) for line in child if line.startswith("{")]
    assert records and all(r["job_id"] == job_id and r["component"] == "child" for r in records)
    for name in ("api", "worker"):
        path = service.logs / f"{home.parent.name}-{name}.log"
        lines = [json.loads(s) for s in path.read_text().splitlines() if s.startswith("{")]
        mine = [r for r in lines if r["job_id"] == job_id]
        assert mine and all(r["component"] == name for r in mine), name
        assert all(r["job_id"] == job_id for r in lines if job_id in r["msg"]), name
    api = service.logs / f"{home.parent.name}-api.log"
    submits = [json.loads(s) for s in api.read_text().splitlines() if '"POST /v1/jobs\\"' in s]
    assert job_id in {r["job_id"] for r in submits}  # the submit's line, before the id was known


def test_cancel_and_follow_exit_codes(service: Service) -> None:
    submitted = epochal(service, "submit", "examples/regression-synthetic.yaml", *LONG)
    job_id = submitted.stdout.strip()
    with Client(service.url, service.api_key) as client:
        wait_until(lambda: client.metrics(job_id), 120, "the first epoch")
    cancelled = epochal(service, "cancel", job_id)
    assert cancelled.returncode == 0 and "cancel" in cancelled.stdout
    followed = epochal(service, "follow", job_id)
    assert followed.returncode == 3 and "cancelled" in followed.stdout
    again = epochal(service, "cancel", job_id)
    assert again.returncode == 1 and "409" in again.stderr and "already cancelled" in again.stderr
    missing = epochal(service, "show", "no-such-job")
    assert missing.returncode == 1 and "404" in missing.stderr
    deleted = epochal(service, "delete", job_id)  # it has ended: its rows and files go
    assert deleted.returncode == 0 and f"{job_id} deleted" in deleted.stdout, deleted.stderr
    home = Path(service.env["EPOCHAL_HOME"])
    assert not JobFiles.of(home / "artifacts", job_id).root.exists()
    gone = epochal(service, "show", job_id)
    assert gone.returncode == 1 and "404" in gone.stderr


class Terminal:
    """A command in a pseudo-terminal: what a user sees and types."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.master, slave = pty.openpty()
        self.process = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            preexec_fn=as_background_job,  # Ctrl-C must work even so
        )
        os.close(slave)
        self.screen = ""

    def wait_for(self, text: str, timeout: float = 120) -> str:
        deadline = time.monotonic() + scaled(timeout)
        while text not in self.screen:
            assert time.monotonic() < deadline, f"no {text!r} in:\n{self.screen[-2000:]}"
            if select.select([self.master], [], [], 0.5)[0]:
                try:
                    self.screen += os.read(self.master, 65536).decode(errors="replace")
                except OSError:  # the command exited and closed the terminal
                    break
        return self.screen

    def type(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    def close(self) -> int:
        code = self.process.wait(timeout=scaled(120))
        os.close(self.master)
        return code


@pytest.mark.parametrize(("answer", "code", "status"), [("y", 3, "cancelled"), ("n", 130, None)])
def test_ctrl_c_asks_whether_to_cancel(
    service: Service, answer: str, code: int, status: str | None
) -> None:
    argv = [sys.executable, "-m", "app.cli", "submit", "examples/regression-synthetic.yaml",
            "--follow", *LONG]  # fmt: skip
    terminal = Terminal(argv, {**cli_env(service), "COLUMNS": "120"})
    job_id = terminal.wait_for("\n").split()[0]
    terminal.wait_for("val mae")  # the live table shows a finished epoch
    terminal.process.send_signal(signal.SIGINT)
    terminal.wait_for("Cancel job", timeout=10)  # at once, not when the next event comes
    terminal.type(answer + "\n")
    terminal.wait_for("cancelled (cancelled)" if status else "left running")
    assert terminal.close() == code
    with Client(service.url, service.api_key) as client:
        job = client.get(job_id)
        if status is None:  # the job went on; clean up for the next test
            assert job.status == "running"
            client.cancel(job_id)
            job = client.wait(job_id, timeout=scaled(60))
        assert job.status == "cancelled"
