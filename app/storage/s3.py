"""The S3 store: any server that speaks the S3 API (AWS, SeaweedFS, MinIO, Ceph), via boto3.

`EPOCHAL_STORE_URL=s3://bucket/prefix`; `EPOCHAL_STORE_ENDPOINT` for a server other than AWS.
Credentials come the standard way: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, AWS_PROFILE and
the credentials file, or an instance role. Throttling (503 SlowDown), 5xx answers and dropped
connections are retried by botocore with capped exponential backoff and full jitter; when the
attempts run out the call raises StoreUnavailable, so a dead store costs seconds, not a hang.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    HTTPClientError,
    ResponseStreamingError,
)
from botocore.exceptions import ConnectionError as BotoConnectionError

from app.storage.base import (
    CHUNK_BYTES,
    ObjectInfo,
    ObjectNotFound,
    PartInfo,
    StoreError,
    StoreUnavailable,
    UploadInfo,
    attachment,
    check_key,
    check_parts,
    check_prefix,
    check_range,
)

NOT_FOUND = {"NoSuchKey", "NoSuchUpload", "NotFound", "404"}
THROTTLED = {"SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded"}
DOWN = (BotoConnectionError, HTTPClientError, ResponseStreamingError)
ATTEMPTS = 5  # botocore's standard mode: 4 retries, backoff capped, jittered
PART_BYTES = 16 * 1024 * 1024  # put_file's parts: bounded memory, 10000 of them reach 160 GB
MAX_PARTS = 10000


@contextmanager
def translated(key: str) -> Iterator[None]:
    """botocore's errors as the store's (after botocore's own retries)."""
    try:
        yield
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        if code in NOT_FOUND or status == 404:
            raise ObjectNotFound(key) from exc
        if code in THROTTLED or status >= 500:
            raise StoreUnavailable(f"{key}: {code or status}") from exc
        raise StoreError(f"{key}: {code or status}") from exc
    except DOWN as exc:
        raise StoreUnavailable(f"{key}: {exc}") from exc
    except BotoCoreError as exc:  # no credentials, a bad endpoint: configuration, not an outage
        raise StoreError(f"{key}: {exc}") from exc


def client_config(attempts: int, connect_timeout: float, read_timeout: float) -> Config:
    return Config(
        retries={"total_max_attempts": attempts, "mode": "standard"},
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        # Checksums only where S3 requires them: stores other than AWS vary in the rest.
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
        s3={"addressing_style": "path"},
        # SigV4 for presigned URLs too (botocore's default signs those with SigV2, which AWS
        # refuses in most regions and SeaweedFS refuses with response-* overrides).
        signature_version="s3v4",
    )


class S3Store:
    """Keys under `prefix` in `bucket`."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        endpoint: str | None = None,
        *,
        attempts: int = ATTEMPTS,
        connect_timeout: float = 5.0,
        read_timeout: float = 60.0,
        page_size: int = 1000,
        part_bytes: int = PART_BYTES,
    ) -> None:
        self.bucket, self.endpoint, self.page_size = bucket, endpoint, page_size
        self.part_bytes = part_bytes
        self.prefix = f"{check_prefix(prefix.strip('/'))}/" if prefix.strip("/") else ""
        config = client_config(attempts, connect_timeout, read_timeout)
        self.client: Any = boto3.session.Session().client(
            "s3", endpoint_url=endpoint, config=config
        )

    @classmethod
    def from_url(cls, url: str, endpoint: str | None = None, *, quick: bool = False) -> S3Store:
        """quick: one try with short timeouts (a probe), instead of retrying for a caller."""
        parsed = urlparse(url)
        if parsed.scheme != "s3" or not parsed.netloc:
            raise ValueError(f"not an s3://bucket/prefix URL: {url!r}")
        if quick:
            return cls(
                parsed.netloc,
                parsed.path,
                endpoint,
                attempts=1,
                connect_timeout=2.0,
                read_timeout=5.0,
            )
        return cls(parsed.netloc, parsed.path, endpoint)

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    def _key(self, key: str) -> str:
        return self.prefix + check_key(key)

    def put(self, key: str, data: bytes) -> None:
        with translated(key):
            self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data)

    def put_file(self, key: str, path: Path) -> None:
        size = path.stat().st_size
        part = max(self.part_bytes, math.ceil(size / MAX_PARTS))
        with open(path, "rb") as src:
            if size <= part:
                with translated(key):  # botocore streams the file (and rewinds it to retry)
                    self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=src)
                return
            upload_id = self.start_upload(key)
            try:
                parts = [
                    self.upload_part(key, upload_id, number, data)
                    for number, data in enumerate(iter(lambda: src.read(part), b""), 1)
                ]
                self.complete_upload(key, upload_id, parts)
            except BaseException:
                self._abort_quietly(key, upload_id)
                raise

    def _abort_quietly(self, key: str, upload_id: str) -> None:
        try:
            self.abort_upload(key, upload_id)
        except StoreError:  # the cleaner aborts it later
            pass

    def get(self, key: str) -> bytes:
        with translated(key):
            body = self.client.get_object(Bucket=self.bucket, Key=self._key(key))["Body"]
            return bytes(body.read())

    def get_range(self, key: str, start: int, end: int) -> bytes:
        return b"".join(self.iter_bytes(key, start, end))

    def iter_bytes(
        self, key: str, start: int = 0, end: int | None = None, chunk: int = CHUNK_BYTES
    ) -> Iterator[bytes]:
        check_range(start, end)
        if end == start:
            self.head(key)
            return iter(())
        extra = {"Range": f"bytes={start}-{'' if end is None else end - 1}"} if start or end else {}
        with translated(key):
            try:
                body = self.client.get_object(Bucket=self.bucket, Key=self._key(key), **extra)
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") == "InvalidRange":
                    return iter(())  # starts past the end: nothing, as a slice would
                raise
        return _chunks(body["Body"], key, chunk)

    def presigned_get(self, key: str, seconds: int, filename: str, media_type: str) -> str:
        """Signed here (no request to the store), for the endpoint this client uses."""
        params = {
            "Bucket": self.bucket,
            "Key": self._key(key),
            "ResponseContentDisposition": attachment(filename),
            "ResponseContentType": media_type,
        }
        url: str = self.client.generate_presigned_url(
            "get_object", Params=params, ExpiresIn=seconds
        )
        return url

    def head(self, key: str) -> ObjectInfo:
        with translated(key):
            got = self.client.head_object(Bucket=self.bucket, Key=self._key(key))
        return ObjectInfo(key, int(got["ContentLength"]), got["LastModified"])

    def _pages(self, prefix: str) -> Iterator[list[dict[str, Any]]]:
        """list_objects_v2's pages (at most page_size keys each) under our prefix + `prefix`."""
        args = {"Bucket": self.bucket, "Prefix": self.prefix + check_prefix(prefix)}
        while True:
            with translated(prefix):
                page = self.client.list_objects_v2(MaxKeys=self.page_size, **args)
            yield page.get("Contents", [])
            if not page.get("IsTruncated"):
                return
            args["ContinuationToken"] = page["NextContinuationToken"]

    def list_objects(self, prefix: str = "") -> Iterator[ObjectInfo]:
        for page in self._pages(prefix):
            for item in page:
                key = item["Key"].removeprefix(self.prefix)
                yield ObjectInfo(key, int(item["Size"]), item["LastModified"])

    def delete(self, key: str) -> None:
        with translated(key):
            self.client.delete_object(Bucket=self.bucket, Key=self._key(key))

    def delete_prefix(self, prefix: str) -> int:
        done = 0
        for page in self._pages(prefix):
            if not page:
                continue
            objects = [{"Key": item["Key"]} for item in page]
            with translated(prefix):
                answer = self.client.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": objects, "Quiet": True}
                )
            if answer.get("Errors"):
                raise StoreError(f"{prefix}: {answer['Errors'][0]}")
            done += len(objects)
        return done

    def start_upload(self, key: str) -> str:
        with translated(key):
            got = self.client.create_multipart_upload(Bucket=self.bucket, Key=self._key(key))
        return str(got["UploadId"])

    def upload_part(self, key: str, upload_id: str, number: int, data: bytes) -> PartInfo:
        check_parts([PartInfo(number, "")])
        with translated(key):
            got = self.client.upload_part(
                Bucket=self.bucket,
                Key=self._key(key),
                UploadId=upload_id,
                PartNumber=number,
                Body=data,
            )
        return PartInfo(number, str(got["ETag"]).strip('"'))

    def complete_upload(self, key: str, upload_id: str, parts: Sequence[PartInfo]) -> None:
        check_parts(parts)
        listed = [{"PartNumber": p.number, "ETag": f'"{p.etag}"'} for p in parts]
        with translated(key):
            self.client.complete_multipart_upload(
                Bucket=self.bucket,
                Key=self._key(key),
                UploadId=upload_id,
                MultipartUpload={"Parts": listed},
            )

    def abort_upload(self, key: str, upload_id: str) -> None:
        with translated(key):
            self.client.abort_multipart_upload(
                Bucket=self.bucket, Key=self._key(key), UploadId=upload_id
            )

    def list_uploads(self, prefix: str = "") -> list[UploadInfo]:
        # Pages of S3's largest size: SeaweedFS pages uploads in upload-id order and does not
        # honour the markers, so smaller pages would lose uploads there.
        args = {"Bucket": self.bucket, "Prefix": self.prefix + check_prefix(prefix)}
        found: dict[str, UploadInfo] = {}
        while True:
            with translated(prefix):
                page = self.client.list_multipart_uploads(MaxUploads=1000, **args)
            fresh = [item for item in page.get("Uploads", []) if item["UploadId"] not in found]
            for item in fresh:
                key = item["Key"].removeprefix(self.prefix)
                found[item["UploadId"]] = UploadInfo(key, item["UploadId"], item["Initiated"])
            if not page.get("IsTruncated") or not fresh:  # the end, or a page seen before
                return sorted(found.values(), key=lambda u: (u.key, u.initiated))
            args["KeyMarker"], args["UploadIdMarker"] = _next_markers(page)


def _next_markers(page: dict[str, Any]) -> tuple[str, str]:
    """Where the next page of uploads starts: the markers S3 answers, else (as some stores
    leave them out) the page's last upload."""
    last = (page.get("Uploads") or [{}])[-1]
    key = page.get("NextKeyMarker") or last.get("Key", "")
    return str(key), str(page.get("NextUploadIdMarker") or last.get("UploadId", ""))


def _chunks(body: Any, key: str, chunk: int) -> Iterator[bytes]:
    with translated(key):
        try:
            yield from body.iter_chunks(chunk)
        finally:
            body.close()
