"""The object store's operations that Django's Storage API does not have: multipart uploads and presigned URLs.

Everything else (save, open, delete a small object) goes through `default_storage` (django-storages' S3 backend,
configured in settings from the same KAKEHASHI_S3_* variables). This module is the only place boto3 is called.

Two clients: one talks to the store from the portal (KAKEHASHI_S3_ENDPOINT_URL), the other only signs URLs for
browsers and the CLI, for the address they reach the store at (KAKEHASHI_S3_PUBLIC_URL). Both sign with SigV4
and path-style addresses: boto3 would otherwise make SigV2 URLs for a custom endpoint.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import quote

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from django.conf import settings

log = logging.getLogger(__name__)

CHECKSUM_HEADER = "x-amz-checksum-sha256"


class ObjectStoreError(Exception):
    """The store refused or could not be reached. `code` is S3's error code (BadDigest, NoSuchUpload, …)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code, self.message = code, message


@dataclass(frozen=True)
class StoreConfig:
    bucket: str
    endpoint: str | None
    public_endpoint: str | None
    region: str
    access_key: str | None
    secret_key: str | None

    def __repr__(self) -> str:  # never the secret, whatever prints this
        return f"StoreConfig(bucket={self.bucket!r}, endpoint={self.endpoint!r}, region={self.region!r})"


@dataclass(frozen=True)
class Part:
    number: int
    size: int
    etag: str


def configured() -> bool:
    """Whether project files live in an object store (else: the file system of `make run`)."""
    return bool(settings.KAKEHASHI_S3_BUCKET)


def _config() -> StoreConfig:
    return StoreConfig(
        bucket=settings.KAKEHASHI_S3_BUCKET,
        endpoint=settings.KAKEHASHI_S3_ENDPOINT_URL or None,
        public_endpoint=settings.KAKEHASHI_S3_PUBLIC_URL or settings.KAKEHASHI_S3_ENDPOINT_URL or None,
        region=settings.KAKEHASHI_S3_REGION,
        access_key=settings.KAKEHASHI_S3_ACCESS_KEY_ID or None,
        secret_key=settings.KAKEHASHI_S3_SECRET_ACCESS_KEY or None,
    )


@functools.lru_cache(maxsize=8)
def _client(config: StoreConfig, public: bool):
    return boto3.session.Session().client(
        "s3",
        endpoint_url=config.public_endpoint if public else config.endpoint,
        region_name=config.region,
        aws_access_key_id=config.access_key,
        aws_secret_access_key=config.secret_key,
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"},
                      retries={"max_attempts": 4, "mode": "standard"}, max_pool_connections=20),
    )


def client(*, public: bool = False):
    return _client(_config(), public)


def bucket() -> str:
    return settings.KAKEHASHI_S3_BUCKET


def _call(operation: str, **params):
    try:
        return getattr(client(), operation)(Bucket=bucket(), **params)
    except ClientError as exc:
        error = exc.response.get("Error", {})
        raise ObjectStoreError(str(error.get("Code") or "Error"), str(error.get("Message") or exc)) from None
    except BotoCoreError as exc:
        log.warning("object store unreachable during %s: %s", operation, exc)
        raise ObjectStoreError("Unreachable", f"the object store could not be reached ({exc.__class__.__name__})") from None


# ---------------------------------------------------------------------------------------------- multipart


def create_multipart_upload(key: str) -> str:
    """A new multipart upload whose parts must each carry a SHA-256 checksum; returns S3's upload id."""
    answer = _call("create_multipart_upload", Key=key, ChecksumAlgorithm="SHA256",
                   ContentType="application/octet-stream")
    return answer["UploadId"]


def sign_part(key: str, upload_id: str, number: int, sha256_b64: str, expires: int) -> tuple[str, dict[str, str]]:
    """A presigned PUT for one part and the headers the uploader must send with it.

    The part's SHA-256 is a signed header: the store recomputes it from the bytes it receives and refuses the part
    (400 BadDigest) when they differ, and a PUT without it, or with another value, no longer matches the signature
    (403). So each stored part is exactly the bytes whose checksum the portal signed.
    """
    url = client(public=True).generate_presigned_url(
        "upload_part",
        Params={"Bucket": bucket(), "Key": key, "UploadId": upload_id, "PartNumber": number,
                "ChecksumSHA256": sha256_b64},
        ExpiresIn=expires,
    )
    return url, {CHECKSUM_HEADER: sha256_b64}


def list_parts(key: str, upload_id: str, prefer: dict[int, str] | None = None) -> list[Part]:
    """The parts the store holds, one per number.

    A part sent twice should replace the first, but some servers (SeaweedFS) list both: then the one whose ETag
    the uploader reported (`prefer`, from the PUT's answer) is taken, else the latest.
    """
    listed: dict[int, list[tuple[datetime | None, int, Part]]] = {}
    marker, order = 0, 0
    while True:
        answer = _call("list_parts", Key=key, UploadId=upload_id, PartNumberMarker=marker, MaxParts=1000)
        for raw in answer.get("Parts", []):
            order += 1
            part = Part(raw["PartNumber"], raw["Size"], raw["ETag"])
            listed.setdefault(part.number, []).append((raw.get("LastModified"), order, part))
        if not answer.get("IsTruncated"):
            break
        marker = int(answer.get("NextPartNumberMarker") or max(listed, default=0))
    chosen = []
    for number in sorted(listed):
        candidates = listed[number]
        wanted = _etag((prefer or {}).get(number, ""))
        matching = [c for c in candidates if wanted and _etag(c[2].etag) == wanted]
        pick = matching or sorted(candidates, key=lambda c: (c[0] is not None, c[0] or 0, c[1]))
        chosen.append(pick[-1][2])
    return chosen


def _etag(value: str) -> str:
    return value.strip().strip('"').lower()


def complete_multipart_upload(key: str, upload_id: str, parts: list[tuple[Part, str]]) -> dict:
    """Join the parts. Each comes with the SHA-256 the portal signed for it: the store checks them against the
    checksums it computed when the parts arrived (BadDigest otherwise) and records their composite checksum."""
    answer = _call("complete_multipart_upload", Key=key, UploadId=upload_id, MultipartUpload={"Parts": [
        {"PartNumber": part.number, "ETag": part.etag, "ChecksumSHA256": sha256_b64} for part, sha256_b64 in parts
    ]})
    return {"etag": answer.get("ETag", ""), "checksum": answer.get("ChecksumSHA256", "")}


def abort_multipart_upload(key: str, upload_id: str) -> None:
    try:
        _call("abort_multipart_upload", Key=key, UploadId=upload_id)
    except ObjectStoreError as exc:
        if exc.code != "NoSuchUpload":
            raise


def open_multipart_uploads(prefix: str = "") -> list[tuple[str, str, datetime]]:
    """(key, upload id, started) of every multipart upload the store still holds under `prefix`."""
    uploads, key_marker, id_marker = [], "", ""
    while True:
        params = {"Prefix": prefix, "MaxUploads": 1000}
        if key_marker:
            params.update(KeyMarker=key_marker, UploadIdMarker=id_marker)
        answer = _call("list_multipart_uploads", **params)
        uploads += [(u["Key"], u["UploadId"], u["Initiated"]) for u in answer.get("Uploads", [])]
        if not answer.get("IsTruncated"):
            return uploads
        key_marker, id_marker = answer.get("NextKeyMarker", ""), answer.get("NextUploadIdMarker", "")


# ------------------------------------------------------------------------------------------------ objects


def object_size(key: str) -> int | None:
    try:
        return int(_call("head_object", Key=key)["ContentLength"])
    except ObjectStoreError as exc:
        if exc.code in {"404", "NoSuchKey", "NotFound"}:
            return None
        raise


def open_stream(key: str):
    """The object's bytes as a stream (read it in chunks: nothing is held whole in memory)."""
    return _call("get_object", Key=key)["Body"]


def open_range(key: str, start: int, end: int):
    """Bytes [start, end) of the object as a stream (a large dataset file is staged on several streams)."""
    return _call("get_object", Key=key, Range=f"bytes={start}-{end - 1}")["Body"]


def upload_stream(key: str, source, size_hint: int = 0) -> None:
    """Write a stream to `key` as a multipart upload (boto3's transfer manager: bounded memory, parts in parallel)."""
    from boto3.s3.transfer import TransferConfig

    part = max(8 * 1024 * 1024, -(-size_hint // 9000))  # S3 allows 10,000 parts
    try:
        client().upload_fileobj(source, bucket(), key, Config=TransferConfig(
            multipart_threshold=part, multipart_chunksize=part, max_concurrency=4))
    except ClientError as exc:
        error = exc.response.get("Error", {})
        raise ObjectStoreError(str(error.get("Code") or "Error"), str(error.get("Message") or exc)) from None
    except BotoCoreError as exc:
        raise ObjectStoreError("Unreachable", f"the object store could not be reached ({exc.__class__.__name__})") from None


def put_empty_object(key: str) -> None:
    _call("put_object", Key=key, Body=b"", ContentType="application/octet-stream")


def delete_object(key: str) -> None:
    _call("delete_object", Key=key)


def presigned_download(key: str, filename: str, expires: int) -> str:
    """A GET URL the browser or the CLI fetches from the store itself (Range requests work), saving as `filename`."""
    ascii_name = "".join(ch if 32 <= ord(ch) < 127 and ch not in '"\\' else "_" for ch in filename)
    disposition = f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(filename)}"
    return client(public=True).generate_presigned_url(
        "get_object",
        Params={"Bucket": bucket(), "Key": key, "ResponseContentDisposition": disposition,
                "ResponseContentType": "application/octet-stream"},
        ExpiresIn=expires,
    )


def presigned_get(key: str, expires: int, *, public: bool = True) -> str:
    """A plain GET URL of the object: at the address the store is reached at from outside the portal
    (KAKEHASHI_S3_PUBLIC_URL) for a login node that fetches a dataset itself (cluster option data_pull), or at the
    portal's own (`public=False`) for the dispatch worker fetching many small files."""
    return client(public=public).generate_presigned_url("get_object", Params={"Bucket": bucket(), "Key": key},
                                                        ExpiresIn=expires)


def sign_put(key: str, sha256_b64: str, size: int, expires: int) -> tuple[str, dict[str, str]]:
    """A presigned PUT of a whole (small) object bound to its SHA-256, as `sign_part` binds a part: the store
    refuses other bytes (400 BadDigest) and a PUT without that header or with another value (403)."""
    url = client(public=True).generate_presigned_url(
        "put_object", Params={"Bucket": bucket(), "Key": key, "ChecksumSHA256": sha256_b64}, ExpiresIn=expires)
    return url, {CHECKSUM_HEADER: sha256_b64}


def list_objects(prefix: str, pages: int) -> list[tuple[str, int, datetime]]:
    """(key, size, last modified) of the objects under `prefix`, at most `pages` requests of 1,000."""
    found, token = [], ""
    for _ in range(pages):
        answer = _call("list_objects_v2", Prefix=prefix, MaxKeys=1000, **({"ContinuationToken": token} if token else {}))
        found += [(o["Key"], int(o["Size"]), o["LastModified"]) for o in answer.get("Contents", [])]
        token = answer.get("NextContinuationToken", "")
        if not answer.get("IsTruncated") or not token:
            break
    return found


def object_head(key: str) -> tuple[int, datetime] | None:
    """(size, last modified) of the object, None if there is none."""
    try:
        answer = _call("head_object", Key=key)
    except ObjectStoreError as exc:
        if exc.code in {"404", "NoSuchKey", "NotFound"}:
            return None
        raise
    return int(answer["ContentLength"]), answer["LastModified"]
