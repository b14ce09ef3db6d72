"""Support-lead routes: approvals and their decisions, hand-offs, and the audit trail."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Query
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter
from pydantic import BaseModel, ConfigDict, Field

from support_agent.api import pagination
from support_agent.api.http import JSON, principal
from support_agent.approvals.decisions import Decision, approval_view
from support_agent.auth import require_role
from support_agent.errors import BadRequest, Conflict, NotFound
from support_agent.ids import CONVERSATION_ID
from support_agent.store.approvals import STATUSES
from support_agent.store.handoffs import HandoffConflict
from support_agent.wiring import lead_services

router = APIGatewayHttpRouter()

ApprovalStatus = Literal["PENDING", "APPROVED", "REFUNDED", "FAILED", "REJECTED", "EXPIRED", "RELEASED"]
assert set(ApprovalStatus.__args__) == set(STATUSES)  # type: ignore[attr-defined]


class RejectRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str | None = Field(None, max_length=500)


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


@router.get("/api/approvals")
def list_approvals(
    status: Annotated[ApprovalStatus | None, Query()] = None,
    nextToken: Annotated[str | None, Query(max_length=4096)] = None,
) -> dict[str, Any]:
    _lead()
    page = lead_services().approvals.list(status, start_key=pagination.decode(nextToken))
    return {
        "approvals": [approval_view(a) for a in page.items if a.get("entity", "APPROVAL") == "APPROVAL"],
        "nextToken": pagination.encode(page.next_key),
    }


@router.get("/api/approvals/<approval_id>")
def get_approval(approval_id: str) -> dict[str, Any]:
    _lead()
    return approval_view(lead_services().decisions.get(approval_id))


@router.post("/api/approvals/<approval_id>/approve")
def approve(approval_id: str) -> Response[dict[str, Any]]:
    return _answer(lead_services().decisions.approve(approval_id, _lead()))


@router.post("/api/approvals/<approval_id>/reject")
def reject(approval_id: str, body: RejectRequest | None = None) -> Response[dict[str, Any]]:
    lead = _lead()
    return _answer(lead_services().decisions.reject(approval_id, lead, body.reason if body else None))


@router.post("/api/approvals/<approval_id>/retry")
def retry(approval_id: str) -> Response[dict[str, Any]]:
    return _answer(lead_services().decisions.retry(approval_id, _lead()))


@router.post("/api/approvals/<approval_id>/release")
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


@router.get("/api/handoffs")
def list_handoffs(
    status: Annotated[Literal["OPEN", "CLOSED"], Query()] = "OPEN",
    nextToken: Annotated[str | None, Query(max_length=4096)] = None,
) -> dict[str, Any]:
    _lead()
    page = lead_services().approvals.list(status, start_key=pagination.decode(nextToken))
    return {
        "handoffs": [handoff_view(h) for h in page.items if h.get("entity") == "HANDOFF"],
        "nextToken": pagination.encode(page.next_key),
    }


@router.post("/api/handoffs/<handoff_id>/close")
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


@router.get("/api/audit")
def audit(
    conversationId: Annotated[str | None, Query(max_length=64)] = None,
    customerId: Annotated[int | None, Query(ge=1)] = None,
    nextToken: Annotated[str | None, Query(max_length=4096)] = None,
) -> dict[str, Any]:
    _lead()
    if (conversationId is None) == (customerId is None):
        raise BadRequest("give exactly one of conversationId or customerId")
    store = lead_services().audit
    if conversationId is not None:
        if not CONVERSATION_ID.match(conversationId):
            raise BadRequest("conversationId: invalid")
        rows, last = store.conversation_trail(conversationId), None
    else:
        assert customerId is not None
        start = pagination.decode(nextToken, lambda k: k.get("customer_id") == {"N": str(customerId)})
        rows, last = store.page_customer(customerId, start)
    return {"records": [audit_view(r) for r in rows], "nextToken": pagination.encode(last)}
