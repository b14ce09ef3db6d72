"""The audit watcher's handler on hand-made stream records (the Lambda event shape of a DynamoDB stream):
MODIFY and REMOVE are counted and logged with the row's key only, INSERT is not; the template gives the
audit table a stream, no TTL, and the watcher a role that reads that stream and nothing else."""

from __future__ import annotations

import importlib.util
import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support_agent import observability as obs
from support_agent.audit import watch as audit_watch
from tests.support.metrics import emf_total

ROOT = Path(__file__).resolve().parents[2]
STREAM_ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/Audit/stream/2026-01-01T00:00:00.000"
SECRET_CONTENT = "card ending 4242, refund of 199.00 for order 1042"  # in the images: must never be logged


def record(
    name: str, seq: int, stream: str = "conv_01JTEST", event_id: str = "01JEVENT", **extra: Any
) -> dict[str, Any]:
    image = {
        "stream": {"S": stream},
        "event_id": {"S": event_id},
        "customer_id": {"N": "7"},
        "detail": {"S": SECRET_CONTENT},
    }
    ddb: dict[str, Any] = {
        "ApproximateCreationDateTime": 1767225600,
        "Keys": {"stream": {"S": stream}, "event_id": {"S": event_id}},
        "SequenceNumber": str(seq),
        "SizeBytes": 120,
        "StreamViewType": "NEW_AND_OLD_IMAGES",
    }
    if name in ("INSERT", "MODIFY"):
        ddb["NewImage"] = image
    if name in ("MODIFY", "REMOVE"):
        ddb["OldImage"] = {**image, "detail": {"S": SECRET_CONTENT + " (before)"}}
    return {
        "eventID": f"rec-{seq}",
        "eventName": name,
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1",
        "dynamodb": ddb,
        "eventSourceARN": STREAM_ARN,
        **extra,
    }


@pytest.fixture
def logs() -> Iterator[io.StringIO]:
    buffer = io.StringIO()
    handler = obs.logger.registered_handler
    assert isinstance(handler, logging.StreamHandler)
    previous = handler.setStream(buffer)
    try:
        yield buffer
    finally:
        handler.setStream(previous)


@pytest.fixture
def handler() -> Any:
    spec = importlib.util.spec_from_file_location("audit_watcher_app", ROOT / "functions/audit_watcher/app.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    obs.metrics.clear_metrics()
    return module.handler


def tampered_lines(buffer: io.StringIO) -> list[dict[str, Any]]:
    lines = [json.loads(x) for x in buffer.getvalue().splitlines() if x.strip()]
    return [line for line in lines if line.get("event") == "audit_row_tampered"]


def tampered_count(out: str) -> float:
    return emf_total(out, obs.AUDIT_ROWS_TAMPERED)


def test_modify_and_remove_are_counted_and_logged_with_the_key_only(
    handler: Any, logs: io.StringIO, capsys: pytest.CaptureFixture[str]
) -> None:
    event = {
        "Records": [
            record("INSERT", 101, event_id="01JA"),
            record("MODIFY", 102, event_id="01JB"),
            record("INSERT", 103, event_id="01JC"),
            record("REMOVE", 104, stream="approval#apr_01J", event_id="01JD"),
        ]
    }
    out = handler(event, None)
    assert out == {"batchItemFailures": []}
    lines = tampered_lines(logs)
    assert [(x["event_name"], x["stream"], x["event_id"], x["sequence_number"]) for x in lines] == [
        ("MODIFY", "conv_01JTEST", "01JB", "102"),
        ("REMOVE", "approval#apr_01J", "01JD", "104"),
    ]
    assert all(x["level"] == "ERROR" and x["record_id"].startswith("rec-") for x in lines)
    assert tampered_count(capsys.readouterr().out) == 2
    assert SECRET_CONTENT not in logs.getvalue()
    assert "4242" not in logs.getvalue()


def test_appends_only_emit_nothing(handler: Any, logs: io.StringIO, capsys: pytest.CaptureFixture[str]) -> None:
    out = handler({"Records": [record("INSERT", n, event_id=f"01J{n}") for n in range(200, 210)]}, None)
    assert out == {"batchItemFailures": []}
    assert tampered_lines(logs) == []
    assert tampered_count(capsys.readouterr().out) == 0


def test_a_service_removal_is_counted_too_the_audit_table_has_no_ttl(
    handler: Any, logs: io.StringIO, capsys: pytest.CaptureFixture[str], sam: dict[str, Any]
) -> None:
    """DynamoDB's own (TTL) deletions carry userIdentity; the audit table has no TTL, so one means someone
    enabled it there: it is tampering like any other, and the line says who."""
    assert "TimeToLiveSpecification" not in sam["Resources"]["AuditTable"]["Properties"]
    ttl = {"userIdentity": {"type": "Service", "principalId": "dynamodb.amazonaws.com"}}
    handler({"Records": [record("REMOVE", 300, **ttl)]}, None)
    (line,) = tampered_lines(logs)
    assert (line["event_name"], line["by"]) == ("REMOVE", "dynamodb.amazonaws.com")
    assert tampered_count(capsys.readouterr().out) == 1


def test_a_record_without_keys_still_counts() -> None:
    """Fail loud: an odd record (no keys, an unknown event name) is counted, never skipped."""
    obs.metrics.clear_metrics()
    change = audit_watch.check({"eventName": "MODIFY", "dynamodb": {}})
    assert change is not None and (change.stream, change.event_id) == (None, None)
    assert audit_watch.check({"eventName": "SOMETHING_NEW", "dynamodb": {}}) is not None
    assert audit_watch.check({"eventName": "INSERT", "dynamodb": {}}) is None
    obs.metrics.clear_metrics()


# ------------------------------------------------------------------ the template


def test_the_audit_table_streams_both_images(sam: dict[str, Any]) -> None:
    props = sam["Resources"]["AuditTable"]["Properties"]
    assert props["StreamSpecification"] == {"StreamViewType": "NEW_AND_OLD_IMAGES"}


def test_the_watcher_mapping(sam: dict[str, Any]) -> None:
    (mapping,) = [
        r["Properties"]
        for r in sam["Resources"].values()
        if r["Type"] == "AWS::Lambda::EventSourceMapping"
        and r["Properties"]["FunctionName"] == {"Ref": "AuditWatcherFunction"}
    ]
    assert mapping["EventSourceArn"] == {"Fn::GetAtt": ["AuditTable", "StreamArn"]}
    assert mapping["StartingPosition"] == "TRIM_HORIZON"
    assert mapping["BisectBatchOnFunctionError"] is True
    assert 0 <= mapping["MaximumRetryAttempts"] <= 10
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert mapping["DestinationConfig"] == {"OnFailure": {"Destination": {"Fn::GetAtt": ["AuditWatcherDLQ", "Arn"]}}}
    fn = sam["Resources"]["AuditWatcherFunction"]["Properties"]
    assert fn["Environment"]["Variables"]["POWERTOOLS_SERVICE_NAME"] == "audit_watcher"
    assert "Events" not in fn  # a SAM DynamoDB event would attach a managed policy on Resource "*"


def test_the_local_stack_polls_the_audit_stream_for_the_watcher(sam: dict[str, Any]) -> None:
    """devstack reads the mapping from the template (moto's CloudFormation does not deploy it)."""
    from types import SimpleNamespace

    from devstack.events import stream_sources

    (source,) = [s for s in stream_sources(SimpleNamespace(sam_template=sam)) if s.function == "AuditWatcherFunction"]  # type: ignore[arg-type]
    assert (source.table_logical_id, source.starting_position, source.on_failure_queue) == (
        "AuditTable",
        "TRIM_HORIZON",
        "AuditWatcherDLQ",
    )
    assert source.max_retries == 5 and source.batch_size == 100
