"""Support-lead routes: approvals and their decisions, hand-offs, and the audit trail."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Path, Query
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter
from pydantic import BaseModel, ConfigDict, Field

from support_agent.api import pagination
from support_agent.api.http import JSON, principal
from support_agent.api.responses import (
    Approval,
    ApprovalList,
    AuditPage,
    ErasureResult,
    Handoff,
    HandoffList,
    responses,
)
from support_agent.approvals.decisions import Decision, approval_view
from support_agent.auth import MAX_CUSTOMER_ID, require_role
from support_agent.config import get_settings
from support_agent.errors import Conflict, InvalidRequest, NotFound
from support_agent.ids import CONVERSATION_ID
from support_agent.store.approvals import STATUSES
from support_agent.store.erasure import conversation_eraser
from support_agent.store.handoffs import HandoffConflict
from support_agent.wiring import lead_services

router = APIGatewayHttpRouter()

ApprovalStatus = Literal["PENDING", "APPROVED", "REFUNDED", "FAILED", "REJECTED", "EXPIRED", "RELEASED"]
assert set(ApprovalStatus.__args__) == set(STATUSES)  # type: ignore[attr-defined]


class RejectRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str | None = Field(None, max_length=500)


class EraseRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str | None = Field(None, max_length=500, description="Why, e.g. the erasure request's reference")


class CloseRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    note: str | None = Field(None, max_length=500)


def _lead() -> str:
    p = principal(router)  # type: ignore[arg-type]
    require_role(p, "support_lead")
    return p.sub


def _answer(decision: Decision) -> Response[dict[str, Any]]:
    """200 when the decision is final, 202 while RefundFlow still runs."""
    return Response(200 if decision.done else 202, JSON, approval_view(decision.approval))


_DECIDED = {
    202: "Accepted: RefundFlow still runs, or could not be started yet and the sweep starts it within minutes; "
    "poll GET /api/approvals/{approvalId}"
}
_LEAD = ["support lead"]


@router.get(
    "/api/approvals",
    summary="List approvals, newest first",
    responses=responses(ApprovalList, 400, 401, 403),
    tags=_LEAD,
)
def list_approvals(
    status: Annotated[ApprovalStatus | None, Query()] = None,
    nextToken: Annotated[str | None, Query(max_length=4096)] = None,
) -> dict[str, Any]:
    _lead()
    page = pagination.page(nextToken, lambda start: lead_services().approvals.list(status, start_key=start))
    return {
        "approvals": [approval_view(a) for a in page.items if a.get("entity", "APPROVAL") == "APPROVAL"],
        "nextToken": pagination.encode(page.next_key),
    }


@router.get(
    "/api/approvals/<approval_id>", summary="Read an approval", responses=responses(Approval, 401, 403, 404), tags=_LEAD
)
def get_approval(approval_id: str) -> dict[str, Any]:
    _lead()
    return approval_view(lead_services().decisions.get(approval_id))


@router.post(
    "/api/approvals/<approval_id>/approve",
    summary="Approve a PENDING refund and run RefundFlow",
    description=(
        "200 when the refund finished (REFUNDED or FAILED) within APPROVAL_WAIT_SECONDS, 202 (APPROVED) while it "
        "runs or when it could not be started (the sweep starts it). 409 when it is not PENDING, or was created "
        "more than APPROVAL_TTL_HOURS ago (expired, even before the sweep marks it EXPIRED)."
    ),
    responses=responses(Approval, 401, 403, 404, 409, also=_DECIDED),
    tags=_LEAD,
)
def approve(approval_id: str) -> Response[dict[str, Any]]:
    return _answer(lead_services().decisions.approve(approval_id, _lead()))


@router.post(
    "/api/approvals/<approval_id>/reject",
    summary="Reject a PENDING refund (its reservation is released)",
    responses=responses(Approval, 400, 401, 403, 404, 409, also=_DECIDED),
    tags=_LEAD,
)
def reject(approval_id: str, body: RejectRequest | None = None) -> Response[dict[str, Any]]:
    lead = _lead()
    return _answer(lead_services().decisions.reject(approval_id, lead, body.reason if body else None))


@router.post(
    "/api/approvals/<approval_id>/retry",
    summary="Run RefundFlow again for a FAILED approval",
    responses=responses(Approval, 401, 403, 404, 409, also=_DECIDED),
    tags=_LEAD,
)
def retry(approval_id: str) -> Response[dict[str, Any]]:
    return _answer(lead_services().decisions.retry(approval_id, _lead()))


@router.post(
    "/api/approvals/<approval_id>/release",
    summary="Give up on a FAILED approval (its reservation is released)",
    responses=responses(Approval, 401, 403, 404, 409, also=_DECIDED),
    tags=_LEAD,
)
def release(approval_id: str) -> Response[dict[str, Any]]:
    return _answer(lead_services().decisions.release(approval_id, _lead()))


def handoff_view(h: dict[str, Any]) -> dict[str, Any]:
    return {
        "handoffId": h["approval_id"],
        "status": h.get("status"),
        "customerId": h.get("customer_id"),
        "conversationId": h.get("conversation_id"),
        "reason": h.get("reason"),
        "createdAt": h.get("created_at"),
        "closedBy": h.get("closed_by"),
        "closedAt": h.get("closed_at"),
    }


@router.get("/api/handoffs", summary="List hand-offs", responses=responses(HandoffList, 400, 401, 403), tags=_LEAD)
def list_handoffs(
    status: Annotated[Literal["OPEN", "CLOSED"], Query()] = "OPEN",
    nextToken: Annotated[str | None, Query(max_length=4096)] = None,
) -> dict[str, Any]:
    _lead()
    page = pagination.page(nextToken, lambda start: lead_services().approvals.list(status, start_key=start))
    return {
        "handoffs": [handoff_view(h) for h in page.items if h.get("entity") == "HANDOFF"],
        "nextToken": pagination.encode(page.next_key),
    }


@router.post(
    "/api/handoffs/<handoff_id>/close",
    summary="Close a hand-off",
    responses=responses(Handoff, 400, 401, 403, 404, 409),
    tags=_LEAD,
)
def close_handoff(handoff_id: str, body: CloseRequest | None = None) -> dict[str, Any]:
    lead = _lead()
    services = lead_services()
    try:
        return handoff_view(services.handoffs.close(handoff_id, lead, services.now(), body.note if body else None))
    except HandoffConflict as exc:
        if exc.current is None:
            raise NotFound("hand-off not found") from None
        raise Conflict(f"hand-off is {exc.current.get('status')}") from None


def audit_view(r: dict[str, Any]) -> dict[str, Any]:
    import json

    def parse(v: Any) -> Any:
        try:
            return json.loads(v) if isinstance(v, str) else v
        except ValueError:
            return v

    return {
        "eventId": r.get("event_id"),
        "action": r.get("action"),
        "tool": r.get("tool"),
        "input": parse(r.get("input")),
        "output": parse(r.get("output")),
        "outcome": r.get("outcome"),
        "actor": r.get("actor"),
        "conversationId": r.get("conversation_id"),
        "approvalId": r.get("approval_id"),
        "customerId": r.get("customer_id"),
        "requestId": r.get("request_id"),
        "createdAt": r.get("created_at"),
    }


@router.get(
    "/api/audit",
    summary="The audit trail of a conversation or of a customer, oldest first",
    responses=responses(AuditPage, 400, 401, 403),
    tags=_LEAD,
)
def audit(
    conversationId: Annotated[str | None, Query(max_length=64, pattern=CONVERSATION_ID.pattern)] = None,
    customerId: Annotated[int | None, Query(ge=1, le=MAX_CUSTOMER_ID)] = None,
    nextToken: Annotated[str | None, Query(max_length=4096)] = None,
) -> dict[str, Any]:
    _lead()
    if (conversationId is None) == (customerId is None):
        raise InvalidRequest("give exactly one of conversationId or customerId")
    store = lead_services().audit
    if conversationId is not None:
        if not CONVERSATION_ID.match(conversationId):
            raise InvalidRequest("conversationId: invalid")
        rows, last = store.conversation_trail(conversationId), None
    else:
        assert customerId is not None
        customer = customerId
        rows, last = pagination.page(
            nextToken,
            lambda start: store.page_customer(customer, start),
            lambda k: k.get("customer_id") == {"N": str(customer)},
        )
    return {"records": [audit_view(r) for r in rows], "nextToken": pagination.encode(last)}


@router.post(
    "/api/customers/<customer_id>/erase",
    summary="Erase a customer's conversations (the audit trail stays)",
    description=(
        "Replaces every message's content with tombstones (`[erased]`, tool inputs `{}`), keeping the history "
        "valid, and writes one `customer_erased` audit row. Conversations with a turn in progress are skipped "
        "(`complete: false`): call again. Idempotent. See docs/RETENTION.md."
    ),
    responses=responses(ErasureResult, 400, 401, 403),
    tags=_LEAD,
)
def erase_customer(
    customer_id: Annotated[int, Path(ge=1, le=MAX_CUSTOMER_ID)], body: EraseRequest | None = None
) -> dict[str, Any]:
    lead = _lead()
    request_id = router.current_event.request_context.request_id or "local"
    report = conversation_eraser(get_settings()).erase_customer(
        customer_id, lead, request_id, body.reason if body else None
    )
    return {
        "customerId": report.customer_id,
        "conversations": report.conversations,
        "messages": report.messages,
        "skipped": report.skipped,
        "complete": report.complete,
        "auditEventId": report.audit_event_id,
    }
