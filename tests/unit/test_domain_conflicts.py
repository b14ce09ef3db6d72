"""A cancelled money or hand-off transaction becomes a domain error named by the item that failed.

The stores build their items unchanged; ``dynamo.cancellation_as`` reads DynamoDB's per-item reasons
(in request order) and the store says what each means. The conflicts are ``errors.Conflict``s, so the
edge answers 409 with the store's message and no route catches them; the decisions keep their own
messages, which name the approval's current status.
"""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from support_agent.approvals.decisions import ApprovalDecisions
from support_agent.auth import Principal
from support_agent.contract import error_body, status_and_code
from support_agent.errors import Conflict, NotFound
from support_agent.refunds.requests import RefundRace, RefundRequest, RefundWriter
from support_agent.store.approvals import Approval, ApprovalStore, ReservationMissing, StateConflict
from support_agent.store.dynamo import CONDITION_FAILED, cancellation_as
from support_agent.store.handoffs import HandoffConflict, HandoffStore
from support_agent.store.takeover import Takeover
from tests.support.approval_items import approval_item, handoff_item
from tests.support.ledger import direct_row
from tests.support.recording import RecordingDynamo, cancelled

CCF, OK = CONDITION_FAILED, "None"
AID = "apr_01JTESTTESTTESTTESTTESTTES"
CID = "conv_01JTESTTESTTESTTESTTESTTE"
APPROVAL = approval_item(AID, CID)
TICKET = handoff_item(conversation_id=CID)


def failing(*codes: str) -> RecordingDynamo:
    return RecordingDynamo(fail=lambda _items: cancelled(list(codes)))


def test_cancellation_as_raises_the_chosen_error_and_lets_the_rest_through() -> None:
    seen: list[list[str]] = []

    def pick(codes: list[str]) -> Exception | None:
        seen.append(codes)
        return Conflict("picked") if codes[1:2] == [CCF] else None

    with pytest.raises(Conflict, match="picked") as picked, cancellation_as(pick):
        raise cancelled([OK, CCF])
    assert seen == [[OK, CCF]] and picked.value.__suppress_context__
    with pytest.raises(ClientError) as passed, cancellation_as(pick):
        raise cancelled([CCF, OK])  # not one ``pick`` names: the cancellation itself
    assert passed.value.response["Error"]["Code"] == "TransactionCanceledException"
    throttled = ClientError({"Error": {"Code": "ThrottlingException"}}, "TransactWriteItems")
    with pytest.raises(ClientError) as other, cancellation_as(pick):
        raise throttled
    assert other.value is throttled and len(seen) == 2  # never asked about another error


@pytest.mark.parametrize(
    ("codes", "error"),
    [
        ([CCF, OK, OK], StateConflict),  # the approval moved on
        ([], StateConflict),  # no reasons given: read as the approval's
        ([OK, OK, CCF], ReservationMissing),  # the order no longer holds the reservation
        ([OK, CCF, OK], ClientError),  # the audit row's key: not a state the caller can act on
    ],
)
def test_an_approval_cancellation_is_read_by_the_item_that_failed(codes: list[str], error: type[Exception]) -> None:
    db = failing(*codes)
    db.items["Approvals"] = {**APPROVAL, "status": "PENDING"}
    store = ApprovalStore(db, "Approvals", "CustomerData", "Audit")
    with pytest.raises(error):
        store.release(AID, "PENDING", "REJECTED", "lead-1", "approval_rejected", "t")


def test_the_approval_conflicts_are_409s_that_name_the_state() -> None:
    state = StateConflict(Approval.from_item({**APPROVAL, "status": "REFUNDED"}))
    missing = ReservationMissing(Approval.from_item({**APPROVAL, "status": "PENDING"}))
    assert status_and_code(state) == status_and_code(missing) == (409, "conflict")
    assert (state.status, state.message) == ("REFUNDED", "approval is REFUNDED")
    assert error_body(missing)["error"]["message"] == (
        "order 1042 no longer holds the 9000 cents this approval reserved; nothing was changed — reconcile the order "
        "first"
    )


@pytest.mark.parametrize(
    ("status", "decide", "message"),
    [
        ("REJECTED", "approve", "approval is REJECTED; it cannot be approved"),
        ("APPROVED", "reject", "approval is APPROVED; it cannot be rejected"),
        ("PENDING", "retry", "approval is PENDING; only a FAILED refund can be retried"),
        ("REFUNDED", "release", "approval is REFUNDED; only a FAILED refund can be released"),
    ],
)
def test_a_refused_decision_says_what_the_approval_is(status: str, decide: str, message: str) -> None:
    db = RecordingDynamo(items={"Approvals": {**APPROVAL, "status": status}})
    decisions = ApprovalDecisions(ApprovalStore(db, "Approvals", "CustomerData", "Audit"), None, "", 0, lambda: "t")
    args: dict[str, Any] = {"reason": None} if decide == "reject" else {}
    with pytest.raises(Conflict) as refused:
        getattr(decisions, decide)(AID, "lead-1", **args)
    assert refused.value.message == message and not db.transactions


@pytest.mark.parametrize(("status", "decide"), [("REJECTED", "reject"), ("RELEASED", "release")])
def test_asking_again_for_the_state_it_is_in_answers_it(status: str, decide: str) -> None:
    db = RecordingDynamo(items={"Approvals": {**APPROVAL, "status": status}})
    decisions = ApprovalDecisions(ApprovalStore(db, "Approvals", "CustomerData", "Audit"), None, "", 0, lambda: "t")
    args: dict[str, Any] = {"reason": None} if decide == "reject" else {}
    decision = getattr(decisions, decide)(AID, "lead-1", **args)
    assert (decision.approval.status, decision.done, db.transactions) == (status, True, [])


def request() -> RefundRequest:
    return RefundRequest(7, 1042, 18900, 100, "USD", "broken", "refund#x", CID, "toolu_1", "customer-7", "r", "t")


@pytest.mark.parametrize(("codes", "exists"), [([CCF, OK, OK], True), ([OK, CCF, OK], False), ([], False)])
def test_a_refund_cancellation_is_a_race_that_knows_whether_the_call_was_recorded(
    codes: list[str], exists: bool
) -> None:
    writer = RefundWriter(failing(*codes), "CustomerData", "Approvals", "Audit")
    with pytest.raises(RefundRace) as race:
        writer.direct(request(), 5000, direct_row(request()))
    assert race.value.request_exists is exists


def test_closing_a_closed_or_unknown_hand_off_is_a_409_or_a_404() -> None:
    db = RecordingDynamo(items={"Approvals": {**TICKET, "status": "CLOSED"}})
    takeover = Takeover(db, "Approvals", "Conversations", "Audit")
    lead = Principal("lead-1", "support_lead")
    with pytest.raises(HandoffConflict) as closed:
        takeover.close("hof_1", lead, "t")
    assert status_and_code(closed.value) == (409, "conflict") and closed.value.message == "hand-off is CLOSED"
    db.items.clear()
    with pytest.raises(NotFound, match="hand-off not found"):
        takeover.close("hof_1", lead, "t")
    # a lead closed it meanwhile (the ticket's own update failed; then the header's, the notification's counter...)
    db.items["Approvals"], db.fail = TICKET, lambda _items: cancelled([CCF, OK, OK, OK, OK])
    with pytest.raises(HandoffConflict, match="hand-off is OPEN"):  # read back as it is (here: unchanged)
        takeover.close("hof_1", lead, "t")


def test_opening_where_one_is_open_answers_that_one_and_otherwise_the_cancellation_stands() -> None:
    db = failing(OK, OK, CCF, OK)
    store = HandoffStore(db, "Approvals", "Conversations", "Audit")
    args = {"seq": 3, "customer_id": 7, "reason": "a person", "actor": "customer-7", "tool_use_id": "toolu_1"}
    with pytest.raises(ClientError):  # no open ticket to answer with (say, no such conversation)
        store.open(CID, request_id="r", now="t", **args)  # type: ignore[arg-type]
    db.items.update(Conversations={"conversation_id": CID, "seq": 0, "open_handoff_id": "hof_1"}, Approvals=TICKET)
    ticket, created = store.open(CID, request_id="r", now="t", **args)  # type: ignore[arg-type]
    assert (ticket.handoff_id, created) == ("hof_1", False)
