"""A person takes over a conversation, on the deployed template: the inbox and its brief, claim (one winner),
replies with Idempotency-Key, the customer's messages kept with no model call, hand back (the model then sees the
person's words and the note), close; who may see what; a turn racing a claim; the audit trail of it all.

Every answer is checked against docs/openapi.json (`call`)."""

from __future__ import annotations

import json
import math
import threading
import time
from typing import Any

import boto3

from devstack.seed import put_order
from support_agent.mcp.our_tools import stream_of
from support_agent.store.handoffs import Handoff as Ticket
from support_agent.store.handoffs import HandoffStore
from support_agent.store.polls import PollSlots
from support_agent.store.ratelimit import counter_key
from support_agent.store.records import Record
from tests.integration.conftest import Api
from tests.support.aws import serialised_moto
from tests.support.openapi import assert_documented
from tests.support.scripted import answer, tool_use, tools
from tests.support.threads import run_together

DANA = ("agent-1", "Dana")
SAM = ("agent-2", "Sam")
JOINED = "A member of our support team has joined this conversation and will reply here."


def staff(api: Api, who: tuple[str, str] = DANA) -> str:
    return api.token(who[0], "support_staff", None, extra={"name": who[1]})


def call(api: Api, method: str, path: str, body: Any = None, **kw: Any) -> tuple[int, Any, dict[str, str]]:
    """``api.call``, its answer checked against the document (status, body, documented headers)."""
    status, out, headers = api.call(method, path, body, **kw)
    assert_documented(method, path, status, out, headers)
    return status, out, headers


def escalated(api: Api, order_id: int, customer: int = 7) -> tuple[str, str]:
    """A conversation that looked up order 1042 and its invoices, asked a refund of ``order_id`` above the threshold
    (held for a lead), and escalated: (conversation id, hand-off id)."""
    put_order(boto3.client("dynamodb"), api.stack.physical_ids["CustomerDataTable"], customer, order_id, 16000)
    api.model.script = [
        tools(
            tool_use("lookup_order", {"order_id": 1042}),
            tool_use("list_invoices", {"order_id": 1042}),
            tool_use("request_refund", {"order_id": order_id, "amount_cents": 16000, "reason": "broken"}),
        ),
        tools(tool_use("escalate_to_human", {"reason": "wants a person about the refund"})),
        answer("A teammate will follow up in this conversation."),
    ]
    token = api.token(f"customer-{customer}", customer_id=customer)
    status, body, _ = call(
        api, "POST", "/api/chat", {"message": "My order arrived broken, I want a person"}, token=token
    )
    assert status == 200, body
    result = body["trace"][1]["toolCalls"][0]["result"]
    return body["conversationId"], result["handoff_id"]


def say(api: Api, cid: str | None, text: str, customer: int = 7) -> tuple[int, Any, dict[str, str]]:
    token = api.token(f"customer-{customer}", customer_id=customer)
    return call(api, "POST", "/api/chat", {"conversationId": cid, "message": text}, token=token)


def kept(api: Api, cid: str, text: str, status: str) -> None:
    """The customer's message is stored for the person: 202 owner person, no turn, and no model call."""
    calls = len(api.model.requests)
    got, body, headers = say(api, cid, text)
    assert (got, body["owner"], body["status"]) == (202, "person", status), body
    assert "turnId" not in body and "location" not in {h.lower() for h in headers}
    assert body["eventsUrl"] == f"/api/conversations/{cid}/events"
    assert len(api.model.requests) == calls  # the scripted model saw nothing


def feed(api: Api, path: str, token: str) -> list[dict[str, Any]]:
    status, body, _ = call(api, "GET", path, token=token)
    assert status == 200, body
    return list(body["events"])


def undeclared(api: Api, record: type[Record], key: str) -> dict[str, Any]:
    item = boto3.client("dynamodb").get_item(
        TableName=api.stack.physical_ids["ApprovalsTable"], Key={"approval_id": {"S": key}}
    )["Item"]
    from support_agent.store.dynamo import from_item

    return record.from_item(from_item(item)).extra


def test_the_inbox_lists_an_escalation_with_a_brief_and_the_model_waits(api: Api) -> None:
    cid, hid = escalated(api, 3101)
    kept(api, cid, "hello??", "queued")  # OPEN: queued for a person, the bot does not answer either
    status, inbox, _ = call(api, "GET", "/api/handoffs?status=OPEN", token=staff(api))
    assert status == 200, inbox
    (handoff,) = [h for h in inbox["handoffs"] if h["handoffId"] == hid]
    assert (handoff["status"], handoff["conversationId"], handoff["assignee"]) == ("OPEN", cid, None)
    brief = handoff["brief"]
    assert (brief["customerId"], brief["reason"]) == (7, "wants a person about the refund")
    assert brief["orders"] == [1042, 3101] and brief["invoices"] == [5001]
    (refund,) = brief["refunds"]
    assert (refund["orderId"], refund["amountCents"], refund["currency"]) == (3101, 16000, "USD")
    assert (refund["status"], refund["approvalStatus"]) == ("PENDING_APPROVAL", "PENDING")
    assert refund["approvalId"].startswith("apr_")
    assert [(m["role"], m["text"]) for m in brief["lastMessages"]] == [
        ("user", "My order arrived broken, I want a person"),
        ("assistant", "A teammate will follow up in this conversation."),
        ("user", "hello??"),
    ]
    assert call(api, "GET", f"/api/handoffs/{hid}", token=staff(api))[1] == handoff
    # Not in the list of hand-offs Dana holds; a lead sees the same brief.
    assert hid not in [
        h["handoffId"] for h in call(api, "GET", "/api/handoffs?status=ASSIGNED", token=staff(api))[1]["handoffs"]
    ]
    assert call(api, "GET", f"/api/handoffs/{hid}", token=api.lead())[1]["brief"] == brief
    assert call(api, "GET", "/api/handoffs?status=CLOSED", token=staff(api))[0] == 403  # a lead's list


def test_claim_reply_hand_back_and_the_bot_answers_with_the_persons_words(api: Api) -> None:
    cid, hid = escalated(api, 3102)
    dana = staff(api)
    status, claimed, _ = call(api, "POST", f"/api/handoffs/{hid}/claim", token=dana)
    assert (status, claimed["status"], claimed["assignee"], claimed["assigneeName"]) == (
        200,
        "ASSIGNED",
        "agent-1",
        "Dana",
    )
    status, lost, _ = call(api, "POST", f"/api/handoffs/{hid}/claim", token=staff(api, SAM))
    assert (status, lost["error"]["code"]) == (409, "conflict")
    mine = call(api, "GET", "/api/handoffs?status=ASSIGNED&assignee=me", token=dana)[1]["handoffs"]
    assert [h["handoffId"] for h in mine] == [hid]
    # A reply, its resend (answered again, stored once), and the key reused with another text.
    path, key = f"/api/handoffs/{hid}/messages", {"Idempotency-Key": "reply-1"}
    status, sent, headers = call(api, "POST", path, {"message": "Hi, Dana here. Let me look."}, token=dana, headers=key)
    assert (status, sent["role"], sent["author"], sent["conversationId"]) == (201, "person", "Dana", cid), sent
    assert "Idempotent-Replayed" not in headers
    status, again, headers = call(
        api, "POST", path, {"message": "Hi, Dana here. Let me look."}, token=dana, headers=key
    )
    assert (status, again, headers.get("Idempotent-Replayed")) == (201, sent, "true")
    status, reused, _ = call(api, "POST", path, {"message": "something else"}, token=dana, headers=key)
    assert (status, reused["error"]["code"]) == (422, "idempotency_key_reused")
    kept(api, cid, "thanks Dana, it is the blue one", "assigned")
    # The person sees it live in their feed of the conversation, and in its transcript.
    mine_feed = feed(api, f"/api/handoffs/{hid}/events", dana)
    said = [(e["role"], e["text"], e.get("author")) for e in mine_feed if e["type"] == "message"]
    assert said[-2:] == [
        ("person", "Hi, Dana here. Let me look.", "Dana"),
        ("user", "thanks Dana, it is the blue one", None),
    ]
    assert ("handoff.assigned", "Dana") in [(e["type"], e.get("by")) for e in mine_feed]
    assert mine_feed == feed(api, f"/api/conversations/{cid}/events", api.token())  # the customer's own feed
    _, view, _ = call(api, "GET", f"/api/handoffs/{hid}/conversation", token=dana)
    persons = [m for m in view["messages"] if m["role"] == "person"]
    assert [(m["text"], m["author"]) for m in persons] == [("Hi, Dana here. Let me look.", "Dana")]
    assert view["messages"][-1]["text"] == "thanks Dana, it is the blue one"
    assert call(api, "GET", f"/api/conversations/{cid}", token=api.token())[1]["messages"] == view["messages"]
    # Hand back with a note: the next message goes to the model, with the person's words and the note.
    note = "Offered a replacement by hand; do not offer another refund."
    status, back, _ = call(api, "POST", f"/api/handoffs/{hid}/return", {"note": note}, token=dana)
    assert (status, back["status"], back["closedAs"], back["closedBy"]) == (200, "CLOSED", "returned_to_bot", "agent-1")
    api.model.script = [answer("Happy to help with anything else.")]
    status, body, _ = say(api, cid, "one more question")
    assert (status, body["reply"]) == (200, "Happy to help with anything else."), body
    request = api.model.requests[-1]
    marked = [m for m in request.messages if "(support teammate Dana wrote:) Hi, Dana here." in json.dumps(m)]
    assert len(marked) == 1 and marked[0]["role"] == "assistant"
    assert note in request.system and note not in json.dumps(request.messages)
    assert "thanks Dana, it is the blue one" in json.dumps(request.messages)
    # No longer Dana's: her views of it are gone.
    assert call(api, "GET", f"/api/handoffs/{hid}/conversation", token=dana)[0] == 404
    assert call(api, "GET", f"/api/handoffs/{hid}/events", token=dana)[0] == 404
    _audited(api, cid, hid, "Hi, Dana here. Let me look.")


def test_a_reply_leaves_only_declared_attributes_on_the_hand_off(api: Api) -> None:
    """Every attribute a writer sets on the hand-off's item is a field of its record (store/records.py): a reply's
    included."""
    _, hid = escalated(api, 3106)
    dana = staff(api)
    assert call(api, "POST", f"/api/handoffs/{hid}/claim", token=dana)[0] == 200
    assert call(api, "POST", f"/api/handoffs/{hid}/messages", {"message": "Dana here."}, token=dana)[0] == 201
    assert undeclared(api, Ticket, hid) == {}


def _audited(api: Api, cid: str, hid: str, reply: str) -> None:
    """The chain verifies after the round trip; the hand-off's stream has each step, a reply by hash and length."""
    status, verified, _ = call(api, "GET", f"/api/audit/verify?conversationId={cid}", token=api.lead())
    assert (status, verified["status"]) == (200, "ok"), verified
    assert f"handoff#{hid}" in [s["stream"] for s in verified["streams"]]
    _, trail, _ = call(api, "GET", f"/api/audit?conversationId={cid}", token=api.lead())
    rows = sorted((r for r in trail["records"] if r["stream"] == f"handoff#{hid}"), key=lambda r: r["n"])
    actions = [r["action"] for r in rows]
    assert actions == ["handoff_opened", "handoff_claimed", "handoff_reply", "handoff_returned"], actions
    (replied,) = [r for r in rows if r["action"] == "handoff_reply"]
    assert replied["actor"] == "agent-1" and replied["input"]["length"] == len(reply)
    assert len(replied["input"]["sha256"]) == 64
    assert reply not in json.dumps(trail) and "do not offer another refund" not in json.dumps(trail)


def test_a_later_hand_off_is_closed_and_the_bot_answers_without_the_old_note(api: Api) -> None:
    cid, first = escalated(api, 3103)
    dana = staff(api)
    assert call(api, "POST", f"/api/handoffs/{first}/claim", token=dana)[0] == 200
    assert call(api, "POST", f"/api/handoffs/{first}/return", {"note": "an old note"}, token=dana)[0] == 200
    api.model.script = [tools(tool_use("escalate_to_human", {"reason": "again"})), answer("A teammate will join.")]
    status, body, _ = say(api, cid, "I want a person again")
    assert status == 200, body
    later = body["trace"][0]["toolCalls"][0]["result"]["handoff_id"]
    assert later != first
    assert call(api, "POST", f"/api/handoffs/{later}/close", token=dana)[0] == 403  # OPEN: a lead closes it
    assert call(api, "POST", f"/api/handoffs/{later}/claim", token=dana)[0] == 200
    status, closed, _ = call(api, "POST", f"/api/handoffs/{later}/close", {"note": "called them"}, token=dana)
    assert (status, closed["status"], closed["closedAs"]) == (200, "CLOSED", "closed")
    api.model.script = [answer("Back to me, then.")]
    assert say(api, cid, "hi again")[0] == 200
    assert "an old note" not in api.model.requests[-1].system
    _, events, _ = call(api, "GET", f"/api/conversations/{cid}/events", token=api.token())
    types = [e["type"] for e in events["events"] if e["type"].startswith("handoff.")]
    assert types == [
        "handoff.opened",
        "handoff.assigned",
        "handoff.returned_to_bot",
        "handoff.opened",
        "handoff.assigned",
        "handoff.closed",
    ]


def test_two_agents_claim_at_once_and_one_wins(api: Api) -> None:
    _, hid = escalated(api, 3104)
    api.use_function("ApprovalsFunction")
    answers: list[tuple[int, str]] = []
    lock = threading.Lock()

    def claim(who: tuple[str, str]) -> None:
        status, body, _ = api.call("POST", f"/api/handoffs/{hid}/claim", token=staff(api, who))
        with lock:
            answers.append((status, body.get("assignee") or body["error"]["code"]))

    with serialised_moto():  # each moto call atomic, as DynamoDB's are; the two claims still race
        run_together([lambda: claim(DANA), lambda: claim(SAM)])
    assert sorted(s for s, _ in answers) == [200, 409], answers
    (winner,) = [who for s, who in answers if s == 200]
    _, ticket, _ = call(api, "GET", f"/api/handoffs/{hid}", token=api.lead())
    assert (ticket["status"], ticket["assignee"]) == ("ASSIGNED", winner)
    _, trail, _ = call(api, "GET", f"/api/audit?conversationId={ticket['conversationId']}", token=api.lead())
    assert [r["action"] for r in trail["records"]].count("handoff_claimed") == 1


def test_who_may_see_what(api: Api) -> None:
    cid, hid = escalated(api, 3105)
    dana, sam, customer = staff(api), staff(api, SAM), api.token()
    assert call(api, "POST", f"/api/handoffs/{hid}/claim", token=dana)[0] == 200
    # Another agent: the hand-off Dana holds is not theirs to read, nor to reply to.
    for path in (f"/api/handoffs/{hid}", f"/api/handoffs/{hid}/conversation", f"/api/handoffs/{hid}/events"):
        status, body, _ = call(api, "GET", path, token=sam)
        assert (status, body["error"]["code"]) == (404, "not_found"), path
    assert call(api, "POST", f"/api/handoffs/{hid}/messages", {"message": "hi"}, token=sam)[0] == 403
    assert call(api, "POST", f"/api/handoffs/{hid}/return", token=sam)[0] == 403
    # A customer can never work the inbox, their own hand-off included.
    for method, path, body in [
        ("GET", "/api/handoffs", None),
        ("GET", f"/api/handoffs/{hid}", None),
        ("POST", f"/api/handoffs/{hid}/claim", None),
        ("POST", f"/api/handoffs/{hid}/release", None),
        ("POST", f"/api/handoffs/{hid}/reassign", {"assignee": "customer-7"}),
        ("POST", f"/api/handoffs/{hid}/messages", {"message": "I am support, honest"}),
        ("POST", f"/api/handoffs/{hid}/return", None),
        ("POST", f"/api/handoffs/{hid}/close", None),
        ("GET", f"/api/handoffs/{hid}/conversation", None),
        ("GET", f"/api/handoffs/{hid}/events", None),
    ]:
        status, out, _ = call(api, method, path, body, token=customer)
        assert (status, out["error"]["code"]) == (403, "forbidden"), (method, path)
    assert call(api, "POST", f"/api/handoffs/{hid}/reassign", {"assignee": "agent-2"}, token=dana)[0] == 403
    # Another customer's feed of their own conversation never carries any of it.
    api.model.script = [answer("Hello Sam.")]
    status, theirs, _ = say(api, None, "hi", customer=8)
    assert status == 200, theirs
    other = feed(api, f"/api/conversations/{theirs['conversationId']}/events", api.token("customer-8", customer_id=8))
    assert other and not [e for e in other if e["type"].startswith("handoff.") or e.get("role") == "person"]
    assert call(api, "GET", f"/api/conversations/{cid}/events", token=api.token("customer-8", customer_id=8))[0] == 404
    # A lead reassigns it to Sam: now Sam reads it, and Dana no longer does.
    status, moved, _ = call(
        api, "POST", f"/api/handoffs/{hid}/reassign", {"assignee": "agent-2", "name": "Sam"}, token=api.lead()
    )
    assert (status, moved["assignee"], moved["assigneeName"]) == (200, "agent-2", "Sam")
    assert call(api, "GET", f"/api/handoffs/{hid}/conversation", token=sam)[0] == 200
    assert call(api, "GET", f"/api/handoffs/{hid}/conversation", token=dana)[0] == 404
    status, released, _ = call(api, "POST", f"/api/handoffs/{hid}/release", token=sam)
    assert (status, released["status"], released["assignee"]) == (200, "OPEN", None)


def test_a_turn_racing_a_claim_drops_the_models_answer(api: Api) -> None:
    """The claim lands while the model answers the turn that escalated: that answer is not stored, and the turn
    ends handed_to_person with the fixed reply; the person holds the conversation."""
    claimed: list[int] = []

    def claim_meanwhile(_messages: list[Any]) -> Any:
        handoff = [
            h for h in api.call("GET", "/api/handoffs", token=staff(api))[1]["handoffs"] if h["reason"] == "race"
        ]
        claimed.append(api.call("POST", f"/api/handoffs/{handoff[0]['handoffId']}/claim", token=staff(api))[0])
        return answer("A teammate will follow up (never stored).")

    api.model.script = [tools(tool_use("escalate_to_human", {"reason": "race"})), claim_meanwhile]
    status, body, _ = call(api, "POST", "/api/chat", {"message": "a person, now"}, token=api.token())
    assert claimed == [200]
    assert (status, body["stopReason"], body["reply"]) == (200, "handed_to_person", JOINED), body
    cid = body["conversationId"]
    _, view, _ = call(api, "GET", f"/api/conversations/{cid}", token=api.token())
    texts = [m["text"] for m in view["messages"]]
    assert "A teammate will follow up (never stored)." not in texts
    kept(api, cid, "are you there?", "assigned")


def test_a_persons_polls_count_and_wait_as_their_own(api: Api) -> None:
    """A staff member's polls of a held conversation take their own read counter and waiting slots, never its
    customer's: following a conversation costs the customer nothing of their limits."""
    _, hid = escalated(api, 3107)
    dana = staff(api)
    assert call(api, "POST", f"/api/handoffs/{hid}/claim", token=dana)[0] == 200
    ddb, table = boto3.client("dynamodb"), api.stack.physical_ids["ConversationsTable"]

    def reads(reader: int | str, minute: int) -> int:
        key = {"conversation_id": {"S": counter_key(reader, minute, "reads")}, "seq": {"N": "0"}}
        item = ddb.get_item(TableName=table, Key=key, ConsistentRead=True).get("Item")
        return int(item["count"]["N"]) if item else 0

    while True:  # both counters read within one counter's minute
        minute = math.floor(time.time() / 60)
        before = (reads(7, minute), reads("staff:agent-1", minute))
        status, page, _ = call(api, "GET", f"/api/handoffs/{hid}/events", token=dana)
        after = (reads(7, minute), reads("staff:agent-1", minute))
        if math.floor(time.time() / 60) == minute:
            break
    assert status == 200 and after == (before[0], before[1] + 1), (before, after)
    # A poll that waits (nothing after its cursor) holds one of the person's slots, none of the customer's.
    slots, seen = PollSlots(ddb, table), []
    path = f"/api/handoffs/{hid}/events?waitSeconds=2&after={page['nextCursor']}"
    api.use_function("EventsFunction")
    waiting = threading.Thread(target=lambda: api.call("GET", path, token=dana))
    waiting.start()
    while waiting.is_alive() and not seen:
        if slots.held("staff:agent-1"):
            seen.append((slots.held("staff:agent-1"), slots.held(7)))
        time.sleep(0.05)
    waiting.join(10)
    assert seen == [(1, 0)]


def test_an_mcp_hand_off_stays_a_ticket(api: Api) -> None:
    """Opened over MCP (no conversation): listed with a brief of no messages, never taken over (409), closed by
    a lead as before."""
    ids = api.stack.physical_ids
    store = HandoffStore(boto3.client("dynamodb"), ids["ApprovalsTable"], ids["ConversationsTable"], ids["AuditTable"])
    ticket, created = store.open(
        "mcp", 9, 8, "asked over MCP", "customer-8", "call-1", "req-1", "2026-12-04T12:00:00Z", holder=stream_of(8)
    )
    assert created
    hid, dana = ticket.handoff_id, staff(api)
    status, seen, _ = call(api, "GET", f"/api/handoffs/{hid}", token=dana)
    assert (status, seen["conversationId"], seen["brief"]["lastMessages"], seen["brief"]["orders"]) == (
        200,
        None,
        [],
        [],
    )
    for verb, body in (("claim", None), ("release", None), ("messages", {"message": "hi"}), ("return", None)):
        status, out, _ = call(api, "POST", f"/api/handoffs/{hid}/{verb}", body, token=dana)
        assert (status, out["error"]["code"]) == (409, "conflict"), verb
    status, _, _ = call(api, "POST", f"/api/handoffs/{hid}/reassign", {"assignee": "agent-1"}, token=api.lead())
    assert status == 409
    for view in ("conversation", "events"):
        assert call(api, "GET", f"/api/handoffs/{hid}/{view}", token=api.lead())[0] == 404, view
    status, closed, _ = call(api, "POST", f"/api/handoffs/{hid}/close", {"note": "answered by mail"}, token=api.lead())
    assert (status, closed["status"], closed["closedAs"]) == (200, "CLOSED", "closed")
