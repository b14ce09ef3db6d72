"""Sealed heads: each audit stream's latest head copied to an S3 bucket under Object Lock (compliance mode).

Whoever can write the audit table can rewrite a stream's rows *and* its owner's head consistently, and the
chain alone would still verify. The seal is out of that reach: the seal function (functions/audit_seal) reads
the audit table's stream and puts each new head as an object nobody can change or delete before its
retention ends, not even the account's root user. Verification then checks the chain against the latest
sealed head too (`audit_chain.verify`'s ``sealed``).

One object per (stream, head), never overwritten: ``heads/<stream>/<10^12 - n, 12 digits>.json``. The
inverted ``n`` makes the newest head the first key of its prefix, so the reader lists one page of versions
and reads one object, never an older head; and the writer needs no read at all
(its role may put objects and nothing else), so heads arriving out of order, or twice after a retry,
cannot make a seal go backwards: the same key gets the same body.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from support_agent import observability as obs
from support_agent.store.audit_chain import Head
from support_agent.store.dynamo import from_item

PREFIX = "heads/"
_N_LIMIT = 10**12


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


class SealWriter:
    """Puts heads; nothing else (the seal function's role holds ``s3:PutObject`` on ``heads/*`` only)."""

    def __init__(self, s3: Any, bucket: str, now: Callable[[], str]) -> None:
        self._s3, self._bucket, self._now = s3, bucket, now

    def put(self, stream: str, head: Head) -> Seal:
        seal = Seal(stream, head, self._now())
        # Object Lock requires an integrity checksum on every put (Content-MD5 or a flexible checksum); the
        # bucket's default retention (compliance mode) locks the version.
        self._s3.put_object(
            Bucket=self._bucket,
            Key=key(stream, head.n),
            Body=seal.body(),
            ContentType="application/json",
            ChecksumAlgorithm="SHA256",
        )
        return seal


class SealReader:
    """The latest sealed head of a stream, read from the object *versions*.

    Object Lock stops every change to a locked version, but a delete without a version id is still allowed
    to whoever holds ``s3:DeleteObject`` (our roles do not): it only adds a delete marker, which hides the
    key from a plain listing. Listing versions sees past markers, so a hidden seal still counts.
    """

    def __init__(self, s3: Any, bucket: str) -> None:
        self._s3, self._bucket = s3, bucket

    def latest(self, stream: str) -> Seal | None:
        kwargs: dict[str, Any] = {"Bucket": self._bucket, "Prefix": f"{PREFIX}{stream}/", "MaxKeys": 100}
        while True:
            listed = self._s3.list_object_versions(**kwargs)
            versions = listed.get("Versions") or []
            if versions:
                break
            if not listed.get("IsTruncated"):  # nothing but delete markers, or nothing at all
                return None
            kwargs.update(KeyMarker=listed["NextKeyMarker"], VersionIdMarker=listed["NextVersionIdMarker"])
        newest = min(versions, key=lambda v: str(v["Key"]))  # inverted n: the first key is the newest head
        got = self._s3.get_object(Bucket=self._bucket, Key=newest["Key"], VersionId=newest["VersionId"])
        seal = Seal.parse(got["Body"].read())
        # A stream whose name continues this one's past a "/" shares the prefix: its head is not ours.
        return seal if seal.stream == stream else None


def seal_records(records: Iterable[Mapping[str, Any]], writer: SealWriter) -> list[str]:
    """Seal the newest head of each stream a batch of the audit table's stream records appended to.

    Only INSERTs carry heads (a MODIFY or REMOVE is tampering, the watcher's business, and is never sealed).
    Returns the sequence numbers to report as failed: for a stream whose put failed, its first record in the
    batch, so that Lambda replays from there (replaying puts the same keys with the same bodies).
    """
    rows: list[dict[str, Any]] = []
    first_seq: dict[str, str] = {}
    for record in records:
        ddb = record.get("dynamodb") or {}
        if record.get("eventName") != "INSERT" or not ddb.get("NewImage"):
            continue
        row = from_item(ddb["NewImage"])
        rows.append(row)
        first_seq.setdefault(str(row.get("stream")), str(ddb.get("SequenceNumber")))
    failed: list[str] = []
    for stream, head in newest_heads(rows).items():
        try:
            writer.put(stream, head)
        except Exception:
            obs.logger.exception("audit_seal_failed", extra={"event": "audit_seal_failed", "stream": stream})
            obs.emit(obs.AUDIT_SEAL_FAILURES)
            failed.append(first_seq[stream])
    return failed
