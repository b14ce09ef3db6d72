"""A customer's orders and invoices written for a test beyond the demo data, shaped as the demo's are.

Orders go through devstack/seed.py's ``put_order`` (the one shape of a seeded order); what these add is the demo's
look: one item for the whole total, placed on the demo's date, and invoices as ``list_invoices`` reads them.
"""

from __future__ import annotations

from typing import Any

from devstack.seed import put_order
from support_agent.store.dynamo import to_item

PLACED_AT = "2026-10-02T10:15:00Z"  # when the demo's orders were placed


def put_one_item_order(
    ddb: Any, table: str, customer_id: int, order_id: int, total_cents: int, item: str, **fields: Any
) -> dict[str, Any]:
    """An order of one ``item`` costing the whole total, placed on the demo's date (``fields``: status, note, …)."""
    items = [{"name": item, "quantity": 1, "price_cents": total_cents}]
    return put_order(ddb, table, customer_id, order_id, total_cents, items=items, placed_at=PLACED_AT, **fields)


def invoice_item(customer_id: int, invoice_id: int, order_id: int, amount_cents: int, memo: str = "") -> dict[str, Any]:
    """An invoice as the CustomerData table holds it (in USD)."""
    return {
        "customer_id": customer_id,
        "sk": f"INVOICE#{invoice_id}",
        "invoice_id": invoice_id,
        "order_id": order_id,
        "amount_cents": amount_cents,
        "currency": "USD",
        "memo": memo,
    }


def put_invoice(
    ddb: Any, table: str, customer_id: int, invoice_id: int, order_id: int, amount_cents: int, memo: str = ""
) -> None:
    """`invoice_item`, written."""
    ddb.put_item(TableName=table, Item=to_item(invoice_item(customer_id, invoice_id, order_id, amount_cents, memo)))
