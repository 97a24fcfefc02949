"""Hostile load against a live API process (embedded default and PostgreSQL):
upload bombs, sweep spaces that cost the server, and predictions that cost GFLOPs a row.

While each attack runs, a second client asks `GET /healthz` and an authenticated
`GET /v1/jobs` back to back; their p99 must stay within 200 ms (times the suite's time scale),
and the API process's peak resident memory (VmHWM, reset before the attack through
/proc/PID/clear_refs) must not grow by what the attack would make it allocate.
"""

from __future__ import annotations

import select
import socket
import threading
import time
import zipfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
import pytest

from app.core.config import get_settings
from app.core.db import session_scope
from app.domain import crud
from app.domain.job_files import JobFiles
from tests import hostile
from tests.helpers import Service, clear_caches, running_service, scaled

pytestmark = pytest.mark.e2e
P99_BOUND = 0.2  # seconds, on the reference machine
MiB = 2**20


@dataclass
class Probe:
    """Latencies of the bystander's requests, in seconds (inf: no answer)."""

    healthz: list[float] = field(default_factory=list)
    jobs: list[float] = field(default_factory=list)

    @staticmethod
    def p99(values: list[float]) -> float:
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]

    def report(self) -> str:
        return (
            f"healthz p99 {self.p99(self.healthz) * 1000:.0f} ms ({len(self.healthz)} asked), "
            f"jobs p99 {self.p99(self.jobs) * 1000:.0f} ms"
        )

    def assert_answered_in_time(self) -> None:
        bound = scaled(P99_BOUND)
        assert self.healthz and self.jobs
        assert self.p99(self.healthz) < bound and self.p99(self.jobs) < bound, self.report()


@contextmanager
def bystander(service: Service) -> Iterator[Probe]:
    """Another key's client asking the two cheap routes back to back until the block ends."""
    probe, stop = Probe(), threading.Event()

    def ask(client: httpx.Client, path: str, into: list[float]) -> None:
        started = time.perf_counter()
        try:
            ok = client.get(path).status_code == 200
        except httpx.HTTPError:
            ok = False
        into.append(time.perf_counter() - started if ok else float("inf"))

    def run() -> None:
        with service.client() as client:
            client.timeout = httpx.Timeout(10.0)
            while not stop.is_set():
                ask(client, "/healthz", probe.healthz)
                ask(client, "/v1/jobs?limit=5", probe.jobs)
                stop.wait(0.01)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    time.sleep(0.3)  # a few answers before the attack starts
    try:
        yield probe
    finally:
        time.sleep(0.3)
        stop.set()
        thread.join()


class Memory:
    """The API process's peak resident memory, reset to its current one at start."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := VmRSS
        self.start = self._field("VmRSS")

    def _field(self, name: str) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(name + ":"):
                return int(line.split()[1]) * 1024
        raise AssertionError(f"no {name} for process {self.pid} (it died)")

    @property
    def growth(self) -> int:
        return self._field("VmHWM") - self.start


@pytest.fixture(scope="module")
def service(service_env: dict[str, str]) -> Iterator[Service]:
    settings = {"EPOCHAL_PREDICT_CONCURRENCY": "1", "EPOCHAL_MAX_STREAMS_PER_KEY": "4"}
    with (
        pytest.MonkeyPatch.context() as patch,
        running_service(service_env, worker=False, **settings) as svc,
    ):
        for key, value in service_env.items():  # this process writes a job's rows and files
            patch.setenv(key, value)
        clear_caches()
        yield svc
    clear_caches()


@pytest.fixture(scope="module")
def attacker(service: Service) -> str:
    return service.create_key("attacker")


def api_pid(service: Service) -> int:
    return service.processes["api"].pid


def upload(client: httpx.Client, content: bytes) -> httpx.Response:
    return client.post("/v1/datasets", files={"file": ("bomb.npz", content)})


UPLOAD_BOMBS = {
    "bzip2 member, 256 MiB of zeros": lambda: hostile.member_bomb(zipfile.ZIP_BZIP2, 256 * MiB),
    "LZMA member, 256 MiB of zeros": lambda: hostile.member_bomb(zipfile.ZIP_LZMA, 256 * MiB),
    "|V64M dtype x 4, deflated": lambda: hostile.void_bomb(64 * MiB),
    "300,000 central-directory entries": lambda: hostile.directory_flood(300_000),
}


@pytest.mark.parametrize("bomb", list(UPLOAD_BOMBS))
def test_upload_bombs_are_refused_before_they_expand(
    service: Service, attacker: str, bomb: str
) -> None:
    content = UPLOAD_BOMBS[bomb]()
    with service.client(attacker) as client, bystander(service) as probe:
        memory = Memory(api_pid(service))
        started = time.perf_counter()
        response = upload(client, content)
        took = time.perf_counter() - started
        grew = memory.growth
    print(
        f"\n{bomb}: {len(content)} bytes sent, {response.status_code} in {took:.2f} s, "
        f"API peak RSS +{grew / MiB:.0f} MiB, {probe.report()}"
    )
    assert response.status_code in (413, 422), response.text
    assert grew < 48 * MiB, f"the API process grew by {grew / MiB:.0f} MiB"
    probe.assert_answered_in_time()


SWEEP_ATTACKS = {
    "grid over 8,000,001 ints": lambda: hostile.grid_over(8_000_000),
    "4,096 valid combinations": hostile.combinations_sweep,
    "8 x 256 categorical choices": hostile.many_choices_sweep,
}


@pytest.mark.parametrize("attack", list(SWEEP_ATTACKS))
def test_sweep_spaces_are_checked_in_bounded_time_off_the_loop(
    service: Service, attacker: str, attack: str
) -> None:
    body = SWEEP_ATTACKS[attack]()
    with service.client(attacker) as client, bystander(service) as probe:
        memory = Memory(api_pid(service))
        answers = []
        started = time.perf_counter()
        for _ in range(3):
            answers.append(client.post("/v1/sweeps", json=body))
        took = (time.perf_counter() - started) / 3
        grew = memory.growth
    codes = [r.status_code for r in answers]
    print(
        f"\n{attack}: {codes}, {took:.2f} s each, API peak RSS +{grew / MiB:.0f} MiB, "
        f"{probe.report()}"
    )
    assert all(code in (201, 422) for code in codes), answers[0].text
    assert grew < 48 * MiB, f"the API process grew by {grew / MiB:.0f} MiB"
    probe.assert_answered_in_time()


def succeeded_with_heavy_model(service: Service, key: str) -> tuple[str, int]:
    """A job of `key` over its own upload of images, moved to succeeded, its model.onnx what
    the worker exports for its heavy CNN; its FLOPs a row, from its model summary."""
    with service.client(key) as client:
        uploaded = upload(client, hostile.image_upload())
        assert uploaded.status_code == 201, uploaded.text
        spec = hostile.heavy_cnn(uploaded.json()["id"])
        response = client.post("/v1/jobs", json=spec)
        assert response.status_code == 201, response.text
        job_id: str = response.json()["id"]
        flops = int(response.json()["model_summary"]["flops_per_sample"])
    with session_scope() as session:
        crud.claim_job(session, job_id, "w1", 30)
        crud.finish_job(session, job_id, 1, "succeeded", stop_reason="completed", reason="t")
    job_dir = JobFiles.of(get_settings().resolved_artifacts_dir, job_id).root
    hostile.export_random_weights(job_dir, spec, (32, 32, 1))
    return job_id, flops


def test_heavy_predictions_never_stall_the_loop(service: Service, attacker: str) -> None:
    job_id, flops = succeeded_with_heavy_model(service, attacker)
    url = f"/v1/jobs/{job_id}/predict"
    npy = {"content-type": "application/x-npy"}
    with service.client(attacker) as client:
        warm = client.post(url, content=hostile.npy_rows(1), headers=npy)  # loads the model
        assert warm.status_code == 200, warm.text

    def attack(rows: int) -> httpx.Response:
        with service.client(attacker) as client:
            client.timeout = httpx.Timeout(120.0)
            return client.post(url, content=hostile.npy_rows(rows), headers=npy)

    # 7 rows (7.3 KB, under the 8 KiB a loaded model once answered on the loop) cost ~25 GFLOP,
    # over the default budget of 20; 4 rows ~15 GFLOP, within it.
    with bystander(service) as probe, ThreadPoolExecutor(3) as pool:
        started = time.perf_counter()
        answers = list(pool.map(attack, [7, 7, 7, 4, 4, 4]))
        took = time.perf_counter() - started
    codes = [r.status_code for r in answers]
    print(
        f"\npredictions of {flops / 1e9:.2f} GFLOP a row: {codes} in {took:.1f} s, {probe.report()}"
    )
    probe.assert_answered_in_time()
    big = answers[:3]
    assert all(r.status_code == 422 and "at most 5 rows" in r.text for r in big), big[0].text
    small = answers[3:]
    assert {r.status_code for r in small} <= {200, 503}
    assert any(r.status_code == 200 for r in small)
    assert all(r.headers.get("retry-after") for r in small if r.status_code == 503)


def test_an_upload_without_a_key_is_answered_before_its_body_is_sent(service: Service) -> None:
    """A 150 MiB upload with no key, sent as fast as the socket takes it: the 401 arrives
    while most of it is unsent (before, the whole body was received and spooled first)."""
    total = 150 * MiB
    host, port = service.url.removeprefix("http://").split(":")
    part = b'--b\r\nContent-Disposition: form-data; name="file"; filename="d.npz"\r\n\r\n'
    head = (
        "POST /v1/datasets HTTP/1.1\r\nHost: api\r\nContent-Type: multipart/form-data; "
        f"boundary=b\r\nContent-Length: {len(part) + total}\r\n\r\n"
    )
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(head.encode() + part)  # then the file's bytes, never their end
        sock.setblocking(False)
        sent, answer, chunk = 0, b"", bytes(64 * 1024)
        while sent < total and not answer:
            readable, writable, _ = select.select([sock], [sock], [], 30)
            if readable:
                answer = sock.recv(4096)
            elif writable:
                sent += sock.send(chunk[: total - sent])
    print(f"\nanswered after {sent / MiB:.1f} of {total / MiB:.0f} MiB sent: {answer[:40]!r}")
    assert answer.startswith(b"HTTP/1.1 401"), answer
    assert sent < total // 2


def test_a_model_cheap_to_compute_and_huge_to_hold_is_priced_by_memory(
    service: Service, attacker: str
) -> None:
    """Concats cost no FLOPs: priced by FLOPs alone, 100 rows of this model (6 KB of JSON)
    would hold about 1.9 GiB in the API process. Priced by memory too, they are refused with
    how many fit, and that many run within the budget."""
    spec = hostile.concat_bomb()
    with service.client(attacker) as client:
        response = client.post("/v1/jobs", json=spec)
        assert response.status_code == 201, response.text
        job_id: str = response.json()["id"]
    with session_scope() as session:
        crud.claim_job(session, job_id, "w1", 30)
        crud.finish_job(session, job_id, 1, "succeeded", stop_reason="completed", reason="t")
    hostile.export_random_weights(
        JobFiles.of(get_settings().resolved_artifacts_dir, job_id).root, spec, (16,)
    )
    url = f"/v1/jobs/{job_id}/predict"
    rows = np.random.default_rng(0).normal(size=(100, 16)).round(3).tolist()
    with service.client(attacker) as client:
        client.timeout = httpx.Timeout(120.0)
        memory = Memory(api_pid(service))
        refused = client.post(url, json={"inputs": rows})
        assert refused.status_code == 422, refused.text
        detail = refused.json()["detail"]
        assert "EPOCHAL_MAX_PREDICT_BYTES" in detail, detail
        fit = int(detail.split("send at most ")[1].split()[0])
        assert 1 <= fit < 100
        assert memory.growth < 48 * MiB, (
            f"the refusal grew the API by {memory.growth / MiB:.0f} MiB"
        )
        answered = client.post(url, json={"inputs": rows[:fit]})
        assert answered.status_code == 200, answered.text
        assert len(answered.json()["predictions"]) == fit
    budget = get_settings().max_predict_bytes
    print(
        f"\n{fit} rows fit; API peak RSS +{memory.growth / MiB:.0f} MiB (budget {budget / MiB:.0f})"
    )
    # The budget bounds the request's buffers; the rest is onnxruntime itself, loaded here.
    assert memory.growth < budget + 160 * MiB
