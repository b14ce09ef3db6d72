"""RefundFlow's execution names and input (the flow itself is statemachine/refund_flow.asl.json).

Execution names are the approval id (``<id>-r<n>`` for the n-th retry), so a repeated start of the
same attempt is refused or deduplicated by Step Functions itself. They are validated here because
AWS rejects names over 80 characters or with ``:``, ``#``, whitespace or control characters (moto
does not check). The flow's audit rows are written by its refund step (PaymentsFunction).

Input: ``{"approvalId": "apr_<ULID>", "startId": "<ULID>"}``; ``startId`` is fresh per start and only
makes each start's input unique (see `start_flow`).
Output of a SUCCEEDED execution: ``{"approvalId", "status": "REFUNDED" | "SETTLING", "refundId",
"replayed": bool}`` (SETTLING: the provider's answer stayed unknown; the payment sweep owns it).
A FAILED execution's error is ``RefundFailed`` (the provider refused: the approval is FAILED, with
an audit row), ``ApprovalNotApproved`` or ``ApprovalNotFound`` (nothing changed).

:func:`start_flow` is the one way both the lead API and the sweep start an attempt, so "it already
exists" means the same to both: the name was taken, by a running or a finished execution.
"""

from __future__ import annotations

import json
from typing import Any

from botocore.exceptions import ClientError

from support_agent.ids import APPROVAL_ID, ulid
from support_agent.store.dynamo import error_code

MAX_EXECUTION_NAME = 80
_FORBIDDEN_IN_NAMES = frozenset(':#<>{}[]?*"%\\^|~`$&,;/')


def _check_approval_id(approval_id: str) -> None:
    if not isinstance(approval_id, str) or not APPROVAL_ID.fullmatch(approval_id):
        raise ValueError("not an approval id (apr_ + ULID)")


def execution_name(approval_id: str, retry: int = 0) -> str:
    """``apr_…`` for the first execution, ``apr_…-r<n>`` for retry ``n`` (``n >= 1``)."""
    _check_approval_id(approval_id)
    if not isinstance(retry, int) or isinstance(retry, bool) or retry < 0:
        raise ValueError("retry must be an int >= 0")
    name = approval_id if retry == 0 else f"{approval_id}-r{retry}"
    if len(name) > MAX_EXECUTION_NAME:
        raise ValueError(f"execution name longer than {MAX_EXECUTION_NAME} characters")
    if any(c.isspace() or not c.isprintable() or c in _FORBIDDEN_IN_NAMES for c in name):
        raise ValueError("execution name has a character Step Functions rejects")
    return name


def flow_input(approval_id: str) -> dict[str, Any]:
    """The execution input: the approval, and a fresh start id."""
    _check_approval_id(approval_id)
    return {"approvalId": approval_id, "startId": ulid()}


def start_flow(sfn: Any, state_machine_arn: str, approval_id: str, retry: int = 0) -> bool:
    """Start attempt ``retry`` of the approval's RefundFlow: True if this call started it, False if it
    already existed (running or finished). Every other error is raised.

    Each call carries a fresh start id, so a repeat never matches the first input and Step Functions
    answers ExecutionAlreadyExists for it, whether the first is running or done (a repeat with equal
    input while the first runs would be accepted silently, and counted here as started). Even a
    second execution could not refund twice (the refund step asks the provider with the ledger row's
    attempt key): the name only saves the work.
    """
    try:
        sfn.start_execution(
            stateMachineArn=state_machine_arn,
            name=execution_name(approval_id, retry),
            input=json.dumps(flow_input(approval_id)),
        )
    except ClientError as exc:
        if error_code(exc) == "ExecutionAlreadyExists":
            return False
        raise
    return True
