"""The support lead's API on the deployed template: approvals, RefundFlow in moto, hand-offs, audit."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from devstack.seed import put_order as seed_order
from support_agent import wiring
from support_agent.approvals.notifier import iso
from support_agent.approvals.sweep import ApprovalSweeper, SweepResult
from support_agent.config import load_settings
from support_agent.store.approvals import Approval, ApprovalStore
from support_agent.store.dynamo import from_item
from support_agent.store.handoffs import Handoff
from support_agent.store.records import Record
from tests.integration.conftest import Api
from tests.support.aws import serialised_moto
from tests.support.scripted import answer, tool_use, tools
from tests.support.threads import run_together


def raise_approval(api: Api, order: int, amount: int, customer: int = 7) -> tuple[str, str]:
    """Through the real chat path: a refund over the threshold becomes a PENDING approval."""
    api.model.script = [
        tools(tool_use("request_refund", {"order_id": order, "amount_cents": amount, "reason": "damaged"})),
        answer("A teammate must approve this refund."),
    ]
    token = api.token(f"customer-{customer}", customer_id=customer)
    status, body, _ = api.call("POST", "/api/chat", {"message": f"refund {order}"}, token=token)
    assert status == 200, body
    result = body["trace"][0]["toolCalls"][0]["result"]
    assert result["status"] == "PENDING_APPROVAL", result
    return result["approval_id"], body["conversationId"]


def order(api: Api, order_id: int, customer: int = 7) -> dict[str, int]:
    table = api.stack.function_env("ChatFunction")["CUSTOMER_DATA_TABLE"]
    item = boto3.client("dynamodb").get_item(
        TableName=table, Key={"customer_id": {"N": str(customer)}, "sk": {"S": f"ORDER#{order_id}"}}
    )["Item"]
    return {k: int(item[k]["N"]) for k in ("total_cents", "available_cents", "reserved_cents", "refunded_cents")}


def refund_rows(api: Api, customer: int, approval_id: str) -> int:
    table = api.stack.function_env("ChatFunction")["CUSTOMER_DATA_TABLE"]
    out = boto3.client("dynamodb").query(
        TableName=table,
        KeyConditionExpression="customer_id = :c AND sk = :s",
        ExpressionAttributeValues={":c": {"N": str(customer)}, ":s": {"S": f"REFUND#{approval_id}"}},
    )
    return len(out["Items"])


def undeclared(api: Api, record: type[Record], key: str) -> dict[str, Any]:
    """The attributes the stored item carries that its record does not declare: every writer's attribute is a
    field of its record (store/records.py), so this is empty whichever writers touched the item."""
    table = api.stack.function_env("ChatFunction")["APPROVALS_TABLE"]
    item = boto3.client("dynamodb").get_item(TableName=table, Key={"approval_id": {"S": key}})["Item"]
    return record.from_item(from_item(item)).extra


def invariant(o: dict[str, int]) -> None:
    assert o["available_cents"] + o["reserved_cents"] + o["refunded_cents"] == o["total_cents"]
    assert min(o.values()) >= 0


def wait_status(api: Api, approval_id: str, wanted: str, seconds: float = 10) -> dict[str, Any]:
    until = time.monotonic() + seconds
    while True:
        _, body, _ = api.call("GET", f"/api/approvals/{approval_id}", token=api.lead())
        if body["status"] == wanted or time.monotonic() > until:
            return body
        time.sleep(0.1)


def test_customer_can_never_approve(api: Api) -> None:
    approval_id, _ = raise_approval(api, 1044, 16000)
    for action in ("approve", "reject", "retry", "release"):
        status, body, _ = api.call("POST", f"/api/approvals/{approval_id}/{action}")
        assert (status, body["error"]["code"]) == (403, "forbidden")
    status, _, _ = api.call("GET", "/api/approvals")
    assert status == 403
    assert api.call("GET", f"/api/approvals/{approval_id}", token=None)[0] == 401


def test_approve_completes_refund_exactly_once(api: Api) -> None:
    approval_id, cid = raise_approval(api, 1042, 18900)
    status, body, _ = api.call("GET", "/api/approvals?status=PENDING", token=api.lead())
    assert status == 200 and approval_id in [a["approvalId"] for a in body["approvals"]]
    status, body, _ = api.call("POST", f"/api/approvals/{approval_id}/approve", token=api.lead())
    assert status in (200, 202), body
    assert body["decidedBy"] == "lead-1"
    final = wait_status(api, approval_id, "REFUNDED")
    assert final["status"] == "REFUNDED"
    # Approving again answers the current state; rejecting now is a conflict.
    status, again, _ = api.call("POST", f"/api/approvals/{approval_id}/approve", token=api.lead())
    assert (status, again["status"]) == (200, "REFUNDED")
    status, body, _ = api.call("POST", f"/api/approvals/{approval_id}/reject", token=api.lead())
    assert (status, body["error"]["code"]) == (409, "conflict")
    o = order(api, 1042)
    invariant(o)
    assert (o["reserved_cents"], o["refunded_cents"]) == (0, 18900)
    assert refund_rows(api, 7, approval_id) == 1
    # The customer sees it in the conversation; the lead sees the whole trail.
    _, view, _ = api.call("GET", f"/api/conversations/{cid}")
    assert view["refunds"][0]["status"] == "REFUNDED"
    _, trail, _ = api.call("GET", f"/api/audit?conversationId={cid}", token=api.lead())
    actions = [r["action"] for r in trail["records"]]
    assert {"tool_call", "refund_requested", "approval_approved", "refund_started", "payment_refund"} <= set(actions)
    assert [r["eventId"] for r in trail["records"]] == sorted(r["eventId"] for r in trail["records"])


def test_reject_releases_reservation(api: Api) -> None:
    approval_id, _ = raise_approval(api, 2001, 7400, customer=8)
    assert order(api, 2001, 8)["reserved_cents"] == 7400
    status, body, _ = api.call(
        "POST", f"/api/approvals/{approval_id}/reject", {"reason": "not eligible"}, token=api.lead()
    )
    assert (status, body["status"]) == (200, "REJECTED")
    o = order(api, 2001, 8)
    invariant(o)
    assert (o["available_cents"], o["reserved_cents"]) == (7400, 0)
    status, body, _ = api.call("POST", f"/api/approvals/{approval_id}/approve", token=api.lead())
    assert (status, body["error"]["code"]) == (409, "conflict")
    status, body, _ = api.call("POST", f"/api/approvals/{approval_id}/reject", token=api.lead())
    assert (status, body["status"]) == (200, "REJECTED")  # an idempotent repeat
    _, trail, _ = api.call("GET", "/api/audit?customerId=8", token=api.lead())
    assert "approval_rejected" in [r["action"] for r in trail["records"]]
    assert undeclared(api, Approval, approval_id) == {}  # the decision's attributes, reason included


def test_ten_concurrent_approves_one_refund_no_5xx(api: Api) -> None:
    put_order(api, 7, 1999, 16000)
    approval_id, _ = raise_approval(api, 1999, 16000)
    api.use_function("ApprovalsFunction")
    statuses: list[int] = []
    lock = threading.Lock()

    def approve() -> None:
        status, _, _ = api.call("POST", f"/api/approvals/{approval_id}/approve", token=api.lead())
        with lock:
            statuses.append(status)

    with serialised_moto():  # moto is not atomic per request as DynamoDB is; our code still races freely
        run_together([approve] * 10)
    assert len(statuses) == 10 and all(s in (200, 202) for s in statuses), statuses
    assert wait_status(api, approval_id, "REFUNDED")["status"] == "REFUNDED"
    assert refund_rows(api, 7, approval_id) == 1
    o = order(api, 1999)
    invariant(o)
    assert o["refunded_cents"] == 16000


def test_unknown_and_malformed_ids_are_404(api: Api) -> None:
    for path in (
        "/api/approvals/apr_01JF3R0000000000000000000Z",
        "/api/approvals/not-an-id",
        "/api/approvals/apr_01JF3R0000000000000000000Z:evil",
    ):
        status, body, _ = api.call("GET", path, token=api.lead())
        assert (status, body["error"]["code"]) == (404, "not_found"), path
    status, _, _ = api.call("POST", "/api/approvals/apr_01JF3R0000000000000000000Z/approve", token=api.lead())
    assert status == 404
    status, _, _ = api.call("GET", "/api/approvals?status=BOGUS", token=api.lead())
    assert status == 400


def test_failed_refund_retry_and_release(api: Api) -> None:
    ddb = boto3.client("dynamodb")
    table = api.stack.function_env("ChatFunction")["CUSTOMER_DATA_TABLE"]
    key = {"customer_id": {"N": "8"}, "sk": {"S": "ORDER#2998"}}
    put_order(api, 8, 2998, 8000)
    approval_id, _ = raise_approval(api, 2998, 8000, customer=8)
    # Someone changed the order underneath: the reservation is gone.
    break_reservation(api, 8, 2998, 8000)
    api.call("POST", f"/api/approvals/{approval_id}/approve", token=api.lead())
    assert wait_status(api, approval_id, "FAILED", 20)["status"] == "FAILED"
    assert refund_rows(api, 8, approval_id) == 0
    # Put the reservation back, retry: REFUNDED.
    ddb.update_item(
        TableName=table,
        Key=key,
        UpdateExpression="SET reserved_cents = :r, available_cents = :z",
        ExpressionAttributeValues={":z": {"N": "0"}, ":r": {"N": "8000"}},
    )
    status, body, _ = api.call("POST", f"/api/approvals/{approval_id}/retry", token=api.lead())
    assert status in (200, 202), body
    assert wait_status(api, approval_id, "REFUNDED", 20)["status"] == "REFUNDED"
    assert refund_rows(api, 8, approval_id) == 1
    status, body, _ = api.call("POST", f"/api/approvals/{approval_id}/release", token=api.lead())
    assert status == 409
    # Reserved, approved, failed before the provider, retried, refunded: every attribute written is declared.
    assert undeclared(api, Approval, approval_id) == {}


def put_order(api: Api, customer: int, order_id: int, total: int) -> None:
    table = api.stack.function_env("ChatFunction")["CUSTOMER_DATA_TABLE"]
    seed_order(boto3.client("dynamodb"), table, customer, order_id, total)


def break_reservation(api: Api, customer: int, order_id: int, total: int) -> None:
    boto3.client("dynamodb").update_item(
        TableName=api.stack.function_env("ChatFunction")["CUSTOMER_DATA_TABLE"],
        Key={"customer_id": {"N": str(customer)}, "sk": {"S": f"ORDER#{order_id}"}},
        UpdateExpression="SET reserved_cents = :z, available_cents = :t",
        ExpressionAttributeValues={":z": {"N": "0"}, ":t": {"N": str(total)}},
    )


def test_release_a_failed_refund(api: Api) -> None:
    put_order(api, 8, 2999, 9000)
    approval_id, _ = raise_approval(api, 2999, 9000, customer=8)
    assert api.call("POST", f"/api/approvals/{approval_id}/release", token=api.lead())[0] == 409  # not FAILED
    # Make the flow fail: the order loses its reservation underneath, then comes back as it was.
    break_reservation(api, 8, 2999, 9000)
    api.call("POST", f"/api/approvals/{approval_id}/approve", token=api.lead())
    assert wait_status(api, approval_id, "FAILED", 20)["status"] == "FAILED"
    boto3.client("dynamodb").update_item(
        TableName=api.stack.function_env("ChatFunction")["CUSTOMER_DATA_TABLE"],
        Key={"customer_id": {"N": "8"}, "sk": {"S": "ORDER#2999"}},
        UpdateExpression="SET reserved_cents = :r, available_cents = :z",
        ExpressionAttributeValues={":z": {"N": "0"}, ":r": {"N": "9000"}},
    )
    status, body, _ = api.call("POST", f"/api/approvals/{approval_id}/release", token=api.lead())
    assert (status, body["status"]) == (200, "RELEASED")
    o = order(api, 2999, 8)
    invariant(o)
    assert (o["available_cents"], o["reserved_cents"], o["refunded_cents"]) == (9000, 0, 0)
    assert api.call("POST", f"/api/approvals/{approval_id}/retry", token=api.lead())[0] == 409


def test_release_when_the_order_lost_its_reservation_is_a_409_not_a_500(api: Api) -> None:
    """Found by the browser test: the order's condition failing in the release transaction escaped as a 500."""
    put_order(api, 8, 2998, 9000)
    approval_id, _ = raise_approval(api, 2998, 9000, customer=8)
    break_reservation(api, 8, 2998, 9000)
    api.call("POST", f"/api/approvals/{approval_id}/approve", token=api.lead())
    assert wait_status(api, approval_id, "FAILED", 20)["status"] == "FAILED"
    status, body, _ = api.call("POST", f"/api/approvals/{approval_id}/release", token=api.lead())
    assert status == 409, body
    assert body["error"]["code"] == "conflict" and "reserv" in body["error"]["message"], body
    assert api.call("GET", f"/api/approvals/{approval_id}", token=api.lead())[1]["status"] == "FAILED"
    o = order(api, 2998, 8)
    assert (o["available_cents"], o["reserved_cents"], o["refunded_cents"]) == (9000, 0, 0)  # nothing moved


def test_handoffs_listed_and_closed_by_leads(api: Api) -> None:
    api.model.script = [tools(tool_use("escalate_to_human", {"reason": "wants a person"})), answer("ok")]
    _, body, _ = api.call("POST", "/api/chat", {"message": "a human please"})
    handoff_id = body["trace"][0]["toolCalls"][0]["result"]["handoff_id"]
    assert api.call("GET", "/api/handoffs")[0] == 403
    status, listing, _ = api.call("GET", "/api/handoffs", token=api.lead())
    assert status == 200 and handoff_id in [h["handoffId"] for h in listing["handoffs"]]
    status, closed, _ = api.call("POST", f"/api/handoffs/{handoff_id}/close", {"note": "called back"}, token=api.lead())
    assert (status, closed["status"], closed["closedBy"]) == (200, "CLOSED", "lead-1")
    assert api.call("POST", f"/api/handoffs/{handoff_id}/close", token=api.lead())[0] == 409
    assert api.call("POST", "/api/handoffs/hof_nope/close", token=api.lead())[0] == 404
    _, listing, _ = api.call("GET", "/api/handoffs", token=api.lead())
    assert handoff_id not in [h["handoffId"] for h in listing["handoffs"]]
    assert undeclared(api, Handoff, handoff_id) == {}


def test_audit_needs_exactly_one_filter(api: Api) -> None:
    assert api.call("GET", "/api/audit", token=api.lead())[0] == 400
    assert api.call("GET", "/api/audit?conversationId=x&customerId=7", token=api.lead())[0] == 400
    assert api.call("GET", "/api/audit?customerId=7")[0] == 403


# ------------------------------------------------------------------ StartExecution failing, the TTL


def sweep(api: Api, at: datetime) -> SweepResult:
    """The sweep with ApprovalSweepFunction's deployed settings, its clock at ``at``."""
    cfg = load_settings(api.stack.function_env("ApprovalSweepFunction"))
    ddb = boto3.client("dynamodb")
    return ApprovalSweeper(
        ApprovalStore(ddb, cfg.approvals_table, cfg.customer_data_table, cfg.audit_table),
        ddb,
        boto3.client("sqs"),
        cfg.approval_queue_url,
        cfg.approval_ttl_hours,
        cfg.renotify_after_seconds,
        clock=lambda: at,
        sfn=boto3.client("stepfunctions"),
        state_machine_arn=cfg.refund_flow_arn,
    ).run()


def executions(api: Api, approval_id: str) -> list[str]:
    arn = api.stack.function_env("ApprovalsFunction")["REFUND_FLOW_ARN"]
    listed = boto3.client("stepfunctions").list_executions(stateMachineArn=arn, maxResults=1000)["executions"]
    return [e["name"] for e in listed if e["name"].startswith(approval_id)]


def test_approve_when_start_execution_is_throttled_answers_202_and_the_sweep_starts_the_flow(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    put_order(api, 7, 1996, 16000)
    approval_id, _ = raise_approval(api, 1996, 16000)
    throttled: list[str] = []

    def throttle_once(**kwargs: Any) -> None:
        if not throttled:
            throttled.append(kwargs["params"]["name"])
            raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}, "StartExecution")

    real_client = boto3.client

    def client(*args: Any, **kwargs: Any) -> Any:
        made = real_client(*args, **kwargs)
        if (args[0] if args else kwargs.get("service_name")) == "stepfunctions":
            made.meta.events.register("before-parameter-build.sfn.StartExecution", throttle_once)
        return made

    monkeypatch.setattr(boto3, "client", client)
    api.use_function("ApprovalsFunction")
    wiring.reset()

    status, body, _ = api.call("POST", f"/api/approvals/{approval_id}/approve", token=api.lead())

    # The decision stands; the refund starts later: 202 with the approval, never a bare 500.
    assert throttled == [approval_id]
    assert (status, body["status"], body["decidedBy"]) == (202, "APPROVED", "lead-1"), body
    assert executions(api, approval_id) == []
    assert order(api, 1996)["reserved_cents"] == 16000
    # Within the grace the sweep leaves it to the lead's request; past it, the sweep starts the flow.
    assert sweep(api, datetime.now(UTC)).flows_started == 0
    assert sweep(api, datetime.now(UTC) + timedelta(minutes=3)).flows_started == 1
    assert wait_status(api, approval_id, "REFUNDED")["status"] == "REFUNDED"
    assert sweep(api, datetime.now(UTC) + timedelta(minutes=20)).flows_started == 0
    # Exactly once: one execution, one refund row, the money moved once.
    assert executions(api, approval_id) == [approval_id]
    assert refund_rows(api, 7, approval_id) == 1
    o = order(api, 1996)
    invariant(o)
    assert (o["reserved_cents"], o["refunded_cents"]) == (0, 16000)


def test_an_approval_past_its_ttl_cannot_be_approved_even_before_the_sweep(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    put_order(api, 7, 1997, 16000)
    approval_id, _ = raise_approval(api, 1997, 16000)
    _, pending, _ = api.call("GET", f"/api/approvals/{approval_id}", token=api.lead())
    created = datetime.fromisoformat(pending["createdAt"].replace("Z", "+00:00"))
    ttl = timedelta(hours=int(api.stack.function_env("ApprovalsFunction")["APPROVAL_TTL_HOURS"]))
    expired_at = created + ttl + timedelta(milliseconds=1)
    monkeypatch.setattr(wiring, "utc_now", lambda: iso(expired_at))  # the lead function's clock
    api.use_function("ApprovalsFunction")
    wiring.reset()

    status, body, _ = api.call("POST", f"/api/approvals/{approval_id}/approve", token=api.lead())

    assert status == 409, body
    assert body["error"]["code"] == "conflict" and "expired" in body["error"]["message"]
    _, after, _ = api.call("GET", f"/api/approvals/{approval_id}", token=api.lead())
    assert (after["status"], after["decidedBy"]) == ("PENDING", None)
    assert order(api, 1997)["reserved_cents"] == 16000  # still reserved: expiry is the sweep's
    assert executions(api, approval_id) == []

    sweep(api, expired_at)

    _, swept, _ = api.call("GET", f"/api/approvals/{approval_id}", token=api.lead())
    assert swept["status"] == "EXPIRED"
    o = order(api, 1997)
    invariant(o)
    assert (o["available_cents"], o["reserved_cents"], o["refunded_cents"]) == (16000, 0, 0)


def test_an_approval_at_the_edge_of_its_ttl_can_still_be_approved(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    put_order(api, 7, 1995, 16000)
    approval_id, _ = raise_approval(api, 1995, 16000)
    _, pending, _ = api.call("GET", f"/api/approvals/{approval_id}", token=api.lead())
    created = datetime.fromisoformat(pending["createdAt"].replace("Z", "+00:00"))
    ttl = timedelta(hours=int(api.stack.function_env("ApprovalsFunction")["APPROVAL_TTL_HOURS"]))
    monkeypatch.setattr(wiring, "utc_now", lambda: iso(created + ttl))  # the sweep would not expire it yet
    api.use_function("ApprovalsFunction")
    wiring.reset()

    status, body, _ = api.call("POST", f"/api/approvals/{approval_id}/approve", token=api.lead())

    assert status in (200, 202), body
    assert wait_status(api, approval_id, "REFUNDED")["status"] == "REFUNDED"
