"""The deployment with its artifact store in SeaweedFS: docker-compose.s3.yml (and
docker-compose.s3-cpu.yml for the CPU worker) on top of the two files test_stack.py runs, as a
project of its own on the same engine and images, after that one is down.

The worker keeps its /data in a volume of its own there, so the store is all the API and the
worker share. A PyTorch job's model and checkpoints are read back from the bucket through the
port the store publishes (with the keys the stack was given), the model downloads through the
API byte for byte, a prediction is answered, and `down -v` leaves nothing, the store's volume
included.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest

from tests.compose.engine import Engine
from tests.compose.stack import BIND, FILES, PROJECT, Stack, running
from tests.compose.test_stack import DIGITS, ENDED, ROWS, WORKER, predict, submit, wait_status

pytestmark = [pytest.mark.compose, pytest.mark.timeout(1800)]
S3_FILES = (*FILES, "docker-compose.s3.yml", "docker-compose.s3-cpu.yml")
KEYS = ("S3_ACCESS_KEY", "S3_SECRET_KEY")
BUCKET, PREFIX = "epochal", "artifacts"  # docker-compose.s3.yml's EPOCHAL_STORE_URL
CHECKPOINTED: dict[str, Any] = {"framework": "pytorch", **DIGITS, "checkpoint_every_epochs": 1}


@pytest.fixture(scope="module")
def stack(engine: Engine) -> Iterator[Stack]:
    with running(Stack.create(engine, S3_FILES, f"{PROJECT}-s3", KEYS)) as stack:
        yield stack


def bucket(stack: Stack) -> Any:
    """A client of the store from the host, through its published port."""
    env = stack.engine.env
    return boto3.session.Session(
        aws_access_key_id=env["S3_ACCESS_KEY"],
        aws_secret_access_key=env["S3_SECRET_KEY"],
        region_name="us-east-1",
    ).client("s3", endpoint_url=f"http://{BIND}:8333")


def objects(stack: Stack, prefix: str) -> dict[str, bytes]:
    client = bucket(stack)
    listed = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    keys = [item["Key"] for page in listed for item in page.get("Contents", [])]
    return {key: client.get_object(Bucket=BUCKET, Key=key)["Body"].read() for key in keys}


def test_a_job_keeps_its_model_and_checkpoints_in_the_bucket(stack: Stack, tmp_path: Path) -> None:
    job_id = submit(stack, tmp_path, "digits-s3", CHECKPOINTED)
    done = wait_status(stack, job_id, ENDED, 900)
    assert done["status"] == "succeeded", done.get("error")
    stored = objects(stack, f"{PREFIX}/{job_id}/")
    model = stored.get(f"{PREFIX}/{job_id}/model/model.pt")
    assert model and f"{PREFIX}/{job_id}/model/model.onnx" in stored, sorted(stored)
    manifests = [key for key in stored if key.endswith("/manifest.json")]
    assert manifests and all("/checkpoints/" in key for key in manifests), sorted(stored)
    for key in manifests:  # every part whole, as its manifest says
        folder = key.rsplit("/", 1)[0]
        for part in json.loads(stored[key])["parts"]:
            data = stored[f"{folder}/{part['name']}"]
            assert (len(data), hashlib.sha256(data).hexdigest()) == (part["size"], part["sha256"])
    # The job's files in the worker's folder are not in the API's: it serves them from the store.
    for service, found in ((WORKER, True), ("api", False)):
        out = stack.compose("exec", "-T", service, "find", "/data", "-name", job_id, quiet=True)
        assert bool(out.strip()) == found, (service, out)
    headers = {"Authorization": f"Bearer {stack.api_key}"}
    download = httpx.get(f"{stack.url}/v1/jobs/{job_id}/artifacts/model", headers=headers)
    assert download.status_code == 200 and download.content == model
    assert len(predict(stack, job_id, tmp_path)) == len(ROWS)


def test_down_v_leaves_nothing_of_the_store(stack: Stack) -> None:
    stack.compose("down", "-v")
    assert stack.leftovers() == []
