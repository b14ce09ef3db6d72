"""Load the demo data (docs/ARCHITECTURE.md, "Demo data") into the CustomerData table.

Usage: ``python -m devstack.seed --table NAME [--file devstack/demo_data.json]`` (uses the AWS
endpoint in the environment, e.g. the local stack's moto).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

DEMO_DATA = Path(__file__).with_name("demo_data.json")


def payment_intent_of(order: dict[str, Any]) -> str:
    """The order's payment at the provider: its own ``payment_intent``, else the demo's ``pi_demo_<order id>``."""
    return str(order.get("payment_intent") or f"pi_demo_{order['order_id']}")


def order_item(
    customer_id: int,
    order_id: int,
    total_cents: int,
    *,
    status: str = "DELIVERED",
    currency: str = "USD",
    payment_intent: str | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """An order as the CustomerData table holds it, everything refundable: available = total, nothing reserved or
    refunded. The one shape of a seeded order (the demo data, the tests, the benchmarks); ``fields`` adds the rest
    (``items``, ``placed_at``, ``shipping_address``, ...)."""
    return {
        "customer_id": customer_id,
        "sk": f"ORDER#{order_id}",
        "order_id": order_id,
        "status": status,
        "total_cents": total_cents,
        "currency": currency,
        "available_cents": total_cents,
        "reserved_cents": 0,
        "refunded_cents": 0,
        "items": [],
        **({"payment_intent": payment_intent} if payment_intent else {}),
        **fields,
    }


def put_order(ddb: Any, table: str, customer_id: int, order_id: int, total_cents: int, **kwargs: Any) -> dict[str, Any]:
    """`order_item`, written (over any order of that id); the item as written."""
    from support_agent.store.dynamo import to_item

    item = order_item(customer_id, order_id, total_cents, **kwargs)
    ddb.put_item(TableName=table, Item=to_item(item))
    return item


def demo_items(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The items to store: orders start with everything refundable, nothing reserved or refunded.

    Every order carries its ``payment_intent`` (what a provider refund names; the simulated Stripe knows
    the same ones). It stays in the table: the order view the model reads lists its fields explicitly. Its
    ``shipping_address`` (what update_shipping_address changes, actions/address.py) and any other field the data
    gives (a cancelled order's ``cancelled_by``) are stored as given.
    """
    currency = data.get("currency", "USD")
    items: list[dict[str, Any]] = []
    for customer in data["customers"]:
        cid = customer["customer_id"]
        items.append({"customer_id": cid, "sk": "PROFILE", "name": customer["name"]})
        for order in customer["orders"]:
            rest = {k: v for k, v in order.items() if k not in ("order_id", "total_cents")}
            rest.update(currency=currency, payment_intent=payment_intent_of(order))
            items.append(order_item(cid, order["order_id"], order["total_cents"], **rest))
        for invoice in customer["invoices"]:
            items.append(
                {
                    "customer_id": cid,
                    "sk": f"INVOICE#{invoice['invoice_id']}",
                    **invoice,
                    "currency": currency,
                    "status": invoice.get("status", "PAID"),
                }
            )
    return items


def seed(ddb: Any, table: str, data: dict[str, Any] | None = None) -> int:
    from support_agent.store.dynamo import to_item

    items = demo_items(data or json.loads(DEMO_DATA.read_text()))
    for item in items:
        ddb.put_item(TableName=table, Item=to_item(item))
    return len(items)


def main() -> None:
    import boto3

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--table", required=True)
    parser.add_argument("--file", type=Path, default=DEMO_DATA)
    args = parser.parse_args()
    count = seed(boto3.client("dynamodb"), args.table, json.loads(args.file.read_text()))
    print(f"seeded {count} items into {args.table}")


if __name__ == "__main__":
    main()
