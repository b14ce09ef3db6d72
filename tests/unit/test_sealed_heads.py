"""Sealed heads (audit/seal.py) against moto's S3: keys sort newest first, a batch seals each stream's
newest head once, a failed put reports the stream's first record, the reader takes the newest key's oldest
version, and the writer never puts over a sealed key (moto enforces ``If-None-Match: *``)."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from support_agent import observability as obs
from support_agent.audit.chain import Head, chain
from support_agent.audit.seal import (
    Seal,
    SealConflict,
    SealReader,
    SealWriter,
    key,
    newest_heads,
    seal_records,
)
from support_agent.store.audit import AuditRecord

BUCKET = "sealed-heads"


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET, ObjectLockEnabledForBucket=True)
        client.put_object_lock_configuration(
            Bucket=BUCKET,
            ObjectLockConfiguration={
                "ObjectLockEnabled": "Enabled",
                "Rule": {"DefaultRetention": {"Mode": "COMPLIANCE", "Days": 1}},
            },
        )
        yield client


def writer(s3: Any) -> SealWriter:
    return SealWriter(s3, BUCKET, lambda: "2026-12-03T10:00:00Z")


def inserts(stream: str, count: int, first_seq: int = 100) -> list[dict[str, Any]]:
    """The stream records of `count` chained rows of one stream, as Lambda delivers them."""
    records = [
        AuditRecord(stream, "tool_call", "customer-7", "ok", 7, "t", event_id=f"01J{i:023d}") for i in range(count)
    ]
    chained, _ = chain(Head(), records)
    return [
        {
            "eventName": "INSERT",
            "dynamodb": {"NewImage": r.put("Audit")["Put"]["Item"], "SequenceNumber": str(first_seq + i)},
        }
        for i, r in enumerate(chained)
    ]


def test_keys_sort_newest_first() -> None:
    assert sorted([key("conv_a", 9), key("conv_a", 10), key("conv_a", 1)]) == [
        key("conv_a", 10),
        key("conv_a", 9),
        key("conv_a", 1),
    ]
    with pytest.raises(ValueError):
        key("conv_a", 0)


def test_newest_heads_skip_rows_before_the_chain() -> None:
    rows = [
        {"stream": "a", "event_id": "1"},  # written before the chain: no n
        {"stream": "a", "event_id": "2", "n": 1, "hash": "h1"},
        {"stream": "a", "event_id": "3", "n": 2, "hash": "h2"},
        {"stream": "b", "event_id": "4", "n": 5, "hash": "h5"},
    ]
    assert newest_heads(reversed(rows)) == {"a": Head(2, "h2", "3"), "b": Head(5, "h5", "4")}


def test_a_batch_seals_each_streams_newest_head_and_skips_changes(s3: Any) -> None:
    records = inserts("conv_a", 3) + inserts("approval#x", 2, first_seq=200)
    records.append({"eventName": "MODIFY", "dynamodb": {"NewImage": records[0]["dynamodb"]["NewImage"]}})
    assert seal_records(records, writer(s3)) == []
    listed = s3.list_object_versions(Bucket=BUCKET)["Versions"]
    assert sorted(v["Key"] for v in listed) == sorted([key("conv_a", 3), key("approval#x", 2)])
    sealed = SealReader(s3, BUCKET).latest("conv_a")
    assert sealed is not None and sealed.head.n == 3 and sealed.sealed_at == "2026-12-03T10:00:00Z"
    newest = records[2]["dynamodb"]["NewImage"]
    assert sealed.head == Head(3, newest["hash"]["S"], newest["event_id"]["S"])


def test_a_failed_put_reports_its_streams_first_record(s3: Any) -> None:
    class Refusing(SealWriter):
        def put(self, stream: str, head: Head) -> Seal:
            if stream == "approval#x":
                raise RuntimeError("S3 said no")
            return super().put(stream, head)

    records = inserts("conv_a", 2) + inserts("approval#x", 3, first_seq=200)
    assert seal_records(records, Refusing(s3, BUCKET, lambda: "t")) == ["200"]
    assert SealReader(s3, BUCKET).latest("conv_a") is not None
    assert SealReader(s3, BUCKET).latest("approval#x") is None


def test_the_reader_takes_the_newest_head_and_only_its_own_stream(s3: Any) -> None:
    w = writer(s3)
    w.put("conv_a", Head(4, "h4", "e4"))
    w.put("conv_a", Head(9, "h9", "e9"))
    w.put("conv_a", Head(7, "h7", "e7"))  # arrives late: the seal does not go back
    w.put("conv_a/b", Head(12, "x", "y"))  # a name that continues ours past a "/"
    reader = SealReader(s3, BUCKET)
    assert reader.latest("conv_a") == Seal("conv_a", Head(9, "h9", "e9"), "2026-12-03T10:00:00Z")
    assert reader.latest("conv_b") is None
    s3.delete_object(Bucket=BUCKET, Key=key("conv_a", 9))  # a delete marker hides the key, not the version
    assert reader.latest("conv_a") == Seal("conv_a", Head(9, "h9", "e9"), "2026-12-03T10:00:00Z")


def test_the_reader_takes_the_keys_oldest_version(s3: Any) -> None:
    """Issue 30 finding 6: Object Lock keeps a version, not a key: one PutObject at the sealed key (no
    ``If-None-Match``, the bucket policy's business) made a newer version, and the reader took it. The sealed
    head is the key's first version, however many come after it (here past the listing's first page)."""
    writer(s3).put("conv_a", Head(9, "h9", "e9"))
    forged = Seal("conv_a", Head(9, "forged", "e9"), "2026-12-03T11:00:00Z").body()
    for _ in range(101):
        s3.put_object(Bucket=BUCKET, Key=key("conv_a", 9), Body=forged, ChecksumAlgorithm="SHA256")
    assert SealReader(s3, BUCKET).latest("conv_a") == Seal("conv_a", Head(9, "h9", "e9"), "2026-12-03T10:00:00Z")


def test_the_writer_never_puts_over_a_sealed_key(s3: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 30 finding 6: the writer sends ``If-None-Match: *``. A replay (the same head, sealed again later) is
    answered 412 and is success, the first seal kept; another head at a sealed key is a conflict: not put, not
    replayed (it never would be put), logged and counted as a seal failure (AuditSealFailedAlarm)."""
    emitted: list[str] = []
    monkeypatch.setattr(obs, "emit", lambda name, value=1: emitted.append(name))
    records = inserts("conv_a", 2)
    assert seal_records(records, writer(s3)) == []
    later = SealWriter(s3, BUCKET, lambda: "2026-12-03T12:00:00Z")
    assert seal_records(records, later) == []  # a replay of the batch, sealed again later
    newest = records[-1]["dynamodb"]["NewImage"]
    assert later.put("conv_a", Head(2, newest["hash"]["S"], newest["event_id"]["S"])).sealed_at == (
        "2026-12-03T10:00:00Z"  # the stored seal, not a new one
    )
    assert emitted == []

    rewritten = inserts("conv_a", 2)
    rewritten[-1]["dynamodb"]["NewImage"]["hash"] = {"S": "f" * 64}  # another head for n = 2
    with pytest.raises(SealConflict):
        later.put("conv_a", Head(2, "f" * 64, newest["event_id"]["S"]))
    logged = io.StringIO()
    handler = obs.logger.registered_handler
    assert isinstance(handler, logging.StreamHandler)
    previous = handler.setStream(logged)
    try:
        assert seal_records(rewritten, later) == []
    finally:
        handler.setStream(previous)
    assert emitted == [obs.AUDIT_SEAL_FAILURES]
    (line,) = [json.loads(x) for x in logged.getvalue().splitlines() if "audit_seal_conflict" in x]
    assert (line["level"], line["stream"], line["n"], line["sealed_hash"]) == (
        "ERROR",
        "conv_a",
        2,
        newest["hash"]["S"],
    )
    assert len(s3.list_object_versions(Bucket=BUCKET, Prefix="heads/conv_a/")["Versions"]) == 1  # nothing put over it
    sealed = SealReader(s3, BUCKET).latest("conv_a")
    assert sealed is not None and sealed.head.hash == newest["hash"]["S"]
