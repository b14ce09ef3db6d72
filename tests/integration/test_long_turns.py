"""Turns past the synchronous time, on the deployed template: the chat function hands a turn to TurnQueue and
answers 202; TurnWorkerFunction finishes it with the same loop; duplicates stop at the take-over; a dead worker's
turn is sent again by the turn sweep; a dead-lettered turn ends failed."""

from __future__ import annotations

import inspect
import json
import threading
import time
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType

from support_agent.store.dynamo import to_item
from support_agent.store.turns import TurnStore
from tests.integration.conftest import Api
from tests.support.aws import serialised_moto
from tests.support.scripted import answer, tool_use, tools
from tests.support.threads import run_together


def queue(api: Api, logical_id: str = "TurnQueue") -> str:
    return api.stack.physical_ids[logical_id]


def take_messages(api: Api, logical_id: str = "TurnQueue") -> list[dict[str, Any]]:
    got = boto3.client("sqs").receive_message(QueueUrl=queue(api, logical_id), MaxNumberOfMessages=10)
    return list(got.get("Messages", []))


def sqs_event(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "Records": [
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": {},
                "messageAttributes": {},
                "md5OfBody": m["MD5OfBody"],
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:TurnQueue",
                "awsRegion": "us-east-1",
            }
            for m in messages
        ]
    }


def work(api: Api, messages: list[dict[str, Any]]) -> dict[str, Any]:
    api.use_function("TurnWorkerFunction")
    return dict(api.handlers["TurnWorkerFunction"](sqs_event(messages), None))


class PerInstance:
    """The worker module's batch processor, one per thread: threads here stand for concurrent Lambda instances,
    which never share module state (Powertools' processor keeps the batch it is processing on itself)."""

    def __init__(self, make: Any) -> None:
        self._make, self._local = make, threading.local()

    def _own(self) -> Any:
        if not hasattr(self._local, "processor"):
            self._local.processor = self._make()
        return self._local.processor

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._own()(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._own(), name)


def turn_view(api: Api, location: str) -> dict[str, Any]:
    status, body, _ = api.call("GET", location)
    assert status == 200, body
    return dict(body)


def header(api: Api, cid: str) -> dict[str, Any]:
    item = boto3.client("dynamodb").get_item(
        TableName=api.stack.physical_ids["ConversationsTable"], Key=to_item({"conversation_id": cid, "seq": 0})
    )["Item"]
    return {k: next(iter(v.values())) for k, v in item.items()}


def test_respond_async_hands_over_at_once_and_the_worker_finishes_the_turn(api: Api) -> None:
    body = {"conversationId": None, "message": "Where is my order 1042?"}
    status, running, headers = api.call(
        "POST", "/api/chat", body, headers={"prefer": "respond-async", "idempotency-key": "long-1"}
    )
    assert status == 202, running
    assert running["status"] == "running" and headers["Preference-Applied"] == "respond-async"
    location = headers["Location"]
    assert location == f"/api/conversations/{running['conversationId']}/turns/{running['turnId']}"
    assert api.model.requests == []  # no model call in the request
    assert turn_view(api, location)["status"] == "running"
    # A resend while it runs: the same turn, 202.
    again = api.call("POST", "/api/chat", body, headers={"idempotency-key": "long-1"})
    assert (again[0], again[1]["turnId"]) == (202, running["turnId"])

    (message,) = take_messages(api)
    assert json.loads(message["Body"])["turnId"] == running["turnId"]
    assert header(api, running["conversationId"])["lease_owner"].startswith("handed_")
    api.model.script = [tools(tool_use("lookup_order", {"order_id": 1042})), answer("Order 1042 was delivered.")]
    assert work(api, [message]) == {"batchItemFailures": []}

    done = turn_view(api, location)
    assert (done["status"], done["error"]) == ("completed", None)
    assert done["response"]["reply"] == "Order 1042 was delivered." and done["response"]["iterations"] == 2
    assert "lease_owner" not in header(api, running["conversationId"])  # released
    _, view, _ = api.call("GET", f"/api/conversations/{running['conversationId']}")
    assert [m["role"] for m in view["messages"]][:1] == ["user"]
    status, replay, headers = api.call("POST", "/api/chat", body, headers={"idempotency-key": "long-1"})
    assert (status, replay, headers.get("Idempotent-Replayed")) == (200, done["response"], "true")


def test_a_turn_crossing_the_sync_time_goes_on_in_the_worker_with_the_same_history_and_audit(api: Api) -> None:
    def script() -> list[Any]:
        return [
            tools(tool_use("lookup_order", {"order_id": 1042})),
            tools(tool_use("list_invoices", {"order_id": 1042})),
            answer("Delivered, and invoice 5001 is paid."),
        ]

    # The same turn synchronously, for comparison.
    api.model.script = script()
    _, sync, _ = api.call("POST", "/api/chat", {"conversationId": None, "message": "1042 and its invoice?"})
    # Now with one model call's worth of synchronous time: the first call fits, the second does not.
    api.overrides.update({"SYNC_TURN_SECONDS": "1", "MODEL_CALL_BUDGET_SECONDS": "0.6"})
    api.current = ""
    api.model.script = script()
    api.model.on_call = lambda: time.sleep(0.5)
    status, running, headers = api.call(
        "POST", "/api/chat", {"conversationId": None, "message": "1042 and its invoice?"}
    )
    api.model.on_call = None
    assert status == 202, running
    assert len(api.model.requests) == 3 + 1  # the synchronous turn's three, then one before the hand-over
    work(api, take_messages(api))
    done = turn_view(api, headers["Location"])["response"]
    assert done["reply"] == sync["reply"] and done["iterations"] == sync["iterations"] == 3

    def calls(body: dict[str, Any]) -> list[list[str]]:
        return [[c["name"] for c in t["toolCalls"]] for t in body["trace"]]

    assert calls(done) == calls(sync) == [["lookup_order"], ["list_invoices"], []]
    assert done["inputTokens"] == sync["inputTokens"]

    def shape(cid: str) -> list[Any]:
        _, view, _ = api.call("GET", f"/api/conversations/{cid}")
        return [(m["role"], m.get("text")) for m in view["messages"]]

    assert shape(running["conversationId"]) == shape(sync["conversationId"])
    _, a, _ = api.call("GET", f"/api/audit?conversationId={sync['conversationId']}", token=api.lead())
    _, b, _ = api.call("GET", f"/api/audit?conversationId={running['conversationId']}", token=api.lead())
    assert [(r["action"], r["tool"]) for r in a["records"]] == [(r["action"], r["tool"]) for r in b["records"]]
    verified = api.call("GET", f"/api/audit/verify?conversationId={running['conversationId']}", token=api.lead())[1]
    assert verified["status"] == "ok"


def test_a_duplicated_message_is_acted_on_once(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    _, _running, headers = api.call("POST", "/api/chat", {"message": "hello"}, headers={"prefer": "respond-async"})
    (message,) = take_messages(api)
    api.model.script = [answer("Hello!")]
    outcomes: list[Any] = []
    api.use_function("TurnWorkerFunction")
    worker = api.handlers["TurnWorkerFunction"]
    module = inspect.unwrap(worker).__globals__
    assert isinstance(module["processor"], BatchProcessor)
    fresh = PerInstance(lambda: BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False))
    monkeypatch.setitem(module, "processor", fresh)

    def deliver() -> None:
        outcomes.append(worker(sqs_event([message]), None))

    with serialised_moto():
        run_together([deliver] * 3)
    assert outcomes == [{"batchItemFailures": []}] * 3, outcomes
    assert len(api.model.requests) == 1  # one worker took the lease; the others stopped at the take-over
    assert turn_view(api, headers["Location"])["status"] == "completed"
    work(api, [message])  # and once more, after it ended: stale
    assert len(api.model.requests) == 1


def test_a_duplicate_arriving_as_the_turn_ends_does_not_run_it_again(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    """The window CI's load once opened: the worker had released the lease before the turn's record said
    completed, so a duplicate delivery took the lease over and ran the turn a second time."""
    _, _running, headers = api.call("POST", "/api/chat", {"message": "hello"}, headers={"prefer": "respond-async"})
    (message,) = take_messages(api)
    api.model.script = [answer("Hello!")]
    api.use_function("TurnWorkerFunction")
    from support_agent import wiring

    duplicate: list[str] = []
    finish = TurnStore.finish

    def finish_after_a_duplicate(self: TurnStore, *args: Any, **kwargs: Any) -> Any:
        if not duplicate:  # the duplicate is delivered after the loop ended, before the record is written
            duplicate.append(wiring.turn_worker().run(json.loads(message["Body"])))
        return finish(self, *args, **kwargs)

    monkeypatch.setattr(TurnStore, "finish", finish_after_a_duplicate)
    assert work(api, [message]) == {"batchItemFailures": []}
    assert duplicate == ["not_taken"]  # the lease is still the first worker's
    assert len(api.model.requests) == 1
    assert turn_view(api, headers["Location"])["status"] == "completed"


def test_a_dead_worker_is_restarted_by_the_sweep_without_repeating_a_side_effect(api: Api) -> None:
    _, running, headers = api.call(
        "POST", "/api/chat", {"message": "refund 1043 please"}, headers={"prefer": "respond-async"}
    )
    (message,) = take_messages(api)
    # The worker dies after the refund ran and its result was stored: its next model call fails unexpectedly.
    api.model.script = [
        tools(tool_use("request_refund", {"order_id": 1043, "amount_cents": 500, "reason": "late"})),
    ]
    died = work(api, [message])
    assert died["batchItemFailures"], died  # reported: SQS would deliver it again after its visibility timeout
    turns = TurnStore(boto3.client("dynamodb"), api.stack.physical_ids["ConversationsTable"])
    turn = turns.get(running["conversationId"], running["turnId"])
    assert turn is not None and turn.status == "running"
    # The sweep does not wait for that: once the lease is free and the check is due, the turn is sent again.
    boto3.client("dynamodb").update_item(
        TableName=api.stack.physical_ids["ConversationsTable"],
        Key=to_item(
            {
                "conversation_id": f"turn#{running['conversationId']}",
                "seq": TurnStore._turn_key(running["conversationId"], running["turnId"])["seq"],
            }
        ),
        UpdateExpression="SET lease_check_at = :past",
        ExpressionAttributeValues=to_item({":past": int(time.time()) - 1}),
    )
    api.use_function("TurnSweepFunction")
    swept = api.handlers["TurnSweepFunction"]({"source": "aws.scheduler"}, None)
    assert swept["restarted"] == 1, swept
    api.model.script = [answer("Your refund of 5.00 is done.")]
    assert work(api, take_messages(api)) == {"batchItemFailures": []}
    done = turn_view(api, headers["Location"])
    assert done["status"] == "completed", done
    rows = api.call("GET", f"/api/audit?conversationId={running['conversationId']}", token=api.lead())[1]["records"]
    assert [r["outcome"] for r in rows if r["action"] == "tool_call"] == ["ok"]  # the refund ran once, not again
    _, view, _ = api.call("GET", f"/api/conversations/{running['conversationId']}")
    assert [(r["orderId"], r["amountCents"]) for r in view["refunds"]] == [(1043, 500)]


def test_a_dead_lettered_turn_ends_failed(api: Api) -> None:
    _, _running, headers = api.call("POST", "/api/chat", {"message": "hi"}, headers={"prefer": "respond-async"})
    (message,) = take_messages(api)
    boto3.client("sqs").send_message(QueueUrl=queue(api, "TurnDLQ"), MessageBody=message["Body"])
    api.use_function("TurnSweepFunction")
    swept = api.handlers["TurnSweepFunction"]({"source": "aws.scheduler"}, None)
    assert swept["dead_lettered"] == 1, swept
    failed = turn_view(api, headers["Location"])
    assert (failed["status"], failed["error"]["code"]) == ("failed", "turn_failed")
    assert work(api, [message]) == {"batchItemFailures": []}  # a late delivery finds it ended: stale
    assert api.model.requests == []
