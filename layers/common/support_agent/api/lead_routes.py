"""Support-lead routes: approvals and their decisions, the audit trail, erasure. (The hand-off inbox, staff's and
leads', is api/staff_routes.py; ApprovalsFunction serves both.)"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar

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
    AuditRecord,
    AuditVerification,
    ErasureResult,
)
from support_agent.api.route_docs import responses, with_csv
from support_agent.approvals.decisions import Decision
from support_agent.auth import MAX_CUSTOMER_ID, require_role
from support_agent.clock import utc_datetime
from support_agent.errors import InvalidRequest, NotFound
from support_agent.ids import APPROVAL_ID, CONVERSATION_ID
from support_agent.reports.reading import DailyReport, daily_report, day_range
from support_agent.reports.report import to_csv
from support_agent.store.approvals import ApprovalStatus
from support_agent.store.audit import AuditRecord as StoredAuditRow
from support_agent.wiring import lead_services, rollup_store

router = APIGatewayHttpRouter()


class RejectRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str | None = Field(None, max_length=500)


class EraseRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str | None = Field(None, max_length=500, description="Why, e.g. the erasure request's reference")


def _lead() -> str:
    p = principal(router)  # type: ignore[arg-type]
    require_role(p, "support_lead")
    return p.sub


def _answer(decision: Decision) -> Response[Approval]:
    """200 when the decision is final, 202 while RefundFlow still runs."""
    return Response(200 if decision.done else 202, JSON, Approval.of(decision.approval))


_DECIDED = {
    202: "Accepted: RefundFlow still runs, or could not be started yet and the sweep starts it within minutes; "
    "poll GET /api/approvals/{approvalId}"
}
_LEAD = ["support lead"]
_DECISION_ERRORS = (401, 403, 404, 409)
_Route = TypeVar("_Route", bound=Callable[..., Any])
_NextToken = Annotated[str | None, Query(max_length=4096)]


def _read(
    path: str, summary: str, model: type[BaseModel], *errors: int, description: str | None = None
) -> Callable[[_Route], _Route]:
    """GET ``path``, a lead's read: answers ``model``."""
    return router.get(path, summary=summary, description=description, responses=responses(model, *errors), tags=_LEAD)


def _decision(
    verb: str, summary: str, description: str | None = None, errors: tuple[int, ...] = _DECISION_ERRORS
) -> Callable[[_Route], _Route]:
    """POST /api/approvals/{id}/<verb>: answers the approval, 200 once final and 202 while RefundFlow runs."""
    return router.post(
        f"/api/approvals/<approval_id>/{verb}",
        summary=summary,
        description=description,
        responses=responses(Approval, *errors, also=_DECIDED),
        tags=_LEAD,
    )


@_read("/api/approvals", "List approvals, newest first", ApprovalList, 400, 401, 403)
def list_approvals(
    status: Annotated[ApprovalStatus | None, Query()] = None, nextToken: _NextToken = None
) -> ApprovalList:
    _lead()
    page = pagination.page(nextToken, lambda start: lead_services().approvals.list(status, start_key=start))
    return ApprovalList(approvals=[Approval.of(a) for a in page.items], nextToken=pagination.encode(page.next_key))


@_read("/api/approvals/<approval_id>", "Read an approval", Approval, 401, 403, 404)
def get_approval(approval_id: str) -> Approval:
    _lead()
    return Approval.of(lead_services().decisions.get(approval_id))


@_decision(
    "approve",
    "Approve a PENDING refund and run RefundFlow",
    description=(
        "200 when the refund finished (REFUNDED or FAILED) within APPROVAL_WAIT_SECONDS, 202 (APPROVED) while it "
        "runs or when it could not be started (the sweep starts it), 202 (SETTLING) while the payment provider has "
        "the refund and has not confirmed it. Approving again while APPROVED or SETTLING waits the same way and "
        "starts nothing new. 409 when it is not PENDING, or was created more than APPROVAL_TTL_HOURS ago (expired, "
        "even before the sweep marks it EXPIRED)."
    ),
)
def approve(approval_id: str) -> Response[Approval]:
    return _answer(lead_services().decisions.approve(approval_id, _lead()))


@_decision("reject", "Reject a PENDING refund (its reservation is released)", errors=(400, *_DECISION_ERRORS))
def reject(approval_id: str, body: RejectRequest | None = None) -> Response[Approval]:
    lead = _lead()
    return _answer(lead_services().decisions.reject(approval_id, lead, body.reason if body else None))


_NOT_WHILE_SETTLING = "409 when it is not FAILED, SETTLING included (the provider may still make that refund)."


@_decision("retry", "Run RefundFlow again for a FAILED approval", description=_NOT_WHILE_SETTLING)
def retry(approval_id: str) -> Response[Approval]:
    return _answer(lead_services().decisions.retry(approval_id, _lead()))


@_decision("release", "Give up on a FAILED approval (its reservation is released)", description=_NOT_WHILE_SETTLING)
def release(approval_id: str) -> Response[Approval]:
    return _answer(lead_services().decisions.release(approval_id, _lead()))


@_read("/api/audit", "The audit trail of a conversation or of a customer, oldest first", AuditPage, 400, 401, 403)
def audit(
    conversationId: Annotated[str | None, Query(max_length=64, pattern=CONVERSATION_ID.pattern)] = None,
    customerId: Annotated[int | None, Query(ge=1, le=MAX_CUSTOMER_ID)] = None,
    nextToken: _NextToken = None,
) -> AuditPage:
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
    records = [AuditRecord.of(StoredAuditRow.from_item(r)) for r in rows]
    return AuditPage(records=records, nextToken=pagination.encode(last))


@_read(
    "/api/audit/verify",
    "Verify the hash chain of a conversation's or an approval's audit trail",
    AuditVerification,
    400,
    401,
    403,
    404,
    description="Recomputes every row of the stream and of the streams its rows name (approvals, hand-offs, "
    "refund keys) against their owners' heads: `status` `ok`, or `broken` with the first break and its kind "
    "(`changed`, `missing`, `inserted`, `reordered`). `streams` holds each stream's own answer.",
)
def audit_verify(
    conversationId: Annotated[str | None, Query(max_length=64, pattern=CONVERSATION_ID.pattern)] = None,
    approvalId: Annotated[str | None, Query(max_length=64, pattern=APPROVAL_ID.pattern)] = None,
) -> AuditVerification:
    _lead()
    if (conversationId is None) == (approvalId is None):
        raise InvalidRequest("give exactly one of conversationId or approvalId")
    stream = conversationId if conversationId is not None else f"approval#{approvalId}"
    audit = lead_services().audit
    answer = audit.verify_trail(stream)
    if answer["rows"] == 0 and audit.head(stream, []) is None:  # no row and no owner: nothing by that id
        raise NotFound("no audit trail by that id")
    return AuditVerification.model_validate(answer)


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
) -> ErasureResult:
    lead = _lead()
    request_id = router.current_event.request_context.request_id or "local"
    report = lead_services().eraser.erase_customer(customer_id, lead, request_id, body.reason if body else None)
    return ErasureResult.of(report)


_Day = Annotated[str | None, Query(max_length=10, pattern=r"^\d{4}-\d{2}-\d{2}$", description="YYYY-MM-DD (UTC)")]


@router.get(
    "/api/reports/daily",
    summary="Daily outcome reports: resolution, escalation, refunds, hand-offs, ratings, cost",
    description=(
        "The stored daily rollups from `from` to `to` (UTC days, both included; default the last 14 days ending "
        "today; at most 92), counts and the rates computed from them (a rate whose denominator is 0 is null). "
        "`format=csv`: the same days as a CSV download. Definitions: docs/OPERATIONS.md, Reading the reports."
    ),
    responses=with_csv(responses(DailyReport, 400, 401, 403), "reports-daily-<from>-<to>.csv"),
    tags=_LEAD,
)
def reports_daily(
    from_: Annotated[
        str | None, Query(alias="from", max_length=10, pattern=r"^\d{4}-\d{2}-\d{2}$", description="YYYY-MM-DD (UTC)")
    ] = None,
    to: _Day = None,
    format: Annotated[Literal["json", "csv"], Query()] = "json",
) -> Response[Any]:
    _lead()
    start, end = day_range(from_, to, utc_datetime().date())
    report = daily_report(rollup_store(), start, end)
    body = report.model_dump(mode="json")
    if format == "csv":
        disposition = f'attachment; filename="reports-daily-{start}-{end}.csv"'
        return Response(200, "text/csv; charset=utf-8", to_csv(body["days"]), {"Content-Disposition": disposition})
    return Response(200, JSON, body)
