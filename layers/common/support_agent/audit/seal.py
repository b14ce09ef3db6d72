"""Sealed heads: each audit stream's latest head copied to an S3 bucket under Object Lock (compliance mode).

Whoever can write the audit table can rewrite a stream's rows *and* its owner's head consistently, and the
chain alone would still verify. The seal is out of that reach: the seal function (functions/audit_seal) reads
the audit table's stream and puts each new head as an object nobody can change or delete before its
retention ends, not even the account's root user. Verification then checks the chain against the latest
sealed head too (`chain.verify`'s ``sealed``).

One object per (stream, head), never overwritten: ``heads/<stream>/<10^12 - n, 12 digits>.json``. The
inverted ``n`` makes the newest head the first key of its prefix, so the reader lists one page of versions
and reads one object, never an older head; heads arriving out of order cannot make a seal go backwards.

Object Lock keeps every *version* but not a key: a PutObject at a sealed key adds a newer version. So the
writer puts with ``If-None-Match: *`` and the bucket policy denies any PutObject without it (template.yaml,
``NoPutOverASealedKey``); and the reader takes the key's *oldest* version, the one sealed first, which no
later put, delete marker or policy change can displace. A replayed batch puts the same heads again: S3
answers 412, and the writer reads the stored seal: the same head is done; another head is a `SealConflict`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from boto3.dynamodb.types import TypeDeserializer
from botocore.exceptions import ClientError

from support_agent import observability as obs
from support_agent.audit.chain import Head

PREFIX = "heads/"
_N_LIMIT = 10**12
# A stream record's image as DynamoDB typed it (numbers as Decimal: `newest_heads` takes their int). boto3's own
# reader, not store/dynamo.py's: this package sits below the stores and imports none of them.
_IMAGE = TypeDeserializer()


def key(stream: str, n: int) -> str:
    if not 0 < n < _N_LIMIT:
        raise ValueError(f"n out of range: {n}")
    return f"{PREFIX}{stream}/{_N_LIMIT - n:012d}.json"


@dataclass(frozen=True)
class Seal:
    """A stream's head as sealed: its ``n``, ``hash`` and last row's ``event_id``, and when it was sealed."""

    stream: str
    head: Head
    sealed_at: str = ""

    def body(self) -> bytes:
        document = {
            "stream": self.stream,
            "n": self.head.n,
            "hash": self.head.hash,
            "eventId": self.head.event_id,
            "sealedAt": self.sealed_at,
        }
        return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def parse(cls, body: bytes) -> Seal:
        document = json.loads(body)
        head = Head(int(document["n"]), str(document["hash"]), str(document.get("eventId") or ""))
        return cls(str(document["stream"]), head, str(document.get("sealedAt") or ""))


def newest_heads(rows: Iterable[Mapping[str, Any]]) -> dict[str, Head]:
    """Per stream, the head its newest chained row makes (rows without ``n`` were written before the chain)."""
    heads: dict[str, Head] = {}
    for row in rows:
        if row.get("n") is None or not row.get("hash"):
            continue
        stream, n = str(row["stream"]), int(row["n"])
        if n > heads.get(stream, Head()).n:
            heads[stream] = Head(n, str(row["hash"]), str(row.get("event_id") or ""))
    return heads


class SealConflict(Exception):
    """A head's key already holds another head of the stream: the chain at that ``n`` is not what was sealed."""

    def __init__(self, stream: str, head: Head, sealed: Seal) -> None:
        super().__init__(f"{stream} n={head.n}: sealed {sealed.head.hash}, now {head.hash}")
        self.stream, self.head, self.sealed = stream, head, sealed


class SealWriter:
    """Puts heads, never over a sealed key (the seal function's role: ``s3:PutObject`` on ``heads/*``, and
    ``s3:GetObject`` there to compare a replay with what is sealed)."""

    def __init__(self, s3: Any, bucket: str, now: Callable[[], str]) -> None:
        self._s3, self._bucket, self._now = s3, bucket, now

    def put(self, stream: str, head: Head) -> Seal:
        """The seal of ``head``: put now, or the one already at its key (a replay); `SealConflict` when that key
        holds another head."""
        seal = Seal(stream, head, self._now())
        try:
            # Object Lock requires an integrity checksum on every put (Content-MD5 or a flexible checksum); the
            # bucket's default retention (compliance mode) locks the version. If-None-Match: the bucket policy
            # refuses a put without it.
            self._s3.put_object(
                Bucket=self._bucket,
                Key=key(stream, head.n),
                Body=seal.body(),
                ContentType="application/json",
                ChecksumAlgorithm="SHA256",
                IfNoneMatch="*",
            )
            return seal
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "PreconditionFailed":
                raise
        # The key is sealed: a replay if it holds this head (sealedAt is when it was first sealed, so bodies
        # differ; the head is what is compared).
        stored = Seal.parse(self._s3.get_object(Bucket=self._bucket, Key=key(stream, head.n))["Body"].read())
        if (stored.stream, stored.head) != (stream, head):
            raise SealConflict(stream, head, stored)
        return stored


class SealReader:
    """The latest sealed head of a stream: the newest key's *oldest* version.

    Object Lock stops every change to a locked version, but not a newer version of its key (a put without
    ``If-None-Match``, were the bucket policy changed) nor a delete without a version id, allowed to whoever
    holds ``s3:DeleteObject`` (our roles do not): it only adds a delete marker, which hides the key from a plain
    listing. Listing versions sees past markers, so a hidden seal still counts, and the oldest version of a key
    is the one sealed first, which nothing written later displaces.
    """

    def __init__(self, s3: Any, bucket: str) -> None:
        self._s3, self._bucket = s3, bucket

    def latest(self, stream: str) -> Seal | None:
        kwargs: dict[str, Any] = {"Bucket": self._bucket, "Prefix": f"{PREFIX}{stream}/", "MaxKeys": 100}
        oldest: dict[str, Any] | None = None  # of the newest key (inverted n: the first key listed with a version)
        while True:
            listed = self._s3.list_object_versions(**kwargs)
            # A key's versions are listed newest first, across pages if there are many: its last one is the oldest.
            for version in listed.get("Versions") or []:
                if oldest is not None and version["Key"] != oldest["Key"]:
                    break
                oldest = version
            else:  # the page ended on the newest key (or before any version): the next may hold older ones
                if listed.get("IsTruncated"):
                    kwargs.update(KeyMarker=listed["NextKeyMarker"], VersionIdMarker=listed["NextVersionIdMarker"])
                    continue
            break
        if oldest is None:  # nothing but delete markers, or nothing at all
            return None
        got = self._s3.get_object(Bucket=self._bucket, Key=oldest["Key"], VersionId=oldest["VersionId"])
        seal = Seal.parse(got["Body"].read())
        # A stream whose name continues this one's past a "/" shares the prefix: its head is not ours.
        return seal if seal.stream == stream else None


def seal_records(records: Iterable[Mapping[str, Any]], writer: SealWriter) -> list[str]:
    """Seal the newest head of each stream a batch of the audit table's stream records appended to.

    Only INSERTs carry heads (a MODIFY or REMOVE is tampering, the watcher's business, and is never sealed).
    Returns the sequence numbers to report as failed: for a stream whose put failed, its first record in the
    batch, so that Lambda replays from there (a replay finds the heads already put and takes them as done).
    A key holding another head (`SealConflict`) is tampering: logged and counted as a seal failure
    (AuditSealFailedAlarm), not replayed (it never would be put); verification reads the stream ``broken``
    while that key is its newest.
    """
    rows: list[dict[str, Any]] = []
    first_seq: dict[str, str] = {}
    for record in records:
        ddb = record.get("dynamodb") or {}
        if record.get("eventName") != "INSERT" or not ddb.get("NewImage"):
            continue
        row = {name: _IMAGE.deserialize(value) for name, value in ddb["NewImage"].items()}
        rows.append(row)
        first_seq.setdefault(str(row.get("stream")), str(ddb.get("SequenceNumber")))
    failed: list[str] = []
    for stream, head in newest_heads(rows).items():
        try:
            writer.put(stream, head)
        except SealConflict as conflict:
            obs.logger.error(
                "audit_seal_conflict",
                extra={
                    "event": "audit_seal_conflict",
                    "stream": stream,
                    "n": head.n,
                    "hash": head.hash,
                    "sealed_hash": conflict.sealed.head.hash,
                    "sealed_at": conflict.sealed.sealed_at,
                },
            )
            obs.emit(obs.AUDIT_SEAL_FAILURES)
        except Exception:
            obs.logger.exception("audit_seal_failed", extra={"event": "audit_seal_failed", "stream": stream})
            obs.emit(obs.AUDIT_SEAL_FAILURES)
            failed.append(first_seq[stream])
    return failed
