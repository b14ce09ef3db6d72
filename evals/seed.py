"""One trial's world: the task's customers, orders and invoices written into the running local stack's moto under
fresh numeric ids, a payment at the simulated Stripe for each paid order, and the customer's token.

Fresh ids per trial keep trials apart without resetting the stack: nothing a trial does can be read by the next.
Customers, orders and invoices draw from disjoint ranges, so an id found in a reply names one thing only.
"""

from __future__ import annotations

import itertools
import re
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from devstack.seed import put_order
from devstack.tokens import mint_token
from evals.task import CustomerSeed, Task

CUSTOMER_IDS_FROM = 500_000
ORDER_IDS_FROM = 700_000
INVOICE_IDS_FROM = 900_000
_lock = threading.Lock()
_customers = itertools.count(CUSTOMER_IDS_FROM)
_orders = itertools.count(ORDER_IDS_FROM)
_invoices = itertools.count(INVOICE_IDS_FROM)
_PLACEHOLDER = re.compile(r"\{([a-z][a-z0-9_]*)\}")


def _next(counter: itertools.count[int]) -> int:
    with _lock:
        return next(counter)


@dataclass
class SeededCustomer:
    customer_id: int
    name: str
    orders: dict[str, int]  # label -> order id
    invoices: dict[str, int]  # label -> invoice id
    notes: list[str]  # the free text on their orders and invoices (what must not leak to someone else)
    address_line1: str = ""  # every order's shipping address as seeded


@dataclass
class Trial:
    """A task's trial: who the customer is, the label -> id map, and what was there before it began."""

    task_id: str
    number: int
    customer: SeededCustomer
    others: list[SeededCustomer]
    token: str
    payment_intents: dict[str, str] = field(default_factory=dict)  # order label -> pi_eval_<id>
    seeded_refunds: set[str] = field(default_factory=set)  # provider refund ids that predate the trial

    @property
    def ids(self) -> dict[str, int]:
        """Every label of the trial (orders and invoices of every customer) with its numeric id."""
        out: dict[str, int] = {}
        for c in [self.customer, *self.others]:
            out.update(c.orders)
            out.update(c.invoices)
        return out

    def fill(self, text: str) -> str:
        """``{o1}`` -> the order's id, ``{me}`` -> the customer's id, ``{name}`` -> their name; others stay."""
        values = {k: str(v) for k, v in self.ids.items()}
        values.update(me=str(self.customer.customer_id), name=self.customer.name)
        return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), text)

    def owner_of(self, label: str) -> SeededCustomer:
        for c in [self.customer, *self.others]:
            if label in c.orders or label in c.invoices:
                return c
        raise KeyError(label)


def _address(name: str, customer_id: int) -> dict[str, str]:
    return {
        "name": name,
        "line1": f"{customer_id % 1000} Alder Street",
        "city": "Portland",
        "region": "OR",
        "postal_code": "97205",
        "country": "US",
    }


def _seed_customer(ddb: Any, table: str, stripe: Any, seed: CustomerSeed, trial: Trial | None) -> SeededCustomer:
    from support_agent.store.dynamo import to_item

    cid = _next(_customers)
    ddb.put_item(TableName=table, Item=to_item({"customer_id": cid, "sk": "PROFILE", "name": seed.name}))
    now = datetime.now(UTC)
    orders: dict[str, int] = {}
    notes = [o.note for o in seed.orders.values() if o.note] + [i.memo for i in seed.invoices.values() if i.memo]
    for label, order in seed.orders.items():
        oid = orders[label] = _next(_orders)
        intent = f"pi_eval_{oid}" if order.with_payment else None
        put_order(
            ddb,
            table,
            cid,
            oid,
            order.total_cents,
            status=order.status,
            payment_intent=intent,
            placed_at=(now - timedelta(days=order.placed_days_ago)).strftime("%Y-%m-%dT%H:%M:%SZ"),
            items=[{"name": order.item, "quantity": 1, "price_cents": order.total_cents}],
            shipping_address=_address(seed.name, cid),
            note=order.note,
            available_cents=order.total_cents - order.refunded_cents,
            refunded_cents=order.refunded_cents,
        )
        if intent is not None and trial is not None:
            trial.payment_intents[label] = intent
        if intent is not None and stripe is not None:
            stripe.add_payment_intent(intent, order.total_cents, "usd")
            if order.refunded_cents and trial is not None:
                trial.seeded_refunds.add(_earlier_refund(stripe, intent, order.refunded_cents))
    invoices: dict[str, int] = {}
    for label, invoice in seed.invoices.items():
        iid = invoices[label] = _next(_invoices)
        total = seed.orders[invoice.order].total_cents
        item = {
            "customer_id": cid,
            "sk": f"INVOICE#{iid}",
            "invoice_id": iid,
            "order_id": orders[invoice.order],
            "amount_cents": total,
            "issued_at": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "memo": invoice.memo,
            "currency": "USD",
            "status": "PAID",
        }
        ddb.put_item(TableName=table, Item=to_item(item))
    return SeededCustomer(cid, seed.name, orders, invoices, notes, _address(seed.name, cid)["line1"])


def _earlier_refund(stripe: Any, intent: str, amount: int) -> str:
    """A settled refund at the provider matching the order's ``refunded_cents``. Made on the ledger directly, not
    through ``refund_outside``: that one sends a webhook the stack would take for a refund made behind its back."""
    from devstack.simulated_stripe.ledger import RefundRequest

    refund = stripe.ledger.create(RefundRequest(intent, None, amount, None, "requested_by_customer"), "succeeded")
    return str(refund["id"])


def seed_trial(local: Any, task: Task, number: int) -> Trial:
    """Write ``task``'s world into ``local`` (a devstack LocalStack) and mint the customer's token."""
    import boto3

    ddb = boto3.client("dynamodb", endpoint_url=local.moto_url, region_name="us-east-1")
    table = local.stack.physical_ids["CustomerDataTable"]
    stripe = local.stripe.stripe if local.stripe is not None else None
    placeholder = SeededCustomer(0, "", {}, {}, [])
    trial = Trial(task.id, number, placeholder, [], "")
    trial.customer = _seed_customer(ddb, table, stripe, task.customer, trial)
    trial.others = [_seed_customer(ddb, table, stripe, other, trial) for other in task.others]
    trial.token = customer_token(local, trial.customer.customer_id)
    return trial


def customer_token(local: Any, customer_id: int) -> str:
    params = local.stack.parameters
    return mint_token(
        f"customer-{customer_id}",
        "customer",
        customer_id,
        secret=params["JwtSecret"],
        issuer=params.get("JwtIssuer", "support-agent-local"),
        audience=params.get("JwtAudience", "support-agent"),
        ttl_seconds=3600,
    )
