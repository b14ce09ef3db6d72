"""Issue 16's "done when", through `make dev`'s stack: the turn's heads sealed in the Object Lock bucket by the
seal function (on the same stream), then a plain PutItem over an existing audit row of a conversation makes
`GET /api/audit/verify` answer broken (kind changed) and the watcher log the alarm.

The local stack polls moto's DynamoDB stream of the audit table (devstack/events.py) and invokes
AuditWatcherFunction's worker pool with the records in the Lambda event shape. The observable is the
worker's own output (its log lines and EMF metrics go to its stderr): the watcher's pool is restarted
under ``capfd``, so the new worker process writes into the captured stderr.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import boto3
import httpx
import pytest
from boto3.dynamodb.conditions import Key

from devstack.local import REGION, LocalStack
from tests.e2e.test_payments_local import Stack

WATCHER = "AuditWatcherFunction"


@pytest.fixture
def stack(seeded_stack: LocalStack) -> Iterator[Stack]:
    with httpx.Client(base_url=seeded_stack.url, timeout=90) as http:
        yield Stack(seeded_stack, http)


def _audit_table(stack: Stack) -> Any:
    session = boto3.Session(region_name=REGION, aws_access_key_id="local", aws_secret_access_key="local")
    return session.resource("dynamodb", endpoint_url=stack.local.moto_url).Table(
        stack.local.stack.physical_ids["AuditTable"]
    )


def _json_lines(text: str) -> list[dict[str, Any]]:
    out = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def test_a_plain_put_over_an_audit_row_is_logged_and_counted_by_the_watcher(
    stack: Stack, capfd: pytest.CaptureFixture[str]
) -> None:
    stack.local.pools[WATCHER].close()  # its next worker starts now, writing into capfd's stderr
    turn = stack.chat(7, "Where is my order 1042?")
    conversation = turn["conversationId"]
    verified: dict[str, Any] = {}
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:  # the seal function reads the stream as the watcher does
        verified = stack.http.get(f"/api/audit/verify?conversationId={conversation}", headers=stack.lead).json()
        if verified.get("sealedAt"):
            break
        time.sleep(0.25)
    assert (verified["status"], verified["firstBreak"]) == ("ok", None)
    assert verified["sealedAt"] and verified["sealedThrough"] >= 1, verified
    table = _audit_table(stack)
    rows = table.query(KeyConditionExpression=Key("stream").eq(conversation), ConsistentRead=True)["Items"]
    assert rows, "the turn's tool call wrote an audit row"
    row = rows[0]
    table.put_item(Item={**row, "detail": "rewritten by hand"})  # no condition: an overwrite

    seen, deadline = "", time.monotonic() + 20
    lines: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        seen += capfd.readouterr().err
        lines = [x for x in _json_lines(seen) if x.get("event") == "audit_row_tampered"]
        if any(x["stream"] == conversation for x in lines):
            break
        time.sleep(0.25)
    ours = [x for x in lines if x["stream"] == conversation]
    assert [(x["event_name"], x["event_id"], x["level"]) for x in ours] == [("MODIFY", row["event_id"], "ERROR")]
    assert "rewritten by hand" not in seen
    emf = [x for x in _json_lines(seen) if "_aws" in x and "AuditRowsTampered" in x]
    assert emf and all(x["service"] == "audit_watcher" for x in emf)

    verified = stack.http.get(f"/api/audit/verify?conversationId={conversation}", headers=stack.lead).json()
    assert verified["status"] == "broken"
    assert verified["firstBreak"] == {"eventId": row["event_id"], "kind": "changed", "stream": conversation}
