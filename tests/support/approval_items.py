"""Items of the Approvals table as the stores read them, for tests that hand a store its item directly (a
recording client's ``items``, a record parsed from one): a refund approval and a hand-off, both customer 7's."""

from __future__ import annotations

from typing import Any


def approval_item(approval_id: str, conversation_id: str | None, **fields: Any) -> dict[str, Any]:
    """A refund approval of 90.00 USD on order 1042, created at "t" (``fields``: its status, and any other)."""
    return {
        "approval_id": approval_id,
        "customer_id": 7,
        "order_id": 1042,
        "amount_cents": 9000,
        "currency": "USD",
        "conversation_id": conversation_id,
        "created_at": "t",
        **fields,
    }


def handoff_item(handoff_id: str = "hof_1", **fields: Any) -> dict[str, Any]:
    """An OPEN hand-off created at "t" (``fields``: its conversation, a closing, …)."""
    return {
        "approval_id": handoff_id,
        "entity": "HANDOFF",
        "status": "OPEN",
        "customer_id": 7,
        "created_at": "t",
        **fields,
    }
