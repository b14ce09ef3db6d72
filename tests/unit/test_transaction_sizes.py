"""Every TransactWriteItems the code builds stays within DynamoDB's 100 items, in its worst case.

Sizes are not restated here: each builder is called (a recording client captures its TransactItems;
the turn runs on moto with the worst answer a model may give), so the test fails when a constant
such as MAX_TOOL_USES or the erasure chunk grows unsafely, or when a new call site appears uncovered.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support_agent.agent.model_output import MAX_TOOL_USES
from support_agent.auth import Principal
from support_agent.config import Settings
from support_agent.refunds.ledger import RefundLedger
from support_agent.refunds.ledger_row import By, Outcome
from support_agent.refunds.requests import RefundRequest, RefundWriter
from support_agent.store.approvals import Approval, ApprovalStore
from support_agent.store.erasure import ConversationEraser
from support_agent.store.handoffs import HandoffStore
from support_agent.store.takeover import Takeover
from support_agent.store.turns import TurnStore
from tests.support.approval_items import approval_item, handoff_item
from tests.support.harness import Crash, Harness, make_harness
from tests.support.ledger import direct_row, ledger_item
from tests.support.recording import RecordingDynamo
from tests.support.scripted import answer, tool_use, tools

DYNAMODB_LIMIT = 100  # TransactWriteItems: at most 100 actions (AWS quota, not ours to change)
SOURCES = Path(__file__).resolve().parents[2] / "layers" / "common" / "support_agent"
CID = "conv_01JTESTTESTTESTTESTTESTTE"
# Every call site, by module, and the tests below that build its worst case.
COVERED = {
    "store/conversations.py": 1,  # write-ahead and results: test_turn_writes
    "refunds/requests.py": 1,  # direct, reserve (and a held one's, with its dedupe item): test_money_writes
    # The ledger's, test_ledger_writes: begin_approved; new_attempt and an audited call that changed nothing (row
    # head + row). fail_unstarted, record and fail_late go through notifications.py's, as the approvals' do.
    "refunds/approved.py": 1,
    "refunds/settlements.py": 2,
    # a decision's own items, with or without its notification's two (counter, notification): test_ledger_writes
    # (fail_unstarted, record, fail_late), test_approval_decisions (approve, retry, reject/expire/release: without a
    # conversations table, the items alone), turns.py's turn.failed, and a proposal's writes (store/proposals.py:
    # its creation, each move with the action's own order update): test_proposal_writes
    "store/notifications.py": 1,
    "store/takeover.py": 1,  # a person's reply (its changes of owner go through notifications.py's): test_hand_offs
    "store/erasure.py": 2,  # chunks, and the run's summary (record item + row): test_erasure_chunks
    "store/turns.py": 2,  # a turn's claim (record + key), the worker's take-over (header + check): test_turn_claim
    "mcp/our_tools.py": 1,  # an MCP call's audit row with its stream's head: test_mcp_audit
}


def test_every_call_site_is_covered() -> None:
    found = {
        str(p.relative_to(SOURCES)): n
        for p in sorted(SOURCES.rglob("*.py"))
        if (n := len(re.findall(r"\.transact_write_items\(", p.read_text())))
    }
    assert found == COVERED, "a TransactWriteItems call site changed: size its worst case here"


def max_tool_calls_per_turn() -> int:
    """The highest per-turn cap a stage may configure (config.py's bound)."""
    field = Settings.model_fields["max_tool_calls_per_turn"]
    return int(next(m.le for m in field.metadata if hasattr(m, "le")))


@pytest.fixture
def recorded(aws: None) -> Iterator[tuple[Harness, list[list[dict[str, Any]]]]]:
    h = make_harness(MAX_TOOL_CALLS_PER_TURN=str(max_tool_calls_per_turn()))
    seen: list[list[dict[str, Any]]] = []

    def record(params: dict[str, Any], **_: Any) -> None:
        seen.append(list(params["TransactItems"]))

    h.ddb.meta.events.register("provide-client-params.dynamodb.TransactWriteItems", record, unique_id="sizes")
    yield h, seen
    h.ddb.meta.events.unregister("provide-client-params.dynamodb.TransactWriteItems", unique_id="sizes")


def audit_puts(items: list[dict[str, Any]], h: Harness) -> int:
    return sum(1 for i in items if i.get("Put", {}).get("TableName") == h.settings.audit_table)


def test_turn_writes(recorded: tuple[Harness, list[list[dict[str, Any]]]]) -> None:
    """Write-ahead (user + assistant + header) and the results of the most tool calls an answer may carry."""
    h, seen = recorded
    flood = [tool_use("lookup_order", {"order_id": 1042}) for _ in range(MAX_TOOL_USES + 8)]
    h.model.script = [tools(*flood), answer("done")]
    cid = h.turn("look everything up").conversation_id
    # The same answer again, crashed after its write-ahead: the next turn's repair answers every call at once.
    h.model.script = [tools(*[tool_use("lookup_order", {"order_id": 1042}) for _ in range(MAX_TOOL_USES + 8)])]
    h.crash_at = {"after_write_ahead"}
    with pytest.raises(Crash):
        h.turn("again", cid)
    h.model.script = [answer("done")]
    h.turn("and?", cid)

    sizes = [len(items) for items in seen]
    assert max(sizes) <= DYNAMODB_LIMIT, sizes
    results = [items for items in seen if audit_puts(items, h)]
    assert len(results) == 2  # the turn's results, the repair's
    for items in results:  # one results message + the header + one audit row per call, every call answered
        assert audit_puts(items, h) == MAX_TOOL_USES and len(items) == MAX_TOOL_USES + 2
    messages = [sum(1 for i in items if "seq" in i.get("Put", {}).get("Item", {})) for items in seen]
    assert max(messages) == 3, "the first write-ahead: user + assistant messages and the new header"


def request(amount: int) -> RefundRequest:
    return RefundRequest(7, 1042, 18900, amount, "USD", "broken", "refund#x", CID, "toolu_1", "customer-7", "r", "t")


def test_money_writes() -> None:
    db = RecordingDynamo()
    writer = RefundWriter(db, "CustomerData", "Approvals", "Audit")
    writer.direct(request(100), 5000, direct_row(request(100)))
    writer.reserve(request(9000), "apr_1", {"status": "PENDING_APPROVAL", "approval_id": "apr_1"})
    # An MCP call's held request: the reserve grows by its dedupe item (request row, order, approval, audit, dedupe).
    writer.reserve(request(100), "apr_2", {"status": "PENDING_APPROVAL", "approval_id": "apr_2"}, held=True)
    writer.reserve(request(100), "apr_3", {"approval_id": "apr_3"}, held=True, replaces="apr_2")
    assert [len(t) for t in db.transactions] == [3, 4, 5, 5]
    assert all(len(t) <= DYNAMODB_LIMIT for t in db.transactions)


def test_ledger_writes() -> None:
    """The largest: an approved refund's outcome (row, audit, order, approval) with a webhook's dedupe item and the
    approval's notification (counter + notification); its start (approval, row, audit, the order's reservation
    checked); a start refused for a lost reservation (approval, audit, notification). Every settlement announced
    carries the notification's two items, at the end."""
    approval = approval_item("apr_1", CID)
    db = RecordingDynamo(items={"Approvals": {**approval, "status": "APPROVED"}})
    ledger = RefundLedger(db, "CustomerData", "Approvals", "Audit", "Conversations")
    approved = Approval.from_item({**approval, "status": "APPROVED"})
    row = ledger.begin_approved(dataclasses.replace(approved, payment_intent="pi_1"), "stripe", "t", "refund-flow")
    db.items["CustomerData"] = {**ledger_item(row)}
    for outcome in (Outcome("SUCCEEDED", "re_1", "succeeded"), Outcome("FAILED", failure_code="x")):
        ledger.record(row, outcome, "t", By("refund-flow"))
    dedupe = {"Put": {"TableName": "CustomerData", "Item": {}, "ConditionExpression": "attribute_not_exists(sk)"}}
    ledger.record(row, Outcome("SUCCEEDED", "re_1", "succeeded"), "t", By("stripe-webhook", "evt_1", [dedupe]))
    direct = dataclasses.replace(row, kind="direct", approval_id="", conversation_id=CID)
    ledger.record(direct, Outcome("FAILED", failure_code="x"), "t", By("customer-7"))  # the chat's: not announced
    ledger.record(direct, Outcome("FAILED", failure_code="x"), "t", By("payment-sweep", announce=True))
    ledger.fail_unstarted(approved, "t", "refund-flow", "reservation_missing")
    succeeded = dataclasses.replace(row, status="SUCCEEDED", refund_id="re_1")
    db.items["CustomerData"] = ledger_item(succeeded)
    ledger.fail_late(succeeded, "re_1", "lost_or_stolen_card", "t", By("webhook", "evt_2", [dedupe]))
    ledger.new_attempt(row, "t", "payment-sweep")
    settling = dataclasses.replace(row, status="SETTLING", refund_id="re_1")
    ledger.record(settling, Outcome("SETTLING", "re_1", "pending"), "t", By("payment-sweep"))  # nothing new: audited
    assert [len(t) for t in db.transactions] == [4, 6, 5, 7, 3, 5, 4, 7, 2, 2]
    notes = [t for t in db.transactions if t[-1].get("Put", {}).get("TableName") == "Conversations"]
    assert len(notes) == 6 and all(t[-2]["Update"]["TableName"] == "Conversations" for t in notes)
    assert all(len(t) <= DYNAMODB_LIMIT for t in db.transactions)


def test_approval_decisions() -> None:
    approval = approval_item("apr_1", CID)
    db = RecordingDynamo()
    store = ApprovalStore(db, "Approvals", "CustomerData", "Audit", "Conversations")
    for status, decide in [
        ("PENDING", lambda: store.approve("apr_1", "lead-1", "t")),
        ("FAILED", lambda: store.mark_retry("apr_1", "lead-1", "t")),
        ("PENDING", lambda: store.release("apr_1", "PENDING", "REJECTED", "lead-1", "approval_rejected", "t", "no")),
    ]:
        db.items["Approvals"] = {**approval, "status": status}
        decide()
    # approve, retry: approval + audit row; reject (and expire, release): + the order + the notification's two
    assert [len(t) for t in db.transactions] == [2, 2, 5]
    # A held MCP request's approval (no conversation: no notification): its PENDING's end removes the dedupe item.
    held = {**approval, "conversation_id": None, "dedupe_sk": "HELD#1042#9000"}
    for status, decide in [
        ("PENDING", lambda: store.approve("apr_1", "lead-1", "t")),
        ("FAILED", lambda: store.release("apr_1", "FAILED", "RELEASED", "lead-1", "refund_released", "t")),
        ("PENDING", lambda: store.release("apr_1", "PENDING", "EXPIRED", "sweep", "approval_expired", "t")),
    ]:
        db.items["Approvals"] = {**held, "status": status}
        decide()
    assert [len(t) for t in db.transactions] == [2, 2, 5, 3, 3, 4]
    assert all(len(t) <= DYNAMODB_LIMIT for t in db.transactions)


def test_hand_offs() -> None:
    db = RecordingDynamo()
    store = HandoffStore(db, "Approvals", "Conversations", "Audit")
    store.open(
        conversation_id=CID,
        seq=3,
        customer_id=7,
        reason="wants a person",
        actor="customer-7",
        tool_use_id="toolu_1",
        request_id="r",
        now="t",
    )
    db.items["Approvals"] = handoff_item(conversation_id=CID)
    db.items["Conversations"] = {
        "conversation_id": CID,
        "seq": 0,
        "customer_id": 7,
        "next_seq": 4,
        "open_handoff_id": "hof_1",
    }
    takeover = Takeover(db, "Approvals", "Conversations", "Audit")
    staff = Principal("agent-1", "support_staff", name="Sam")
    takeover.claim("hof_1", staff, "2026-12-04T12:00:00Z")  # ticket + row, header, counter + notification
    db.items["Approvals"] = handoff_item(conversation_id=CID, status="ASSIGNED", assignee="agent-1")
    db.items["Conversations"] = {**db.items["Conversations"], "answerer": "person:agent-1"}
    header_only = db.get_item
    # a new Idempotency-Key: the double answers its one Conversations item for any key, so the key's read is empty
    db.get_item = lambda **kw: {} if "idem#" in str(kw["Key"]) else header_only(**kw)  # type: ignore[method-assign]
    takeover.reply("hof_1", staff, "hello", "2026-12-04T12:00:00Z", key="k")  # ticket + row, message, header, key
    # open (ticket + row, call record, header, counter + notification), claim, reply
    assert [len(t) for t in db.transactions] == [6, 5, 5]
    assert all(len(t) <= DYNAMODB_LIMIT for t in db.transactions)


def test_mcp_audit() -> None:
    """An MCP call's audit row and its stream's head (the customer's ``mcp#<id>`` item)."""
    from support_agent.mcp.our_tools import McpServices, append_audit
    from support_agent.store.audit import AuditRecord

    db = RecordingDynamo()
    services = McpServices(None, db, "Conversations", "Audit")  # type: ignore[arg-type]
    append_audit(services, 7, AuditRecord("mcp#7", "tool_call", "customer-7", "ok", 7, "t", origin="mcp"))
    assert [len(t) for t in db.transactions] == [2]


def test_erasure_chunks() -> None:
    """A conversation long enough for several chunks: full chunks are exactly at the limit, never over."""
    rows = [
        {"conversation_id": CID, "seq": s, "role": "user", "content": '[{"type":"text","text":"x"}]'}
        for s in range(1, 3 * DYNAMODB_LIMIT)
    ]
    header = {"conversation_id": CID, "seq": 0, "customer_id": 7}
    db = RecordingDynamo(items={"Conversations": header}, queries={"by_customer": [header], "Conversations": rows})
    ConversationEraser(db, "Conversations", "Audit", lambda: 0.0, lambda: "t").erase_customer(7, "lead-1", "r")
    sizes = [len(t) for t in db.transactions]
    assert len(sizes) > 1 and max(sizes) <= DYNAMODB_LIMIT, sizes
    assert sizes[-1] == 2  # the run's summary: its record item (the erasure stream's head) and its row
    assert sum(size - 2 for size in sizes) == len(rows)  # each chunk: its tombstones + header + audit row


def test_turn_claim() -> None:
    """A turn's record and its idempotency key, claimed together; the worker's take-over (the header's lease and
    a check of the record): two items each, whatever the request."""
    db = RecordingDynamo()
    store = TurnStore(db, "Conversations")
    big = store.claim(7, "customer-7", "k" * 255, "f", CID, False, "m" * 4000, now="t", now_epoch=0, running_seconds=60)
    store.claim(7, "customer-7", None, "f", CID, False, "m", now="t", now_epoch=0, running_seconds=60)
    assert big.turn is not None
    assert store.take_over(big.turn, "handed", "mine", now_epoch=0, lease_until=40)
    assert [len(t) for t in db.transactions] == [2, 1, 2]


def test_proposal_writes() -> None:
    """A proposal written (item + row + the turn's fence + counter + notification) and each move (item + rows + the
    action's order update + counter + notification): the largest, a confirmed address change's end."""
    from support_agent.store.proposals import ProposalItem, ProposalStore

    db = RecordingDynamo()
    store = ProposalStore(db, "CustomerData", "Audit", "Conversations")
    proposal = ProposalItem(
        customer_id=7,
        sk="PROPOSAL#" + CID + "#prp_1",
        proposal_id="prp_1",
        conversation_id=CID,
        seq=3,
        tool_use_id="toolu_1",
        action="update_shipping_address",
        order_id=1045,
        input={"order_id": 1045},
        summary="s",
        status="PROPOSED",
        created_at="t",
        expires_at="u",
        policy_version=0,
    )
    fence = {"ConditionCheck": {"TableName": "Conversations", "Key": {}, "ConditionExpression": "x"}}
    written = store.create(proposal, proposal.row("proposal_created", "customer-7", "PROPOSED", "t", {}), fence)
    order = {"Update": {"TableName": "CustomerData", "Key": {}, "UpdateExpression": "SET a = :a"}}
    rows = [written.row("proposal_completed", "customer-7", "ADDRESS_UPDATED", "t", {})]
    store.move(written, {"status": "CONFIRMED"}, rows, note=written.note("confirmed", "t"), extra=[order])
    assert [len(t) for t in db.transactions] == [5, 5]
    assert all(len(t) <= DYNAMODB_LIMIT for t in db.transactions)
