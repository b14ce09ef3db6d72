"""request_refund: the only tool that moves money on the model's call, and the code (not the model) decides how.

Its declaration is actions/refund.py (the input the model may give, what the model is told, the policy's rule);
this module names the input model the registry offers (a deploy may change it: tests replace it here) and the desk
the declaration decides with (refunds/decide.py: a call's recorded answer found by its keys, eligibility, the
threshold rule, a direct refund or an approval request). A refusal comes back as the tool's error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from support_agent.actions.declaration import Action
from support_agent.actions.refund import DESCRIPTION, RequestRefundInput, refund_action
from support_agent.refunds import RefundDesk, RefundSettler, RefundWriter
from support_agent.store.customer_data import CustomerDataStore

__all__ = ["DESCRIPTION", "RequestRefundInput", "refund_declaration", "refund_desk"]


def refund_desk(
    store: CustomerDataStore,
    writer: RefundWriter,
    settler: RefundSettler,
    enqueue_approval: Callable[[str], None],
    threshold_cents: int,
) -> RefundDesk:
    return RefundDesk(store, writer, settler, enqueue_approval, threshold_cents)


def refund_declaration(desk: RefundDesk) -> Action[Any]:
    """The declaration, with this module's input model as it is now (`RequestRefundInput`)."""
    return refund_action(desk, RequestRefundInput)
