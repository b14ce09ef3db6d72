"""The customers' one word for where their refund is (tool answers, the conversation view, events).

Customers never see our internal states: an approval's (PENDING, APPROVED, SETTLING, ...), a ledger
row's (REQUESTED, SETTLING, SUCCEEDED, FAILED) and the request rows written before the ledger existed
(PENDING_APPROVAL, REFUNDED) all come down to seven words, mapped here once:

* PENDING approval -> PENDING_APPROVAL
* APPROVED, SETTLING, or a ledger row REQUESTED/SETTLING -> REFUND_IN_PROGRESS
* SUCCEEDED/REFUNDED -> REFUNDED
* REJECTED, EXPIRED, FAILED, RELEASED as the approval (or the ledger row) says.

An approval state and a ledger state never disagree on a word (SETTLING and FAILED mean the same in
both), so one table serves both.
"""

from __future__ import annotations

from typing import Literal

# A ledger row's states (refunds/ledger_row.py), which an approval's ``refund_status`` repeats.
LedgerStatus = Literal["REQUESTED", "SETTLING", "SUCCEEDED", "FAILED"]
CustomerRefundStatus = Literal[
    "PENDING_APPROVAL", "REFUND_IN_PROGRESS", "REFUNDED", "REJECTED", "EXPIRED", "FAILED", "RELEASED"
]

_WORDS: dict[str, CustomerRefundStatus] = {
    # approvals
    "PENDING": "PENDING_APPROVAL",
    "APPROVED": "REFUND_IN_PROGRESS",
    "SETTLING": "REFUND_IN_PROGRESS",
    "REFUNDED": "REFUNDED",
    "REJECTED": "REJECTED",
    "EXPIRED": "EXPIRED",
    "FAILED": "FAILED",
    "RELEASED": "RELEASED",
    # ledger rows
    "REQUESTED": "REFUND_IN_PROGRESS",
    "SUCCEEDED": "REFUNDED",
    # request rows as written (an approval request before its approval is read)
    "PENDING_APPROVAL": "PENDING_APPROVAL",
    "REFUND_IN_PROGRESS": "REFUND_IN_PROGRESS",
}


def customer_status(status: str | None) -> CustomerRefundStatus | None:
    """The customers' word for an approval's or a ledger row's status; None for one we never wrote."""
    return _WORDS.get(status or "")
