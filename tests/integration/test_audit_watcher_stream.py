"""AuditWatcherFunction on the template deployed into moto: the audit table's real stream, read with
``get_records`` from the deployed table's ``LatestStreamArn`` and handed to the handler in the Lambda event
shape (devstack.events.stream_event, what the local stack sends too). A chat turn's audit rows and a
TransactWriteItems append are ignored; a plain PutItem over an existing row and a DeleteItem fire."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config

from devstack.events import stream_event
from support_agent import observability as obs
from support_agent.messages import Usage
from tests.integration.conftest import Api, load_handler
from tests.support.metrics import emf_total
from tests.support.scripted import seed_scenario


class Stream:
    """The audit table's stream from now on (moto's LATEST), read as the event source mapping would."""

    def __init__(self, table: str) -> None:
        # botocore sends stream calls to an account-id endpoint moto's in-process mock does not route.
        self.streams = boto3.client("dynamodbstreams", config=Config(account_id_endpoint_mode="disabled"))
        self.arn = boto3.client("dynamodb").describe_table(TableName=table)["Table"]["LatestStreamArn"]
        (shard,) = self.streams.describe_stream(StreamArn=self.arn)["StreamDescription"]["Shards"]
        self.iterator = self.streams.get_shard_iterator(
            StreamArn=self.arn, ShardId=shard["ShardId"], ShardIteratorType="LATEST"
        )["ShardIterator"]

    def event(self) -> dict[str, Any]:
        got = self.streams.get_records(ShardIterator=self.iterator, Limit=1000)
        self.iterator = got["NextShardIterator"]
        return stream_event(got["Records"], self.arn)


@pytest.fixture
def watched(api: Api, capsys: pytest.CaptureFixture[str]) -> Iterator[tuple[Stream, Any, io.StringIO]]:
    buffer = io.StringIO()
    log_handler = obs.logger.registered_handler
    assert isinstance(log_handler, logging.StreamHandler)
    previous = log_handler.setStream(buffer)
    obs.metrics.clear_metrics()
    capsys.readouterr()
    try:
        yield (
            Stream(api.stack.function_env("ChatFunction")["AUDIT_TABLE"]),
            load_handler(api.stack, "AuditWatcherFunction"),
            buffer,
        )
    finally:
        log_handler.setStream(previous)


def tampered(buffer: io.StringIO) -> list[tuple[str, str, str]]:
    lines = [json.loads(x) for x in buffer.getvalue().splitlines() if x.strip()]
    return [(x["event_name"], x["stream"], x["event_id"]) for x in lines if x.get("event") == "audit_row_tampered"]


def tampered_metric(out: str) -> float:
    return emf_total(out, obs.AUDIT_ROWS_TAMPERED)


def a_turn_with_audited_tools(api: Api) -> str:
    api.model.script = seed_scenario(
        "arrived broken", "Order 1042: the refund needs a teammate's approval.", (Usage(100, 10),) * 3
    )
    status, body, _ = api.call("POST", "/api/chat", {"conversationId": None, "message": "Refund order 1042"})
    assert status == 200, body
    return str(body["conversationId"])


def rows_of(table: str, stream: str) -> list[dict[str, Any]]:
    out = boto3.client("dynamodb").query(
        TableName=table,
        KeyConditionExpression="#s = :s",
        ExpressionAttributeNames={"#s": "stream"},
        ExpressionAttributeValues={":s": {"S": stream}},
    )
    return list(out["Items"])


@pytest.fixture
def audited_turn(api: Api, watched: tuple[Stream, Any, io.StringIO]) -> tuple[str, str]:
    """A chat turn whose tool calls were audited, made while watched: (the audit table, its conversation id)."""
    return api.stack.function_env("ChatFunction")["AUDIT_TABLE"], a_turn_with_audited_tools(api)


def test_appends_are_not_tampering(
    watched: tuple[Stream, Any, io.StringIO], audited_turn: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    stream, handler, logs = watched
    table, cid = audited_turn
    # An append in a transaction of our own, as every writer appends: attribute_not_exists on the key.
    boto3.client("dynamodb").transact_write_items(
        TransactItems=[
            {
                "Put": {
                    "TableName": table,
                    "Item": {"stream": {"S": cid}, "event_id": {"S": "01ZZZZZZZZZZZZZZZZZZZZZZZZ"}, "n": {"N": "99"}},
                    "ConditionExpression": "attribute_not_exists(event_id)",
                }
            }
        ]
    )
    event = stream.event()
    audit_inserts = [r for r in event["Records"] if r["dynamodb"]["Keys"]["stream"]["S"] == cid]
    assert len(audit_inserts) >= 3  # the two tool calls' rows and ours, at least
    assert {r["eventName"] for r in event["Records"]} == {"INSERT"}
    assert handler(event, None) == {"batchItemFailures": []}
    assert tampered(logs) == []
    assert tampered_metric(capsys.readouterr().out) == 0


def test_a_plain_put_over_a_row_and_a_delete_fire_with_the_key(
    watched: tuple[Stream, Any, io.StringIO], audited_turn: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    stream, handler, logs = watched
    table, cid = audited_turn
    first, second, *_ = rows_of(table, cid)
    stream.event()  # the turn's appends, read past
    ddb = boto3.client("dynamodb")
    # What an outside reviewer did: a plain PutItem (no condition) over an existing row, content changed.
    forged = {**first, "detail": {"S": "nothing to see here"}}
    ddb.put_item(TableName=table, Item=forged)
    ddb.delete_item(TableName=table, Key={"stream": second["stream"], "event_id": second["event_id"]})
    event = stream.event()
    assert [r["eventName"] for r in event["Records"]] == ["MODIFY", "REMOVE"]
    assert handler(event, None) == {"batchItemFailures": []}
    assert tampered(logs) == [
        ("MODIFY", cid, first["event_id"]["S"]),
        ("REMOVE", cid, second["event_id"]["S"]),
    ]
    assert tampered_metric(capsys.readouterr().out) == 2
    assert "nothing to see here" not in logs.getvalue()  # the key only, never the content
