"""The resumable-upload benchmark end to end on a tiny file (three parts of the client's), on the
directory store and on SeaweedFS: the runner offers it as `--only upload --upload-size MIB
--upload-store S`, the rerun sends only what the cut left, the checksum matches, the data set
becomes ready, and the API's peak memory is reported. No timing is asserted."""

from __future__ import annotations

import pytest

from tests.helpers import run_module

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.redis, pytest.mark.timeout(600)]

MIB = 20  # parts of 8, 8 and 4 MiB: cut at the second part's end, the rerun sends the third


@pytest.mark.parametrize("store", ["directory", "s3"])
def test_a_tiny_upload_cut_at_half_resumes_from_the_servers_offset(store: str) -> None:
    argv = ["--only", "upload", "--upload-size", str(MIB), "--upload-store", store]
    out = run_module("benchmarks.service", *argv)
    assert out.returncode == 0, out.stderr[-3000:]
    tag = "_s3" if store == "s3" else ""
    found = {name.removesuffix(tag): value for name, value in _bench_lines(out.stdout).items()}
    total = MIB * 2**20
    assert found["upload_resent_bytes"] == 0
    assert 0 < found["upload_rerun_sent_bytes"] < total / 2  # only the tail after the cut
    assert found["upload_checksum_ok"] == 1 and found["upload_ready"] == 1
    assert 30 < found["upload_api_peak_rss_mib"] < 2000  # a live process's VmHWM, read


def _bench_lines(stdout: str) -> dict[str, float]:
    """`BENCH name value unit` lines: {name: value}."""
    lines = (line.split() for line in stdout.splitlines() if line.startswith("BENCH "))
    return {fields[1]: float(fields[2]) for fields in lines}
