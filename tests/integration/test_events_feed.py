"""The conversation's event feed on the deployed template: EventsFunction reads a turn's steps from what the turn
stored, and notifications written by others; cursors resume exactly; the long poll answers early when an event
is written and empty at the wait's end; only the owner reads it."""

from __future__ import annotations

import threading
import time
from typing import Any

import boto3
import pytest

from support_agent.feed import QUIET_HIDES, Cursor
from support_agent.store.notifications import Notification, NotificationStore
from support_agent.store.polls import WAITS_PER_CUSTOMER, PollSlots
from tests.integration.conftest import Api
from tests.integration.test_long_turns import take_messages, work
from tests.support.openapi import assert_documented
from tests.support.scripted import answer, tool_use, tools


def feed(api: Api, cid: str, after: str | None = None, wait: int = 0, **kw: Any) -> tuple[int, Any]:
    query = f"waitSeconds={wait}" + (f"&after={after}" if after else "")
    path = f"/api/conversations/{cid}/events?{query}"
    status, body, headers = api.call("GET", path, **kw)
    assert_documented("GET", path.split("?")[0], status, body, headers)  # docs/openapi.json, strictly
    return status, body


def events(api: Api, cid: str, after: str | None = None, **kw: Any) -> list[dict[str, Any]]:
    status, body = feed(api, cid, after, **kw)
    assert status == 200, body
    return list(body["events"])


def notes(api: Api) -> NotificationStore:
    return NotificationStore(boto3.client("dynamodb"), api.stack.physical_ids["ConversationsTable"])


def a_turn_with_a_tool(api: Api) -> dict[str, Any]:
    api.model.script = [tools(tool_use("lookup_order", {"order_id": 1042})), answer("Order 1042 was delivered.")]
    status, body, _ = api.call("POST", "/api/chat", {"conversationId": None, "message": "Where is 1042?"})
    assert status == 200, body
    return dict(body)


def test_a_turn_reads_back_as_its_steps_in_order(api: Api) -> None:
    turn = a_turn_with_a_tool(api)
    got = events(api, turn["conversationId"])
    assert [e["type"] for e in got] == [
        "turn.started",
        "message",
        "tool.requested",
        "tool.finished",
        "message",
        "turn.completed",
    ]
    assert {e["turnId"] for e in got} == {turn["turnId"]}
    started, asked, requested, finished, answered, completed = got
    assert started["at"] <= asked["at"]
    assert (asked["role"], asked["text"]) == ("user", "Where is 1042?")
    assert (requested["name"], requested["input"]) == ("lookup_order", {"order_id": 1042})
    assert finished["name"] == "lookup_order" and finished["isError"] is False
    assert finished["toolUseId"] == requested["toolUseId"] and finished["result"]["order_id"] == 1042
    assert (answered["role"], answered["text"]) == ("assistant", "Order 1042 was delivered.")
    assert completed["stopReason"] == turn["stopReason"] and completed["iterations"] == 2
    assert completed["inputTokens"] == turn["inputTokens"]
    assert [e["at"] for e in got] == sorted(e["at"] for e in got)


def test_every_cursor_resumes_right_after_its_event(api: Api) -> None:
    turn = a_turn_with_a_tool(api)
    cid = turn["conversationId"]
    api.model.script = [answer("Anything else?")]
    assert api.call("POST", "/api/chat", {"conversationId": cid, "message": "Thanks"})[0] == 200
    notes(api).transact(
        [], Notification(conversation_id=cid, type="refund.settled", at="2999-01-01T00:00:00Z", data={"orderId": 1042})
    )
    everything = events(api, cid)
    assert [e["type"] for e in everything][-5:] == [
        "turn.started",
        "message",
        "message",
        "turn.completed",
        "refund.settled",
    ]
    for i, event in enumerate(everything):
        assert events(api, cid, event["cursor"]) == everything[i + 1 :]
    status, last = feed(api, cid, everything[-1]["cursor"])
    assert (status, last["events"], last["nextCursor"]) == (200, [], everything[-1]["cursor"])


def test_the_long_poll_answers_when_an_event_is_written_and_empty_when_the_wait_ends(api: Api) -> None:
    turn = a_turn_with_a_tool(api)
    cid = turn["conversationId"]
    end = events(api, cid)[-1]["cursor"]
    started = time.monotonic()
    status, body = feed(api, cid, end, wait=1)
    assert (status, body["events"], body["nextCursor"]) == (200, [], end)
    assert time.monotonic() - started >= 1

    note = Notification(
        conversation_id=cid,
        type="approval.decided",
        at="2999-01-01T00:00:00Z",
        data={"approvalId": "apr_x", "status": "REFUNDED"},
    )
    writer = threading.Timer(0.5, lambda: notes(api).transact([], note))
    writer.start()
    started = time.monotonic()
    status, body = feed(api, cid, end, wait=15)
    writer.join()
    assert status == 200 and [e["type"] for e in body["events"]] == ["approval.decided"]
    assert body["events"][0]["status"] == "REFUNDED" and body["events"][0]["turnId"] is None
    assert time.monotonic() - started < 10


def test_a_handed_over_turn_is_followed_from_the_202_to_its_answer(api: Api) -> None:
    status, running, _ = api.call(
        "POST", "/api/chat", {"conversationId": None, "message": "Where is 1042?"}, headers={"prefer": "respond-async"}
    )
    assert status == 202, running
    cid = running["conversationId"]
    assert events(api, cid) == []  # nothing stored yet, but the conversation is the caller's (no 404)
    assert feed(api, cid, token=api.token("customer-8", customer_id=8))[0] == 404
    api.model.script = [tools(tool_use("lookup_order", {"order_id": 1042})), answer("Delivered.")]
    work(api, take_messages(api))
    got = events(api, cid)
    assert (got[0]["type"], got[-1]["type"]) == ("turn.started", "turn.completed")
    assert {e["turnId"] for e in got} == {running["turnId"]}


def test_only_the_owner_reads_the_feed_and_cursors_stay_in_their_conversation(api: Api) -> None:
    mine = a_turn_with_a_tool(api)["conversationId"]
    other = a_turn_with_a_tool(api)["conversationId"]
    cursor = events(api, mine)[0]["cursor"]
    stranger = api.token("customer-8", customer_id=8)
    assert feed(api, mine, token=stranger)[0] == 404
    assert feed(api, "conv_01JNOTTHERENOTTHERENOTTHER")[0] == 404
    assert feed(api, "not-an-id")[0] == 404
    assert feed(api, mine, token=api.lead())[0] == 403
    assert feed(api, mine, token=None)[0] == 401
    status, body = feed(api, other, cursor)
    assert status == 400 and "another conversation" in body["error"]["message"]
    for bad in ("garbage", Cursor(mine, seq=-1).encode(), "W10"):
        assert feed(api, mine, bad)[0] == 400
    assert feed(api, mine, wait=21)[0] == 400


def test_a_forged_cursor_with_a_huge_number_is_a_400_not_a_500(api: Api) -> None:
    """A cursor is the client's to send back: one forged with a number past DynamoDB's 38 digits reached a Query
    (decimal.Inexact escaped the handler, API Gateway's bare 500); every field is bounded when decoded."""
    cid = a_turn_with_a_tool(api)["conversationId"]
    for field in ("seq", "index", "ended", "note"):
        forged = Cursor(cid, **{field: 10**40}).encode()
        status, body = feed(api, cid, forged)
        assert status == 400 and body["error"]["code"] == "bad_request", (field, status, body)
        assert "not a cursor of this feed" in body["error"]["message"]


def a_quiet_conversation(api: Api, customer_id: int) -> tuple[str, str, str]:
    """A conversation of ``customer_id`` (its token, id and the cursor after its last event)."""
    token = api.token(f"customer-{customer_id}", customer_id=customer_id)
    api.model.script = [answer("Hello.")]
    status, body, _ = api.call("POST", "/api/chat", {"conversationId": None, "message": "Hi"}, token=token)
    assert status == 200, body
    cid = body["conversationId"]
    return token, cid, events(api, cid, token=token)[-1]["cursor"]


def waiting(api: Api, customer_id: int) -> int:
    """How many of the customer's polls hold a waiting slot now (store/polls.py)."""
    slots = PollSlots(boto3.client("dynamodb"), api.stack.physical_ids["ConversationsTable"])
    return slots.held(customer_id)


def test_one_customer_cannot_hold_every_waiting_poll_and_another_is_still_served(api: Api) -> None:
    """ReadsPerMinute (60) x waitSeconds (20) let one customer keep 20 polls waiting: EventsReservedConcurrency,
    the whole feed. Now WAITS_PER_CUSTOMER of them wait at once; one more answers at once (what is there, from its
    cursor) and another customer's poll still waits for its event."""
    token, mine, end = a_quiet_conversation(api, 9)
    other, theirs, their_end = a_quiet_conversation(api, 10)
    api.use_function("EventsFunction")  # from here on only the feed runs: no environment switch under the threads
    held: list[tuple[int, Any]] = []
    pollers = [
        threading.Thread(target=lambda: held.append(feed(api, mine, end, wait=8, token=token)))
        for _ in range(WAITS_PER_CUSTOMER)
    ]
    for t in pollers:
        t.start()
    deadline = time.monotonic() + 5
    while waiting(api, 9) < WAITS_PER_CUSTOMER and time.monotonic() < deadline:
        time.sleep(0.05)

    started = time.monotonic()
    status, body = feed(api, mine, end, wait=8, token=token)  # one more, while those wait: at once, and right
    assert time.monotonic() - started < 2, "a customer's extra poll waited"
    assert (status, body["events"], body["nextCursor"]) == (200, [], end)
    note = Notification(conversation_id=theirs, type="refund.settled", at="2999-01-01T00:00:00Z", data={})
    writer = threading.Timer(1.0, lambda: notes(api).transact([], note))
    writer.start()
    started = time.monotonic()
    status, body = feed(api, theirs, their_end, wait=8, token=other)  # another customer: still a long poll
    writer.join()
    assert status == 200 and [e["type"] for e in body["events"]] == ["refund.settled"], body
    assert 0.9 <= time.monotonic() - started < 6

    for t in pollers:
        t.join()
    assert held == [(200, {"events": [], "nextCursor": end})] * WAITS_PER_CUSTOMER
    assert waiting(api, 9) == 0  # released as they answered: the customer waits again
    started = time.monotonic()
    assert feed(api, mine, end, wait=1, token=token)[0] == 200
    assert time.monotonic() - started >= 1


@pytest.mark.parametrize("transparency", ["quiet"])
def test_quiet_leaves_out_tool_name_input_and_result(api: Api, transparency: str) -> None:
    """What quiet hides is one table (QUIET_HIDES), the conversation view's too (tests/integration/test_quiet.py)."""
    api.overrides["TRANSPARENCY"] = transparency
    api.current = ""
    cid = a_turn_with_a_tool(api)["conversationId"]
    got = events(api, cid)
    tool_events = [e for e in got if e["type"].startswith("tool.")]
    assert len(tool_events) == 2 and tool_events[0]["toolUseId"] == tool_events[1]["toolUseId"]
    assert not [(e["type"], f) for e in tool_events for f in QUIET_HIDES if f in e], tool_events
    assert "lookup_order" not in str(got)


def test_erasure_removes_what_the_notifications_say_and_the_feed_reads_tombstones(api: Api) -> None:
    sam = api.token("customer-8", customer_id=8)
    api.model.script = [answer("Noted.")]
    status, body, _ = api.call(
        "POST", "/api/chat", {"conversationId": None, "message": "I live at 1 Main St"}, token=sam
    )
    assert status == 200, body
    cid = body["conversationId"]
    data = {"approvalId": "apr_x", "orderId": 2002, "amountCents": 12000, "status": "REFUNDED"}
    notes(api).transact(
        [], Notification(conversation_id=cid, type="approval.decided", at="2999-01-01T00:00:00Z", data=data)
    )
    assert api.call("POST", "/api/customers/8/erase", {}, token=api.lead())[0] == 200
    (note,) = notes(api).of(cid)
    assert (note.type, note.data) == ("approval.decided", {})
    got = events(api, cid, token=sam)
    assert "1 Main St" not in str(got) and "12000" not in str(got)
    assert [e["type"] for e in got] == ["turn.started", "message", "message", "turn.completed", "approval.decided"]


def test_a_turn_the_sweep_fails_is_announced_once(api: Api) -> None:
    status, running, _ = api.call("POST", "/api/chat", {"message": "hi"}, headers={"prefer": "respond-async"})
    assert status == 202, running
    (message,) = take_messages(api)
    boto3.client("sqs").send_message(QueueUrl=api.stack.physical_ids["TurnDLQ"], MessageBody=message["Body"])
    api.use_function("TurnSweepFunction")
    assert api.handlers["TurnSweepFunction"]({"source": "aws.scheduler"}, None)["dead_lettered"] == 1
    got = events(api, running["conversationId"])
    assert [(e["type"], e["turnId"], e["error"]["code"]) for e in got] == [
        ("turn.failed", running["turnId"], "turn_failed")
    ]
