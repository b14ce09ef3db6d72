"""The hash-chained audit trail on the deployed template: one writer per stream, the trail followed across
streams, `GET /api/audit/verify`, tampering found, racing writers never forking a stream."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import boto3

from support_agent.ids import new_approval_id, new_conversation_id
from support_agent.refunds.ledger import RefundLedger
from support_agent.refunds.ledger_row import By, Outcome
from support_agent.store.audit import AuditStore
from support_agent.store.dynamo import from_item, to_item
from tests.integration.conftest import Api
from tests.integration.test_lead_api import wait_status
from tests.support.aws import serialised_moto
from tests.support.ledger import direct_row, tool_request
from tests.support.scripted import answer, tool_use, tools
from tests.support.threads import run_together


def env(api: Api) -> dict[str, str]:
    return api.stack.function_env("ApprovalsFunction")


_SCENARIOS: dict[int, tuple[str, str, str]] = {}


def a_conversation_with_everything(api: Api) -> tuple[str, str, str]:
    """A direct refund, a hand-off, then a refund over the threshold that a lead approves; the lead closes the
    hand-off. (conversation, approval, hand-off) — once per stack: the orders' money is spent after it."""
    if id(api.stack) not in _SCENARIOS:
        _SCENARIOS[id(api.stack)] = _scenario(api)
    return _SCENARIOS[id(api.stack)]


def _scenario(api: Api) -> tuple[str, str, str]:
    api.model.script = [
        tools(tool_use("request_refund", {"order_id": 1043, "amount_cents": 1000, "reason": "late"})),
        answer("Refunded."),
    ]
    status, body, _ = api.call("POST", "/api/chat", {"message": "refund 1043 please"})
    assert status == 200, body
    cid = body["conversationId"]
    # The hand-off last: while it is open the model is not called (the next message would be kept for a person).
    api.model.script = [
        tools(
            tool_use("request_refund", {"order_id": 1042, "amount_cents": 18900, "reason": "damaged"}),
            tool_use("escalate_to_human", {"reason": "wants a person"}),
        ),
        answer("A teammate must approve this refund, and a teammate will call."),
    ]
    status, body, _ = api.call("POST", "/api/chat", {"message": "and refund 1042, and a human", "conversationId": cid})
    assert status == 200, body
    approval_id = body["trace"][0]["toolCalls"][0]["result"]["approval_id"]
    handoff_id = body["trace"][0]["toolCalls"][1]["result"]["handoff_id"]
    assert api.call("POST", f"/api/approvals/{approval_id}/approve", token=api.lead())[0] in (200, 202)
    assert wait_status(api, approval_id, "REFUNDED", seconds=15)["status"] == "REFUNDED"
    assert api.call("POST", f"/api/handoffs/{handoff_id}/close", {"note": "called"}, token=api.lead())[0] == 200
    return cid, approval_id, handoff_id


def test_a_conversations_trail_follows_its_streams_and_every_chain_verifies(api: Api) -> None:
    cid, approval_id, handoff_id = a_conversation_with_everything(api)
    _, trail, _ = api.call("GET", f"/api/audit?conversationId={cid}", token=api.lead())
    actions = [r["action"] for r in trail["records"]]
    # Decisions, hand-off closures and payment outcomes, though each is written on its own stream.
    assert {
        "tool_call",
        "refund",
        "payment_refund",
        "handoff_opened",
        "handoff_closed",
        "refund_requested",
        "approval_approved",
        "refund_started",
    } <= set(actions), actions
    assert actions.count("payment_refund") == 2  # the direct refund's and the approved one's
    assert all(r["n"] is not None for r in trail["records"])
    assert [(r["createdAt"], r["eventId"]) for r in trail["records"]] == sorted(
        (r["createdAt"], r["eventId"]) for r in trail["records"]
    )

    status, verified, _ = api.call("GET", f"/api/audit/verify?conversationId={cid}", token=api.lead())
    assert status == 200, verified
    assert (verified["stream"], verified["status"], verified["firstBreak"], verified["sealedAt"]) == (
        cid,
        "ok",
        None,
        None,
    )
    names = {s["stream"] for s in verified["streams"]}
    assert {cid, f"approval#{approval_id}", f"refund#{approval_id}", f"handoff#{handoff_id}"} <= names
    assert len([n for n in names if n.startswith("refund#")]) == 2
    assert all((s["status"], s["chainStartsAt"], s["unchained"]) == ("ok", 1, 0) for s in verified["streams"])
    assert sum(s["rows"] for s in verified["streams"]) == len(trail["records"])

    status, by_approval, _ = api.call("GET", f"/api/audit/verify?approvalId={approval_id}", token=api.lead())
    assert (status, by_approval["stream"], by_approval["status"]) == (200, f"approval#{approval_id}", "ok")


def test_a_plain_put_item_over_an_audit_row_breaks_its_chain(api: Api) -> None:
    cid, _, handoff_id = a_conversation_with_everything(api)
    ddb = boto3.client("dynamodb")
    table = env(api)["AUDIT_TABLE"]
    rows = AuditStore(ddb, table).list_stream(cid)
    victim = next(r for r in rows if r["action"] == "tool_call" and r["tool"] == "request_refund")
    ddb.put_item(TableName=table, Item=to_item({**victim, "outcome": "error"}))  # what any PutItem role can do

    status, verified, _ = api.call("GET", f"/api/audit/verify?conversationId={cid}", token=api.lead())
    assert status == 200
    assert verified["status"] == "broken"
    assert verified["firstBreak"] == {"eventId": victim["event_id"], "kind": "changed", "stream": cid}
    others = [s for s in verified["streams"] if s["stream"] != cid]
    assert others and all(s["status"] == "ok" for s in others)  # only the tampered stream is broken

    # A hand-off's row deleted is found too (a table restore, a role with DeleteItem).
    stream = f"handoff#{handoff_id}"
    (opened, _closed) = AuditStore(ddb, table).list_stream(stream)
    ddb.delete_item(TableName=table, Key=to_item({"stream": stream, "event_id": opened["event_id"]}))
    _, verified, _ = api.call("GET", f"/api/audit/verify?conversationId={cid}", token=api.lead())
    (handoff,) = [s for s in verified["streams"] if s["stream"] == stream]
    assert (handoff["status"], handoff["firstBreak"]["kind"]) == ("broken", "missing")


def test_a_changed_row_claiming_a_redaction_is_broken_and_listed(api: Api) -> None:
    """Issue 30 finding 5: one plain PutItem with a changed outcome and ``redacted_at`` read ``ok`` (verify skipped
    the payload of a row carrying it, though no writer redacts). Now the row is ``changed`` and listed."""
    api.model.script = [tools(tool_use("lookup_order", {"order_id": 1042})), answer("It shipped.")]
    status, body, _ = api.call("POST", "/api/chat", {"message": "where is 1042"})
    assert status == 200, body
    cid = body["conversationId"]
    ddb, table = boto3.client("dynamodb"), env(api)["AUDIT_TABLE"]
    (victim,) = [r for r in AuditStore(ddb, table).list_stream(cid) if r["action"] == "tool_call"]
    _, untouched, _ = api.call("GET", f"/api/audit/verify?conversationId={cid}", token=api.lead())
    assert untouched["status"] == "ok"

    ddb.put_item(TableName=table, Item=to_item({**victim, "outcome": "error", "redacted_at": "x"}))

    status, verified, _ = api.call("GET", f"/api/audit/verify?conversationId={cid}", token=api.lead())
    assert status == 200, verified
    assert verified["status"] == "broken"
    assert verified["firstBreak"] == {"eventId": victim["event_id"], "kind": "changed", "stream": cid}
    assert (untouched["redacted"], verified["redacted"]) == ([], [victim["event_id"]])
    assert verified["streams"][0]["redacted"] == [victim["event_id"]]


def test_verify_needs_a_lead_and_exactly_one_known_id(api: Api) -> None:
    assert api.call("GET", "/api/audit/verify", token=api.lead())[0] == 400
    both = f"/api/audit/verify?conversationId={new_conversation_id()}&approvalId={new_approval_id()}"
    assert api.call("GET", both, token=api.lead())[0] == 400
    assert api.call("GET", "/api/audit/verify?conversationId=nope", token=api.lead())[0] == 400
    unknown = f"/api/audit/verify?conversationId={new_conversation_id()}"
    assert api.call("GET", unknown, token=api.lead())[0] == 404
    assert api.call("GET", f"/api/audit/verify?approvalId={new_approval_id()}", token=api.lead())[0] == 404
    assert api.call("GET", unknown)[0] == 403


def test_racing_writers_on_one_stream_never_fork_it(api: Api) -> None:
    """Concurrent decisions on one approval (one wins, the rest 409), and concurrent audited provider calls on
    one refund key (each re-reads the moved head and appends): every row lands once, in one chain."""
    api.model.script = [
        tools(tool_use("request_refund", {"order_id": 1044, "amount_cents": 16000, "reason": "damaged"})),
        answer("A teammate must approve this refund."),
    ]
    _, body, _ = api.call("POST", "/api/chat", {"message": "refund 1044"})
    approval_id = body["trace"][0]["toolCalls"][0]["result"]["approval_id"]
    statuses: list[Any] = []

    def decide(action: str) -> None:
        try:
            statuses.append(api.call("POST", f"/api/approvals/{approval_id}/{action}", token=api.lead())[0])
        except BaseException as exc:  # reported below
            statuses.append(exc)

    api.call("GET", f"/api/approvals/{approval_id}", token=api.lead())  # the handler loaded before the race
    with serialised_moto():  # moto is not atomic per request as DynamoDB is; our code still races freely
        run_together([lambda: decide("reject")] * 4)
    assert statuses == [200, 200, 200, 200], statuses  # the first rejects, the rest answer the current state
    ddb = boto3.client("dynamodb")
    e = env(api)
    audit = AuditStore(ddb, e["AUDIT_TABLE"], e["CONVERSATIONS_TABLE"], e["APPROVALS_TABLE"], e["CUSTOMER_DATA_TABLE"])
    rows = audit.list_stream(f"approval#{approval_id}")
    assert [(r["action"], r["n"]) for r in rows] == [("refund_requested", 1), ("approval_rejected", 2)]
    assert audit.verify_stream(f"approval#{approval_id}")["status"] == "ok"

    # One refund key, four audited provider calls at once (each "still pending": nothing new but the row).
    ledger = RefundLedger(ddb, e["CUSTOMER_DATA_TABLE"], e["APPROVALS_TABLE"], e["AUDIT_TABLE"])
    race = new_conversation_id()
    request = tool_request(7, 1043, 500, "t", payment_intent="pi_x", conversation_id=race, tool_use_id="toolu_race")
    # Settling at the provider (its refund made, the answer still pending); the row names no tool call.
    row = replace(direct_row(request, "stripe"), status="SETTLING", refund_id="re_race", tool_use_id="")
    item = RefundLedger.new_row(row, "2026-12-03T00:00:00Z")
    ddb.put_item(TableName=e["CUSTOMER_DATA_TABLE"], Item=to_item({**item, "refund_id": "re_race"}))
    errors: list[BaseException] = []

    def audited() -> None:
        try:
            ledger.record(row, Outcome("SETTLING", "re_race", "pending"), "2026-12-03T00:00:01Z", By("payment-sweep"))
        except BaseException as exc:
            errors.append(exc)

    with serialised_moto():
        run_together([audited] * 4)
    assert errors == []
    rows = audit.list_stream(row.audit_stream)
    assert sorted(r["n"] for r in rows) == [1, 2, 3, 4]
    item = ddb.get_item(TableName=e["CUSTOMER_DATA_TABLE"], Key=to_item({"customer_id": 7, "sk": row.sk}))
    assert from_item(item["Item"])["audit_n"] == 4
    assert audit.verify_stream(row.audit_stream)["status"] == "ok"
