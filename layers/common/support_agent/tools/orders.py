"""Read-only tools: an order and its invoices, from the signed-in customer's partition only."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from support_agent.store.customer_data import CustomerDataStore, Order
from support_agent.tools.registry import Tool, ToolContext, ToolError

OrderId = Field(..., ge=1, le=2_147_483_647, strict=True, description="The numeric order id, e.g. 1042.")


class LookupOrderInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    order_id: int = OrderId


class ListInvoicesInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    order_id: int | None = Field(
        None, ge=1, le=2_147_483_647, strict=True, description="Only invoices of this order; omit for all."
    )


def order_view(order: Order) -> dict[str, Any]:
    """What the model sees of an order: a whitelist (the payment intent stays ours)."""
    return {
        "order_id": order.order_id,
        "status": order.status,
        "items": [
            {
                "name": i.get("name", ""),
                "quantity": i.get("quantity", 1),
                "price_cents": i.get("price_cents", 0),
            }
            for i in order.items
        ],
        "total_cents": order.total_cents,
        "currency": order.currency,
        "refunded_cents": order.refunded_cents,
        "pending_refund_cents": order.reserved_cents,
        "refundable_cents": order.available_cents,
        "placed_at": order.placed_at,
        "shipping_address": order.shipping_address,
        "note": order.note,
    }


def not_found(order_id: int) -> ToolError:
    # Identical for a missing order and another customer's: nothing leaks through the wording.
    return ToolError(f"order {order_id} was not found for this customer")


def order_tools(store: CustomerDataStore) -> list[Tool[Any]]:
    def lookup_order(args: LookupOrderInput, ctx: ToolContext) -> dict[str, Any]:
        order = store.get_order(ctx.customer_id, args.order_id)
        if order is None:
            raise not_found(args.order_id)
        return order_view(order)

    def list_invoices(args: ListInvoicesInput, ctx: ToolContext) -> dict[str, Any]:
        invoices = [
            {
                "invoice_id": i["invoice_id"],
                "order_id": i["order_id"],
                "amount_cents": i["amount_cents"],
                "currency": i["currency"],
                "status": i.get("status", "PAID"),
                "issued_at": i.get("issued_at", ""),
                "memo": i.get("memo", ""),
            }
            for i in store.list_invoices(ctx.customer_id)
            if args.order_id is None or i["order_id"] == args.order_id
        ]
        if args.order_id is not None and not invoices and store.get_order(ctx.customer_id, args.order_id) is None:
            raise not_found(args.order_id)
        return {"invoices": invoices}

    return [
        Tool(
            "lookup_order",
            "Look up one of the signed-in customer's orders by its numeric id: status, items, total, "
            "how much was already refunded, how much is pending approval, and how much can still be "
            "refunded. Use it before answering any question about an order or requesting a refund.",
            LookupOrderInput,
            lookup_order,
        ),
        Tool(
            "list_invoices",
            "List the signed-in customer's invoices (id, order, amount, status, date), optionally only "
            "those of one order. Use it when the customer asks about invoices, charges or billing.",
            ListInvoicesInput,
            list_invoices,
        ),
    ]
